"""The plain values the ports carry (a claim, a row filter, an event record, a launch request...):
leaf types with no behaviour, kept below the ports so that the model's transitions and the ports
can both name them without an import pointing up (River's leaf-type modules)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from board_outbox.model.rows import EffectRow


class EventRecord(msgspec.Struct, frozen=True):
    """A raw ``board_events`` document with its seq (decoding it may still fail: poison)."""

    seq: int
    doc: Mapping[str, Any]


class Claim(msgspec.Struct, frozen=True, kw_only=True):
    """A claimed row. ``ref`` is the store's identity for fenced writes; ``row`` is None when the
    document did not decode (``decode_error`` says why): such a row is parked as failed."""

    ref: Any
    claim_id: str
    lease_until: float
    tenant_id: str
    row: EffectRow | None
    decode_error: str | None = None
    reclaimed: bool = False


class ClaimTerms(msgspec.Struct, frozen=True, kw_only=True):
    """The claim the rows an insert writes are born under (``EffectOutbox.upsert_rows``): the
    tail hands the rows it materializes to its own worker already claimed, so they need no
    claim statement and no pick. ``lease_until`` runs from the insert."""

    claim_id: str
    lease_until: float
    # earlier claim ids of the same claimant whose leases may still run: a row the insert finds
    # stored already, claimed under one of them (an earlier insert of it that landed after its
    # caller had given up on it: a store timeout), is the claimant's too -- returned with the
    # claims, as stored, instead of waiting out its lease unrun
    adopt: tuple[str, ...] = ()


class UpsertResult(msgspec.Struct, frozen=True):
    inserted: int
    existing: int
    # the rows this insert wrote born claimed (under its ``ClaimTerms``): ours to run, and only
    # these -- a row that existed keeps its state and its holder (one found claimed under the
    # terms' own claim id or one they adopt is ours as well, and comes with them)
    claims: tuple[Claim, ...] = ()


class RowFilter(msgspec.Struct, frozen=True, kw_only=True):
    tenant_id: str | None = None
    states: tuple[str, ...] = ()
    kind: str | None = None
    updated_after: float | None = None
    updated_before: float | None = None
    limit: int = 100
    sub_ids: tuple[str, ...] = ()  # only rows of these subscriptions (empty: any)


class LaunchRequest(msgspec.Struct, frozen=True, kw_only=True):
    tenant_id: str
    bot: str
    card_id: str
    sub_id: str
    seq: int
    row_key: str


class Change(msgspec.Struct, frozen=True):
    """One insert (``tenant_id`` set), a change to the subscriptions (``subscriptions``), or a
    quiet batch's post-batch token (``tenant_id`` "", the stream's opening included). ``doc``:
    the inserted event's fields as the stream carried them (the event log's read fields), None
    when the feed does not carry them."""

    tenant_id: str
    seq: int
    token: Any = None
    doc: Mapping[str, Any] | None = None
    subscriptions: bool = False  # any write to trigger_subscriptions: their cache starts over


class UpsertIfNewer(msgspec.Struct, frozen=True, kw_only=True):
    """A batch write: replace ``key``'s document by ``doc`` unless it holds a seq >= ``seq``."""

    key: str
    seq: int
    doc: Mapping[str, Any]


class PushRecent(msgspec.Struct, frozen=True, kw_only=True):
    """A batch write: merge ``entry`` (stored with ``seq``) into ``key``'s list ``field``, kept
    newest-first, at most ``keep`` long, one entry per seq. Re-applying an entry, or one older
    than the ``keep`` newest, changes nothing; ``last_seq`` is the highest seq merged."""

    key: str
    seq: int
    entry: Mapping[str, Any]
    keep: int
    field: str = "recent"


class ReadModelWrites(msgspec.Struct, frozen=True):
    """One (model, tenant) read model's batch writes, as a part of a bulk write that spans read
    models and tenants (``ReadModelStore.write_groups``)."""

    model: str
    tenant_id: str
    ops: Sequence[UpsertIfNewer | PushRecent]


