"""Validation at the boundary (SPEC R1, R2): the checks of single values a stored or typed
document carries before the core acts on it -- seqs, finite numbers, tenant ids, bots,
priorities, a subscription as a whole, and the bounds of a card.

Pure: no store access. A stored row read raw is checked in ``row_documents``, the service's own
collections' documents in ``service_documents``; a bad document is reported through
``bad_documents``.
"""

from __future__ import annotations

import math
import re
from typing import TypeGuard

from board_outbox.model.bad_documents import cap
from board_outbox.model.bounds import MAX_PRIORITY, MIN_PRIORITY
from board_outbox.model.errors import InvalidId
from board_outbox.model.ids import LAUNCH, check_id, check_kind
from board_outbox.model.limits import rate_problem
from board_outbox.model.row_keys import MAX_SEQ
from board_outbox.model.subscriptions import Subscription

MAX_LABELS = 100  # consume_labels / labels_all entries a subscription may carry
MAX_BOT_CHARS = 200  # a subscription's bot: what a launch names, and what limits and pauses key on
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
MAX_CARD_TITLE = 64 * 1024  # characters: rows embed the title, and a row must stay far below 16 MB
MAX_CARD_LABELS = 1000


def is_seq(value: object) -> bool:
    """A true int (not bool, float, Decimal128...) in the counter's range. BSON longs decode as
    ``bson.Int64``, an int subclass: those are ints."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_SEQ


def tenant_problem(tenant_id: object) -> str | None:
    """Why ``tenant_id`` cannot be drained (None: it can). A tenant id ends up in card and row
    keys split on "/": one that carries the separator would read another tenant's keys."""
    if not isinstance(tenant_id, str):
        return f"tenant id {tenant_id!r} is not a string"
    try:
        check_id("tenant_id", tenant_id)
    except InvalidId as exc:
        return str(exc)
    return None


def bot_problem(bot: str) -> str | None:
    """Why ``bot`` cannot be a subscription's bot (None: it can): 1-200 characters, no control
    character, no leading or trailing whitespace. A launch names it, and limits and pauses key
    on it: an empty one launches at nobody, one with a newline cannot be typed to pause it."""
    if not bot or len(bot) > MAX_BOT_CHARS or _CONTROL.search(bot) or bot != bot.strip():
        return (f"invalid bot {cap(repr(bot), 100)}: use 1-{MAX_BOT_CHARS} characters, without "
                "control characters or leading or trailing whitespace")
    return None


def subscription_problem(sub: Subscription) -> str | None:
    """Why a decoded subscription must not be used (None: it may). Its id must be an id (it is
    part of its rows' keys), its bot a name (``bot_problem``). Its label lists are bounded:
    a 10,000-label consume is a pathological write that would pause the whole store. Its effect
    kind must be an id, and not ``projection``. Its priority is a whole number from
    ``MIN_PRIORITY`` to ``MAX_PRIORITY`` (a decoded document is held to that by its type; a
    subscription built in memory is checked here)."""
    if (problem := priority_problem(sub.priority)) is not None:
        return problem
    try:
        # its id is part of every row key it owes: one that is not an id (a slash, a newline)
        # makes keys that no command can address (``parse_row_key`` refuses them)
        check_id("sub_id", sub.sub_id)
        check_kind(sub.kind)
    except InvalidId as exc:
        return str(exc)
    if (problem := bot_problem(sub.bot)) is not None:
        return problem
    for name, labels in (("consume_labels", sub.consume_labels),
                         ("rule.labels_all", sub.rule.labels_all)):
        if len(labels) > MAX_LABELS:
            return f"{name} has {len(labels)} entries (at most {MAX_LABELS})"
    if sub.max_per_second is not None and (problem := rate_problem(sub.max_per_second)):
        return f"max_per_second: {problem}"
    if sub.coalesce is not None and sub.kind != LAUNCH:
        return f"coalesce applies to launch subscriptions only (this one is of kind {sub.kind!r})"
    return None


def priority_problem(value: object) -> str | None:
    """Why ``value`` is not a priority (None: it is): an int, not a bool, in range."""
    if not isinstance(value, int) or isinstance(value, bool):
        return f"priority {cap(repr(value), 100)} is not a whole number"
    if not MIN_PRIORITY <= value <= MAX_PRIORITY:
        shown = repr(value) if abs(value) < 10**18 else "beyond 10^18"  # str(10**5000) raises
        return f"priority {shown} is outside {MIN_PRIORITY}..{MAX_PRIORITY}"
    return None


def is_number(value: object) -> TypeGuard[float]:
    """A finite int or float, not a bool (a stored time or count the core can compute with)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def finite(value: object) -> float | None:
    """``value`` as a float when it is a finite number (int or float, not bool), else None."""
    return float(value) if is_number(value) else None
