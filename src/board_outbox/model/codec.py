"""Documents <-> structs: a Struct as a store document, a stored document decoded back, and
what a refusal says.

A leaf that knows no domain type: every store document decodes through ``from_doc``, so one
that does not decode raises a typed ``Malformed*`` error naming the field, and costs only itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from typing import Any, Final, TypeVar

import msgspec

from board_outbox.model.bad_documents import cap
from board_outbox.model.errors import MalformedDocument
from board_outbox.model.times import TIME_MAX, TIME_MIN, stamp, time_problem

T = TypeVar("T")


def to_doc(obj: msgspec.Struct) -> dict[str, Any]:
    """A Struct as a store document (datetimes stay datetimes: Mongo's TTL needs a BSON date)."""
    doc = msgspec.to_builtins(obj, builtin_types=(datetime,))
    assert isinstance(doc, dict)
    return doc


_UNREADABLE: ContextVar[list[MalformedDocument] | None] = ContextVar("unreadable", default=None)
UNREADABLE_KEPT: Final = 1000  # documents one ``unreadable()`` block keeps at most


@contextmanager
def unreadable() -> Iterator[list[MalformedDocument]]:
    """The documents that fail to decode (``from_doc``) in the reads made inside the block, by
    this task: a listing that leaves them out can still name them, and say why."""
    got: list[MalformedDocument] = []
    token = _UNREADABLE.set(got)
    try:
        yield got
    finally:
        _UNREADABLE.reset(token)


def from_doc(
    doc: Mapping[str, Any], typ: type[T], error: Callable[[object, str], MalformedDocument]
) -> T:
    """Decode a stored document; unknown fields (``_id``...) are ignored, bad ones raise ``error``
    naming the field and what it holds (a time out of range says so: R7)."""
    try:
        return msgspec.convert(doc, typ, builtin_types=(datetime,))
    except (msgspec.ValidationError, TypeError) as exc:
        ref: object = doc
        detail = str(exc)
        if isinstance(doc, Mapping):
            ref = doc.get("row_key") or doc.get("seq") or doc.get("_id")
            if isinstance(exc, msgspec.ValidationError):
                detail = decode_problem(doc, detail)
        err = error(ref, detail)
        seen = _UNREADABLE.get()
        if seen is not None and len(seen) < UNREADABLE_KEPT:
            seen.append(err)
        raise err from None


_PATH = re.compile(r" - at `\$((?:\.[A-Za-z_][A-Za-z0-9_]*|\[\d+\])+)`$")
_TIME_BOUNDS = (f"<= {TIME_MAX}", f">= {TIME_MIN}")


def decode_problem(doc: Mapping[str, Any], msg: str) -> str:
    """msgspec's refusal of ``doc`` (``msg``) with the stored value it refused; a time out of
    range as R7's one line (``times.time_problem``)."""
    m = _PATH.search(msg)
    if m is None:
        return msg
    value: Any = doc
    for part in re.findall(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]", m.group(1)):
        name, index = part
        if name and isinstance(value, Mapping) and name in value:
            value = value[name]
        elif index and isinstance(value, list) and int(index) < len(value):
            value = value[int(index)]
        else:
            return msg
    path = m.group(1).lstrip(".")
    if msg.startswith("Expected `float`") and any(b in msg for b in _TIME_BOUNDS) and \
            stamp(value) is None:
        return time_problem(path, value) or msg
    return f"{msg} (stored: {cap(repr(value), 80)})"
