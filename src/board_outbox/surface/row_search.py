"""A row search as an operator writes it -- ``rows find``'s flags, the console's search box, the
API's query parameters -- parsed into a ``RowQuery``. Every bad value is one ``UsageError``
naming it (the CLI: one line, exit 2; the console and the API: a 400)."""

from __future__ import annotations

from board_outbox.model.errors import InvalidId, InvalidRowKey, UsageError
from board_outbox.model.ids import check_id
from board_outbox.model.row_documents import ROW_STATES
from board_outbox.model.row_keys import MAX_SEQ, parse_row_key
from board_outbox.model.search import MAX_FIND, RowQuery

__all__ = ["parse_query"]

MAX_CARD = 200  # characters of a card id


def parse_query(*, card: str | None = None, event: str | None = None,
                seq_range: str | None = None, row_key: str | None = None,
                state: str | None = None, tenant: str | None = None,
                limit: int = 100) -> RowQuery:
    """Exactly one of the forms, with what it needs."""
    given = [name for name, v in (("card", card), ("event", event), ("seq-range", seq_range),
                                  ("row-key", row_key), ("state", state)) if v]
    if len(given) != 1:
        raise UsageError("rows find: give one of --card, --event, --seq-range, --row-key, "
                         f"--state ({'none' if not given else ', '.join(given)} given)")
    if not 0 < limit <= MAX_FIND:
        raise UsageError(f"rows find: --limit {limit}: expected 1 to {MAX_FIND}")
    tid = _id("tenant", tenant) if tenant else None
    if card:
        if tid is None:
            raise UsageError("rows find: --card needs --tenant (a card id is the tenant's)")
        if len(card) > MAX_CARD or not card.isprintable():
            raise UsageError(f"rows find: --card: 1 to {MAX_CARD} printable characters")
        return RowQuery(form="card", tenant=tid, card=card, limit=limit)
    if event:
        t, sep, seq = event.rpartition(":")
        if not sep or not t:
            raise UsageError(f"rows find: --event {event[:60]!r}: expected TENANT:SEQ")
        if tid is not None and tid != t:
            raise UsageError("rows find: --event names another tenant than --tenant")
        n = _seq("--event", seq)
        return RowQuery(form="event", tenant=_id("tenant", t), seq_from=n, seq_to=n,
                        limit=limit)
    if seq_range:
        if tid is None:
            raise UsageError("rows find: --seq-range needs --tenant")
        a, sep, b = seq_range.partition("..")
        if not sep:
            raise UsageError(f"rows find: --seq-range {seq_range[:60]!r}: expected A..B")
        lo, hi = _seq("--seq-range", a), _seq("--seq-range", b)
        if lo > hi:
            raise UsageError(f"rows find: --seq-range {lo}..{hi}: A must not be above B")
        return RowQuery(form="seq_range", tenant=tid, seq_from=lo, seq_to=hi, limit=limit)
    if row_key:
        try:
            parse_row_key(row_key)
        except InvalidRowKey as exc:
            raise UsageError(f"rows find: --row-key: {exc}") from None
        return RowQuery(form="row_key", row_key=row_key, limit=1)
    assert state is not None
    if state not in ROW_STATES:
        raise UsageError(f"rows find: --state {state[:40]!r}: one of "
                         f"{', '.join(sorted(ROW_STATES))}")
    return RowQuery(form="state", state=state, tenant=tid, limit=limit)


def _id(what: str, value: str) -> str:
    try:
        return check_id(what, value)
    except InvalidId as exc:
        raise UsageError(f"rows find: {exc}") from None


def _seq(flag: str, text: str) -> int:
    text = text.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 19 or not 1 <= int(text) <= MAX_SEQ:
        raise UsageError(f"rows find: {flag}: {text[:30]!r} is not a seq (1 to 2^63-1)")
    return int(text)
