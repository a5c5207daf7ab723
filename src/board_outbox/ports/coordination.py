"""What every replica shares to work together: its heartbeats (membership), the launch
limits and the operators' pauses."""

from __future__ import annotations

from typing import Protocol

from board_outbox.model.pause import Pause
from board_outbox.model.records import LimitHolder, Member

__all__ = ["LimitStore", "MembershipStore", "PauseStore"]


class MembershipStore(Protocol):
    """Replicas' heartbeats (S1): a lease per member. Only a hint for sharing work: the cursor
    CAS and the fenced claims stay the only correctness mechanism."""

    async def heartbeat(self, member_id: str, now: float, ttl_seconds: float) -> list[Member]:
        """Renew this member's lease; return the live members (expires_at > now), this one
        included."""
        ...

    async def heartbeat_with_pauses(self, member_id: str, now: float, ttl_seconds: float,
                                    ) -> tuple[list[Member], list[Pause]]:
        """``heartbeat`` whose read of the members reads the pauses too (F3), in the same
        round trip: the pauses ride the heartbeat (S6). Each pause document parsed alone, as
        ``PauseStore.all`` parses them; a backend without pauses returns none."""
        ...

    async def leave(self, member_id: str) -> None: ...

    async def live(self, now: float) -> list[Member]:
        """The live members (expires_at > now), by member_id, without renewing anyone (for
        ``status``: the replicas alive)."""
        ...


class LimitStore(Protocol):
    """Concurrency and rate limits shared by every replica (F2). Each call is atomic on one
    document, no transaction: a limit holds across processes, not per process."""

    async def acquire(self, key: str, limit: int, holder: str, until: float, now: float) -> bool:
        """Take one of ``limit`` in-flight slots of ``key`` for ``holder`` until ``until`` (a
        slot whose ``until`` is at or before ``now`` is free again: its holder died). True
        also when ``holder`` holds one already. False: all ``limit`` are held."""
        ...

    async def renew(self, key: str, holder: str, until: float) -> bool:
        """Push the end of the slot ``holder`` holds of ``key`` to ``until`` (its launch runs
        on). Fenced on the holder: False, nothing written, when ``holder`` holds no slot of
        ``key`` (released, or taken over by another holder after its end)."""
        ...

    async def release(self, key: str, holder: str) -> None:
        """Free the slot ``holder`` holds of ``key`` (none held: nothing happens)."""
        ...

    async def take(self, key: str, per_second: float, now: float) -> bool:
        """Count one launch of ``key`` at ``now`` against ``per_second`` (``model/limits``
        windows). False: the window is full, nothing counted."""
        ...

    # --- read-only: what ``explain`` shows of a limit

    async def holders(self, key: str, now: float) -> list[LimitHolder]:
        """The in-flight slots of ``key`` held at ``now`` (``until`` after it), by holder, in one
        read (Mongo: the ``key_holder`` index). A slot document no launch can have written
        (``validation.slot_problem``) is left out and reported: it is free to take over."""
        ...

    async def counted(self, key: str, per_second: float, now: float) -> int | None:
        """The launches of ``key`` counted in the ``per_second`` window holding ``now`` (0: none
        yet), one read by id. None: the counter is not a count (its window stays shut)."""
        ...

    async def upkeep(self) -> list[str]:
        """Re-create the store's indexes when they are gone (its collection dropped while the
        service runs: without the TTL index, slots and counters would pile up); the names
        created. One index listing when they are there: a periodic pass calls it, never a
        launch."""
        ...


class PauseStore(Protocol):
    """The operators' pauses (F3), one small document per (scope, key), read whole by
    every replica once per heartbeat. Each call is atomic on one document."""

    async def pause(self, scope: str, key: str, *, reason: str, by: str, at: float) -> bool:
        """Pause (``scope``, ``key``), or update the reason of a pause that is on; an audit entry
        is appended either way (the newest ``AUDIT_KEEP`` are kept). True when it was not
        paused before. A stored document that does not parse is written whole again."""
        ...

    async def resume(self, scope: str, key: str, *, by: str, at: float) -> bool:
        """Lift the pause (the document stays, ``active`` false, for its audit), an audit entry
        appended. False, and nothing written, when it is not paused."""
        ...

    async def all(self) -> list[Pause]:
        """Every pause document, on or lifted, in one read, each parsed on its own
        (``model/pause.parse_pause``): one that does not parse is left out and reported once,
        and the others stand."""
        ...
