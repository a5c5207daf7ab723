"""A card's burst of coalescing rows (``burst_at`` set): the newest row of the burst, the
first that covers it (done, or closed), a new event's deadline carried onto the pending row,
and a restart of the burst's clock. Each over the partial ``burst_sub_card_seq`` index."""

from __future__ import annotations

from typing import Any

from pymongo import ASCENDING, DESCENDING

from board_outbox.adapters.mongo.errors import translated
from board_outbox.adapters.mongo.outbox.statements import OutboxCollection
from board_outbox.model.row_documents import row_summary
from board_outbox.model.rows import CLAIMED, DONE, LIVE_STATES, PENDING
from board_outbox.ports import RowIdentity


class OutboxBursts(OutboxCollection):
    """``newest_in_burst``, ``covered_in_burst``, ``carry_burst``, ``restart_burst``."""

    def _burst_query(self, tenant_id: str, sub_id: str, card_id: str,
                     after_seq: int) -> dict[str, Any]:
        # the partial ``burst_sub_card_seq`` index: ``burst_at`` exists on coalescing rows only
        return {"tenant_id": tenant_id, "sub_id": sub_id, "event.card_id": card_id,
                "seq": {"$gt": after_seq}, "burst_at": {"$exists": True},
                "state": {"$in": [PENDING, CLAIMED, DONE]}}

    @translated
    async def newest_in_burst(self, tenant_id: str, sub_id: str, card_id: str,
                              after_seq: int) -> RowIdentity | None:
        """One query over the partial ``burst_sub_card_seq`` index, newest first: the first of
        the card's newer rows in a state that runs or ran; only the identifying fields."""
        docs = await self.coll.find(
            self._burst_query(tenant_id, sub_id, card_id, after_seq),
            {"_id": 0, "row_key": 1, "seq": 1, "kind": 1, "state": 1, "sub_id": 1},
        ).sort([("seq", DESCENDING)]).limit(1).to_list(1)
        return next((s for d in docs if (s := row_summary(d)) is not None), None)

    @translated
    async def covered_in_burst(self, tenant_id: str, sub_id: str, card_id: str,
                              after_seq: int) -> RowIdentity | None:
        q = self._burst_query(tenant_id, sub_id, card_id, after_seq)
        q["$or"] = [{"state": DONE}, {"burst_closed": True}]
        docs = await self.coll.find(
            q, {"_id": 0, "row_key": 1, "seq": 1, "kind": 1, "state": 1, "sub_id": 1},
        ).sort([("seq", ASCENDING)]).limit(1).to_list(1)
        return next((s for d in docs if (s := row_summary(d)) is not None), None)

    @translated
    async def carry_burst(self, row_key: str, *, burst_at: float, due_by: float, now: float,
                          close: bool = False) -> bool:
        update: dict[str, Any] = {"$min": {"burst_at": burst_at, "not_before": due_by},
                                  "$set": {"updated_at": now}}
        if close:
            update["$set"]["burst_closed"] = True
        res = await self.coll.update_one({"row_key": row_key, "state": PENDING}, update)
        return bool(res.matched_count == 1)

    @translated
    async def restart_burst(self, tenant_id: str, sub_id: str, card_id: str, after_seq: int,
                            *, at: float) -> int:
        res = await self.coll.update_many(
            {"tenant_id": tenant_id, "sub_id": sub_id, "event.card_id": card_id,
             "seq": {"$gt": after_seq}, "burst_at": {"$exists": True},
             "state": {"$in": list(LIVE_STATES)}},
            {"$max": {"burst_at": at}})
        return int(res.modified_count)
