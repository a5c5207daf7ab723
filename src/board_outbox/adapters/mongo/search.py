"""A row search's one query (A8, ``EffectOutbox.search``), each form over an index:

- card: ``tenant_card_seq`` (tenant, the event's card, seq), newest seq first;
- event and seq range: ``tenant_seq``, newest seq first;
- row key: ``row_key_unique``;
- state: that state's partial index, by its key, newest first (the pending rows of one tenant
  over ``pending_tenant_not_before``; a tenant's done rows, most of its history, over
  ``tenant_seq``).

The partial indexes are hinted (a planner may not consider an index whose partial filter the
query only implies); the full ones are not: an equality on their prefix and a sort on the rest
of their key is what every planner serves from them."""

from __future__ import annotations

from typing import Any

from pymongo import DESCENDING

from board_outbox.model.rows import CANCELLED, CLAIMED, COALESCED, DONE, FAILED, PENDING
from board_outbox.model.search import RowQuery

__all__ = ["CARD_INDEX", "STATE_ORDER", "search_of"]


CARD_INDEX = "tenant_card_seq"
BY_SEQ = [("seq", DESCENDING)]
# a state's partial index and its key, newest first
STATE_ORDER: dict[str, tuple[str, list[tuple[str, int]]]] = {
    PENDING: ("pending_not_before", [("not_before", DESCENDING)]),
    CLAIMED: ("claimed_lease_until", [("lease_until", DESCENDING)]),
    FAILED: ("failed_updated_at_row_key", [("updated_at", DESCENDING), ("row_key", DESCENDING)]),
    DONE: ("done_ttl", [("done_at", DESCENDING)]),
    COALESCED: ("coalesced_ttl", [("done_at", DESCENDING)]),
    CANCELLED: ("cancelled_ttl", [("done_at", DESCENDING)]),
}


def search_of(q: RowQuery, in_state: dict[str, dict[str, Any]]) -> tuple[
        dict[str, Any], list[tuple[str, int]] | None, str | None]:
    """(filter, sort, hint) of the search ``q``; ``in_state``: a state's filter its partial
    index serves (``outbox.statements.IN_STATE``)."""
    if q.form == "row_key":
        return {"row_key": q.row_key}, None, None
    if q.form == "card":
        return {"tenant_id": q.tenant, "event.card_id": q.card}, BY_SEQ, None
    if q.form in ("event", "seq_range"):
        return ({"tenant_id": q.tenant, "seq": {"$gte": q.seq_from, "$lte": q.seq_to}},
                BY_SEQ, None)
    assert q.state is not None
    flt = dict(in_state.get(q.state, {"state": q.state}))
    if q.tenant is None:
        index, order = STATE_ORDER[q.state]
        return flt, order, index
    flt["tenant_id"] = q.tenant
    if q.state == PENDING:
        return flt, [("not_before", DESCENDING)], "pending_tenant_not_before"
    if q.state == DONE:
        flt.pop("done_at", None)
        flt["seq"] = {"$gte": 0}  # the ``tenant_seq`` key's range, as the state's key's
        return flt, BY_SEQ, None
    index, order = STATE_ORDER[q.state]
    return flt, order, index