class ReadModelVersions(msgspec.Struct, frozen=True, kw_only=True):
    """Which generation of one (model, tenant) read model readers see (``active``), and the one a
    shadow rebuild is building beside it (``building``, with the seq its replay has reached)."""

    active: int = 0
    building: int | None = None
    progress: int = 0
    # set when the stored pointer did not parse (R1): its read model's writes fail, alone
    problem: str | None = None


class Member(msgspec.Struct, frozen=True):
    member_id: str
    expires_at: float



class RowSummary(msgspec.Struct, kw_only=True):
    """One tenant's rows for ``status``: counts by state, and the oldest live (pending or
    claimed) row's ``created_at`` (None: no live row)."""

    rows: dict[str, int]
    oldest_live_created_at: float | None = None
    waiting: int = 0  # pending rows deferred over a concurrency or rate limit (F2)
    held: int = 0  # pending rows held by a pause (F3; not counted in ``waiting``)


class TenantLag(msgspec.Struct, frozen=True, kw_only=True):
    """One tenant of ``StatusStore.attention``: its counter, cursor and dead-letters."""

    tenant_id: str
    head: int
    cursor: int
    dead_letters: int = 0

    @property
    def lag(self) -> int:
        return max(0, self.head - self.cursor)


class AttentionPage(msgspec.Struct, frozen=True, kw_only=True):
    """One page of the tenants that need a look (behind, or holding dead-letters), most behind
    first, with totals over every tenant (``StatusStore.attention``)."""

    tenants: list[TenantLag]
    listed: int  # tenants behind or with dead-letters, over every page
    total: int  # tenants with a counter, a cursor or a dead-letter
    behind: int  # tenants whose counter is ahead of their cursor
    events_behind: int  # the sum of those lags
    dead_letters: int  # failed rows, every tenant


class RowIdentity(msgspec.Struct, frozen=True, kw_only=True):
    """The identifying fields of one stored row, as the audit and the replays read them
    (``EffectOutbox.rows_between``): no event snapshot, no history."""

    row_key: str
    seq: int
    kind: str
    state: str
    sub_id: str | None = None
    projection: str | None = None


class ConsoleSession(msgspec.Struct, frozen=True, kw_only=True):
    """One logged-in console session, kept server-side (``SessionStore``) so that logging out
    ends it on every replica: ``session_id`` is a hash of the id the cookie carries (the store
    never holds a usable one), ``token_tag`` a tag of the admin token it logged in with (a
    session from before a token change is not admin)."""

    session_id: str
    token_tag: str
    who: str
    expires_at: float


class DoneLatency(msgspec.Struct, frozen=True, kw_only=True):
    """One done row's event insert -> done time (``EffectOutbox.done_latencies``, A5)."""

    tenant_id: str
    kind: str
    seconds: float


class LimitHolder(msgspec.Struct, frozen=True, kw_only=True):
    """One held in-flight slot of a limit key (``LimitStore.holders``, F2): ``holder`` as the
    launch gate names it (``<row key>:<claim id>``) and the end of its lease."""

    holder: str
    until: float

    @property
    def row_key(self) -> str | None:
        """The row holding the slot (None: a holder the launch gate did not name)."""
        key, sep, _claim = self.holder.rpartition(":")
        return key if sep and key else None


class FailedPage(msgspec.Struct, frozen=True, kw_only=True):
    """One page of a walk over the dead-letters (``EffectOutbox.failed_page``), oldest parked
    first: the rows that decode, the keys of the documents that do not (each costs only
    itself), how many documents the page read, and where the next page starts (``after``: the
    adapter's own position, the last document's stored ``(updated_at, row_key)`` as stored, so
    that an odd stored number never makes a walk read the same document twice)."""

    rows: list[EffectRow]
    unreadable: list[str]
    read: int
    after: Any = None
