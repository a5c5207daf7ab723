"""The ids a row key is built from, and the effect kinds.

Tenant, subscription and projection ids are checked here before they reach a key or a store;
the kinds ``launch`` and ``projection`` are the two the service itself knows. Separate so the
documents, the row keys and the checks at the boundary share one rule for what an id is.
"""

from __future__ import annotations

import re
from typing import Final

from board_outbox.model.errors import InvalidId

LAUNCH: Final = "launch"
PROJECTION: Final = "projection"
# what an id may be: safe to embed in a row key, which splits on "/"
ID_PATTERN = re.compile(r"^[A-Za-z0-9_.:@-]{1,200}$")


def check_kind(kind: object) -> str:
    """A subscription's effect kind: an id (as ``check_id``), and not ``projection`` (projection
    rows come from the configured projections, one per event, never from a subscription)."""
    if not isinstance(kind, str):
        raise InvalidId(f"invalid kind {kind!r}: not a string")
    check_id("kind", kind)
    if kind == PROJECTION:
        raise InvalidId("invalid kind 'projection': projection rows come from the configured "
                        "projections, not from a subscription")
    return kind


def check_id(what: str, value: str) -> str:
    """Tenant, subscription and projection ids must be safe to embed in a row key."""
    if not isinstance(value, str) or not ID_PATTERN.fullmatch(value):
        raise InvalidId(
            f"invalid {what} {value!r}: use 1-200 characters from A-Z a-z 0-9 _ . : @ -"
        )
    return value
