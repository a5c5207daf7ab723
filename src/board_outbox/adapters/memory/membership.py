"""In-memory membership heartbeats (S1)."""

from __future__ import annotations

from anyio.lowlevel import checkpoint

from board_outbox.ports import Member


class MemoryMembershipStore:
    def __init__(self) -> None:
        self._leases: dict[str, float] = {}

    async def heartbeat(self, member_id: str, now: float, ttl_seconds: float) -> list[Member]:
        await checkpoint()
        self._leases[member_id] = now + ttl_seconds
        return [Member(m, exp) for m, exp in sorted(self._leases.items()) if exp > now]

    async def live(self, now: float) -> list[Member]:
        await checkpoint()
        return [Member(m, exp) for m, exp in sorted(self._leases.items()) if exp > now]

    async def leave(self, member_id: str) -> None:
        await checkpoint()
        self._leases.pop(member_id, None)
