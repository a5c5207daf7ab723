"""Row keys: how an effect row's key is written from (event, subscription) or (event,
projection), a rerun's key, and a key read back into its parts.

Separate from the rows: commands parse an operator's key here before any store is asked.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

from board_outbox.model.errors import InvalidRowKey
from board_outbox.model.ids import ID_PATTERN


def launch_row_key(tenant_id: str, seq: int, sub_id: str) -> str:
    return f"{tenant_id}/{seq}/sub/{sub_id}"


def projection_row_key(tenant_id: str, seq: int, projection: str) -> str:
    # "proj" in the third place: no (event, subscription) pair can produce this key.
    return f"{tenant_id}/{seq}/proj/{projection}"


class RowKey(msgspec.Struct, frozen=True, kw_only=True):
    """A row key read back into its parts (``parse_row_key``): ``part`` is ``sub`` (a
    subscription's row, any kind) or ``proj`` (a projection's row); ``name`` the sub_id or the
    projection."""

    tenant_id: str
    seq: int
    part: Literal["sub", "proj"]
    name: str
    rerun: int = 0  # A8: the N of a rerun's ``/rerun/N`` (0: not a rerun)


MAX_SEQ: Final = 2**63 - 1  # the seq counter is a BSON long
MAX_RERUN_DEPTH: Final = 8  # reruns of reruns a key may carry


def parse_row_key(text: str) -> RowKey:
    """The parts of a row key as ``launch_row_key`` and ``projection_row_key`` write it
    (``TENANT/SEQ/sub/SUB_ID`` or ``TENANT/SEQ/proj/PROJECTION``), a rerun's (A8) followed by
    ``/rerun/N``. Raises ``InvalidRowKey`` with one line saying what is wrong (the operator's
    typo never reaches a store)."""
    shown = repr(text) if len(text) <= 120 else repr(text[:100]) + f"... ({len(text)} characters)"
    form = "TENANT/SEQ/sub/SUB_ID or TENANT/SEQ/proj/PROJECTION"
    parts = text.split("/")
    reruns = parts[4:]
    if len(parts) < 4 or len(reruns) % 2 or len(reruns) > 2 * MAX_RERUN_DEPTH or any(
            word != "rerun" or not (n.isascii() and n.isdigit() and 0 < len(n) <= 9
                                    and int(n) > 0)
            for word, n in zip(reruns[::2], reruns[1::2], strict=True)):
        raise InvalidRowKey(f"{shown} is not a row key: expected {form}")
    tenant, seq, part, name = parts[:4]
    if part not in ("sub", "proj"):
        raise InvalidRowKey(f"{shown} is not a row key: the third part is {part[:20]!r}, "
                            f"not 'sub' or 'proj' ({form})")
    if not (seq.isascii() and seq.isdigit()) or not 1 <= int(seq) <= MAX_SEQ:
        raise InvalidRowKey(f"{shown} is not a row key: seq {seq[:30]!r} is not a whole "
                            "number from 1 to 2^63-1")
    for what, value in (("tenant", tenant), ("subscription" if part == "sub" else "projection",
                                             name)):
        if not ID_PATTERN.fullmatch(value):  # fullmatch: "$" alone lets a trailing newline by
            raise InvalidRowKey(f"{shown} is not a row key: the {what} part {value[:30]!r} is "
                                "not 1-200 characters from A-Z a-z 0-9 _ . : @ -")
    return RowKey(tenant_id=tenant, seq=int(seq), part="sub" if part == "sub" else "proj",
                  name=name, rerun=int(reruns[-1]) if reruns else 0)


def rerun_row_key(row_key: str, n: int) -> str:
    """A8: the key of the ``n``-th rerun of the row ``row_key`` (a new Idempotency-Key)."""
    return f"{row_key}/rerun/{n}"
