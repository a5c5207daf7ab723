"""Leaderless tenant ownership (S1): replicas heartbeat into a membership store (a lease per
member) and each tenant belongs to the live member that wins rendezvous hashing for it.

Ownership only shares the work out: a replica drains (stream wake and poll) the tenants it owns,
its change stream leaves out the tenants the others own (S5), and its worker prefers their
rows. It is never a correctness mechanism -- two replicas that
disagree about membership both drain a tenant and the cursor CAS and fenced claims decide, as
without ownership. A member whose heartbeat stops is dropped by the others once its lease
expires, and its tenants move to them within ``heartbeat_timeout_seconds``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import uuid
from collections.abc import Collection, Iterable

import msgspec

from board_outbox.model.bad_documents import BAD_DOCUMENTS
from board_outbox.model.bounds import Pos
from board_outbox.model.clock import Clock
from board_outbox.model.errors import StoreError, StoreUnavailable
from board_outbox.model.pause import Pause
from board_outbox.model.service_documents import member_problem
from board_outbox.ports import Member, MembershipStore

log = logging.getLogger("board_outbox.membership")


class MembershipSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``[membership]`` configuration section."""

    enabled: bool = True
    # a dead member's tenants move to the others within this (lease 2/3 of it, beat every 1/6)
    heartbeat_timeout_seconds: Pos = 10.0

    @property
    def lease_seconds(self) -> float:
        return self.heartbeat_timeout_seconds * 2 / 3

    @property
    def interval_seconds(self) -> float:
        return self.heartbeat_timeout_seconds / 6


MEMBERS = "board_outbox_members"


def trusted(members: Iterable[Member], now: float, settings: MembershipSettings) -> list[Member]:
    """The leases a replica may believe: a lease is written one ``lease_seconds`` ahead of its
    heartbeat, so one that ends further ahead than ``heartbeat_timeout_seconds`` was not
    written by a heartbeat (a hand edit, a clock far ahead): trusting it would hand tenants to
    a member that may be long gone, forever. Each one is reported once and left out; a lease
    that is good again leaves the bad-document listing."""
    out = []
    for m in members:
        problem = member_problem(m.member_id, m.expires_at, now, settings.heartbeat_timeout_seconds)
        if problem is None:
            out.append(m)
            BAD_DOCUMENTS.resolved(MEMBERS, m.member_id)  # fixed by hand: no longer listed
        else:
            BAD_DOCUMENTS.report(MEMBERS, m.member_id, problem)
    return out


def new_member_id(name: str = "") -> str:
    base = name or socket.gethostname()
    return f"{base}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def weight(member_id: str, tenant_id: str) -> int:
    """Rendezvous (highest random weight) hashing: stable, and when a member leaves only its
    own tenants move."""
    digest = hashlib.blake2b(f"{member_id}\0{tenant_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def owner(members: Iterable[str], tenant_id: str) -> str:
    return max(members, key=lambda m: (weight(m, tenant_id), m))


# the key whose owner is the keeper: no tenant id can be it (ids refuse control characters)
KEEPER_KEY = "\x00keeper"


class Ownership:
    """This replica's view of who owns what. Without a store (or disabled) it owns everything."""

    def __init__(
        self,
        store: MembershipStore | None,
        clock: Clock,
        *,
        member_id: str = "",
        settings: MembershipSettings | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.settings = settings or MembershipSettings()
        self.member_id = member_id or new_member_id()
        self.members: tuple[str, ...] = (self.member_id,)
        self._owned: dict[str, bool] = {}
        self.pauses: list[Pause] | None = None  # what the last beat read of them (S6)

    @property
    def active(self) -> bool:
        return self.store is not None and self.settings.enabled

    def set_members(self, members: Iterable[str]) -> bool:
        """Adopt a membership view (this member always counts itself); True if it changed."""
        view = tuple(sorted(set(members) | {self.member_id}))
        if view == self.members:
            return False
        log.info("membership: %d live member(s)", len(view), extra={"members": list(view)})
        self.members = view
        self._owned.clear()
        return True

    def owns(self, tenant_id: str) -> bool:
        if len(self.members) == 1:
            return True
        got = self._owned.get(tenant_id)
        if got is None:
            got = self._owned[tenant_id] = owner(self.members, tenant_id) == self.member_id
        return got

    def keeps(self) -> bool:
        """S6: this replica is the keeper, the one that refreshes the store-wide gauges (rows by
        state, the history headroom) and every tenant's status: the member that wins the
        rendezvous for ``KEEPER_KEY``, so exactly one of the live members (two, for a moment,
        while their views differ) and another at once when it leaves."""
        return len(self.members) == 1 or owner(self.members, KEEPER_KEY) == self.member_id

    def owned(self, tenants: Iterable[str]) -> list[str]:
        return [t for t in tenants if self.owns(t)]

    def others(self, tenants: Iterable[str]) -> frozenset[str]:
        """S5: the tenants another live member owns, which this replica's change stream leaves
        out (empty when alone). A tenant nobody has seen yet is in no one's list: its first
        inserts wake every replica, and only its owner drains it."""
        if len(self.members) == 1:
            return frozenset()
        return frozenset(t for t in tenants if not self.owns(t))

    def prefer(self) -> Collection[str] | None:
        """The worker's preference: None (take any row) when alone; else the owned tenants."""
        if len(self.members) == 1:
            return None
        return _Owned(self)

    async def beat(self, *, pauses: bool = False) -> bool:
        """One heartbeat (renew our lease, read the live members); True if the view changed.
        A store error keeps the last view: at worst two replicas both drain a tenant.
        ``pauses``: the read of the members reads the pauses too (S6), kept in ``pauses``
        (None after a beat that failed or did not read them)."""
        self.pauses = None
        if not self.active:
            return False
        assert self.store is not None
        now = self.clock.now()
        try:
            if pauses:
                live, self.pauses = await self.store.heartbeat_with_pauses(
                    self.member_id, now, self.settings.lease_seconds)
            else:
                live = await self.store.heartbeat(self.member_id, now,
                                                  self.settings.lease_seconds)
        except StoreUnavailable as exc:
            log.warning("heartbeat failed (%s): keeping the last membership view", exc)
            return False
        except StoreError as exc:  # not transient either: never the process (R1)
            log.error("heartbeat failed (%s): keeping the last membership view", exc)
            return False
        return self.set_members(m.member_id for m in trusted(live, now, self.settings))

    async def leave(self) -> None:
        if not self.active:
            return
        assert self.store is not None
        try:
            await self.store.leave(self.member_id)
        except StoreUnavailable as exc:
            log.warning("could not leave the membership (%s): our lease expires instead", exc)


class _Owned(Collection[str]):
    """The owned tenants as a lazy collection (membership test by hashing)."""

    def __init__(self, ownership: Ownership) -> None:
        self._o = ownership

    def __contains__(self, tenant: object) -> bool:
        return isinstance(tenant, str) and self._o.owns(tenant)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter([t for t, mine in self._o._owned.items() if mine])

    def __len__(self) -> int:
        return sum(1 for mine in self._o._owned.values() if mine)
