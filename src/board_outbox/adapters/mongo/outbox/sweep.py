"""The stuck-row sweep's queries: the live rows no claim or mark will ever move (a due time or
lease that is no number or lies past any a writer writes, no tenant, a state outside the
enum), found under one time budget so the sweep never holds the worker. Apart from the gauges:
it returns whole documents to park, and keeps a cursor across sweeps."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pymongo
from pymongo.errors import PyMongoError

from board_outbox.adapters.mongo.errors import translated
from board_outbox.adapters.mongo.outbox.statements import IN_STATE, TENANT_INDEX, OutboxCollection, _once
from board_outbox.model.row_documents import LEASE_HORIZON_SECONDS, ROW_STATES
from board_outbox.model.rows import CLAIMED, PENDING
from board_outbox.model.times import due_limit

R = TypeVar("R")
SCAN_CHUNK = 2000  # rows the stuck-row sweep's rolling unknown-state scan reads per sweep
# what the stuck-row sweep's statements may take together, server-side (``stuck_rows``)
SWEEP_BUDGET_SECONDS = 2.0


class _Budget:
    """Statements sharing a time budget (``pymongo.timeout``: the server stops each at what is
    left). ``run`` returns None, said once per what, when the budget is spent or the statement
    ran out of it."""

    def __init__(self, seconds: float) -> None:
        self.until = time.monotonic() + seconds

    async def run(self, statement: Callable[..., Awaitable[R]], what: str) -> R | None:
        left = self.until - time.monotonic()
        if left <= 0:
            return None
        try:
            with pymongo.timeout(left):
                return await statement()
        except PyMongoError as exc:
            if not exc.timeout:
                raise
            _once(("budget", what), logging.WARNING,
                  "%s did not finish within the stuck-row sweep's budget (%gs) on this server: "
                  "it waits for the next sweep", what, SWEEP_BUDGET_SECONDS)
            return None


class OutboxSweep(OutboxCollection):
    """``stuck_rows``."""

    _scan_after: Any = None  # where the rolling unknown-state scan goes on

    @translated
    async def stuck_rows(
        self, now: float, limit: int, horizon: float = LEASE_HORIZON_SECONDS
    ) -> list[tuple[Any, dict[str, Any]]]:
        """One query per way a live row can be stuck, each hinted to the partial index of its
        state that bounds it (the one mongod plans for it anyway): its cost is the rows in that
        state, never the done history. (As one ``$or``, a planner that plans no ``$or`` on an
        index scanned the collection.) A state outside the enum has no index that can find it:
        a rolling scan of the ``_id`` index, ``SCAN_CHUNK`` rows per sweep, looks for those (a
        lap over a million rows takes ``1e6 / SCAN_CHUNK`` sweeps).

        The sweep is housekeeping beside the worker's claims: its statements share
        ``SWEEP_BUDGET_SECONDS`` (a server-side time limit each); on a server where one cannot
        finish in that (a planner that walks a whole index, or scans the collection for an
        ``_id`` range), the rest waits for the next sweep, said once, instead of holding the
        worker and loading the store for as long as the scan takes."""
        not_number = {"$not": {"$type": "number"}}
        not_string = {"$not": {"$type": "string"}}
        queries = [
            ({"state": PENDING, "not_before": not_number}, "pending_not_before"),
            # R7: a due time no writer writes (past the stored-time range)
            ({"state": PENDING, "not_before": {"$gt": due_limit(now)}}, "pending_not_before"),
            ({**IN_STATE[PENDING], "tenant_id": not_string}, TENANT_INDEX),
            ({"state": CLAIMED, "lease_until": not_number}, "claimed_lease_until"),
            ({"state": CLAIMED, "lease_until": {"$gt": now + horizon}}, "claimed_lease_until"),
            ({**IN_STATE[CLAIMED], "tenant_id": not_string}, "claimed_lease_until"),
        ]
        docs: list[dict[str, Any]] = []
        seen: set[Any] = set()
        budget = _Budget(SWEEP_BUDGET_SECONDS)
        for q, index in queries:
            if len(docs) >= limit:
                break
            found = await budget.run(
                self.coll.find(q).hint(index).limit(limit - len(docs)).to_list,
                f"stuck-row query over {index}")
            if found is None:
                return [(d["_id"], d) for d in docs]
            for d in found:
                if d["_id"] not in seen:
                    seen.add(d["_id"])
                    docs.append(d)
        if len(docs) < limit:
            docs += await budget.run(lambda: self._unknown_states(limit - len(docs)),
                                     "unknown-state scan") or []
        return [(d["_id"], d) for d in docs]

    async def _unknown_states(self, limit: int) -> list[dict[str, Any]]:
        """The next ``SCAN_CHUNK`` rows by ``_id`` (the ObjectIds the service mints; at the end
        of a lap, the few rows whose ``_id`` is something else), and of those the ones whose
        state is outside the enum, read whole."""
        after = self._scan_after
        q = {"_id": {"$gt": after} if after is not None else {"$type": "objectId"}}
        page = await self.coll.find(q, {"state": 1}).sort("_id", 1).limit(SCAN_CHUNK).to_list(None)
        self._scan_after = page[-1]["_id"] if len(page) == SCAN_CHUNK else None
        if self._scan_after is None:  # a lap ends
            page += await self.coll.find({"_id": {"$not": {"$type": "objectId"}}},
                                         {"state": 1}).limit(SCAN_CHUNK).to_list(None)
        odd = [d["_id"] for d in page if d.get("state") not in ROW_STATES][:limit]
        if not odd:
            return []
        return await self.coll.find({"_id": {"$in": odd}}).to_list(None)  # type: ignore[no-any-return]
