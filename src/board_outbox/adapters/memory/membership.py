"""In-memory membership heartbeats (S1). Leases are parsed as the Mongo adapter parses its
documents (a planted bad lease is reported and left out)."""

from __future__ import annotations

from anyio.lowlevel import checkpoint

from board_outbox.model.bad_documents import BAD_DOCUMENTS
from board_outbox.model.pause import Pause
from board_outbox.model.service_documents import member_problem
from board_outbox.ports import Member, PauseStore

MEMBERS = "board_outbox_members"


class MemoryMembershipStore:
    def __init__(self, pauses: PauseStore | None = None) -> None:
        self._leases: dict[str, float] = {}
        self.pauses = pauses  # what ``heartbeat_with_pauses`` reads beside the members

    async def heartbeat(self, member_id: str, now: float, ttl_seconds: float) -> list[Member]:
        await checkpoint()
        self._leases[member_id] = now + ttl_seconds
        return self._live(now)

    async def heartbeat_with_pauses(self, member_id: str, now: float, ttl_seconds: float,
                                    ) -> tuple[list[Member], list[Pause]]:
        live = await self.heartbeat(member_id, now, ttl_seconds)
        return live, [] if self.pauses is None else await self.pauses.all()

    async def live(self, now: float) -> list[Member]:
        await checkpoint()
        return self._live(now)

    def _live(self, now: float) -> list[Member]:
        out: list[Member] = []
        for m, exp in self._leases.items():
            problem = member_problem(m, exp, now)
            if problem is not None:
                BAD_DOCUMENTS.report(MEMBERS, m, problem)
            elif exp > now:
                out.append(Member(m, float(exp)))
        return sorted(out, key=lambda x: x.member_id)

    async def leave(self, member_id: str) -> None:
        await checkpoint()
        self._leases.pop(member_id, None)
