"""The operators' subscription management port (``SubscriptionAdmin``, P6) on every backend:
each write atomic on one document with its audit entry, conditional on the revision read; the
listing parses each document alone and names one that does not decode."""

from __future__ import annotations

import msgspec
import pytest

from board_outbox.model.rows import AuditEntry
from board_outbox.model.subscription_records import AUDIT_KEEP
from board_outbox.model.subscriptions import MatchRule, Subscription
from board_outbox.ports import SubscriptionAdmin
from tests.support.kits import Kit

pytestmark = pytest.mark.anyio
T = "acme"


def admin(kit: Kit) -> SubscriptionAdmin:
    return kit.subs  # type: ignore[return-value]  # every adapter's store is its admin too


def entry(action: str, at: float = 1.0) -> AuditEntry:
    return AuditEntry(at=at, action=action, by="ana", detail=action)


async def test_create_update_remove_each_fenced_on_the_revision(kit: Kit) -> None:
    a = admin(kit)
    sub = Subscription(sub_id="s", tenant_id=T, bot="b", rule=MatchRule(event_types=("x",)))
    assert await a.create(sub, entry("add"))
    assert not await a.create(msgspec.structs.replace(sub, bot="other"), entry("add"))
    rec = await a.record("s")
    assert rec is not None and rec.sub == sub and rec.rev == 1
    assert [e.action for e in rec.audit] == ["add"]
    # the service reads it as written
    assert await kit.subs.get("s") == sub and await kit.subs.list_for_tenant(T) == [sub]

    edited = msgspec.structs.replace(sub, priority=4, enabled=False)
    assert not await a.update(edited, entry("edit"), rev=0)  # stale: nothing written
    assert await a.update(edited, entry("edit", 2.0), rev=1)
    rec = await a.record("s")
    assert rec is not None and rec.sub == edited and rec.rev == 2
    assert [e.action for e in rec.audit] == ["add", "edit"]
    assert not await a.update(sub, entry("edit"), rev=1)
    assert (await a.record("s")).sub == edited  # type: ignore[union-attr]

    assert not await a.remove("s", rev=1)
    assert await a.record("s") is not None
    assert await a.remove("s", rev=2)
    assert await a.record("s") is None and await kit.subs.list_for_tenant(T) == []
    assert not await a.remove("s", rev=2)


async def test_a_subscription_no_command_wrote_is_revision_0_and_its_audit_is_bounded(
        kit: Kit) -> None:
    a = admin(kit)
    sub = Subscription(sub_id="s", tenant_id=T, bot="b")
    await kit.subs.put(sub)  # as a producer's own tool writes one
    rec = await a.record("s")
    assert rec is not None and rec.rev == 0 and rec.audit == []
    for rev in range(AUDIT_KEEP + 5):  # each write's revision is the one before plus one
        assert await a.update(msgspec.structs.replace(sub, priority=rev % 10), entry(f"e{rev}"),
                              rev)
    rec = await a.record("s")
    assert rec is not None and rec.rev == AUDIT_KEEP + 5 and len(rec.audit) == AUDIT_KEEP
    assert rec.audit[-1].action == f"e{AUDIT_KEEP + 4}"


async def test_records_name_a_document_that_does_not_decode_and_filter_by_tenant(
        kit: Kit) -> None:
    a = admin(kit)
    assert kit.put_raw_sub is not None
    await a.create(Subscription(sub_id="good", tenant_id=T, bot="b"), entry("add"))
    await a.create(Subscription(sub_id="other", tenant_id="t2", bot="b"), entry("add"))
    await kit.put_raw_sub({"_id": "bad", "sub_id": "bad", "tenant_id": T, "bot": "b",
                           "priority": 99})
    recs = await a.records(T)
    assert [r.sub_id for r in recs] == ["bad", "good"]
    bad = recs[0]
    assert bad.sub is None and bad.problem is not None and "priority" in bad.problem
    assert bad.tenant_id == T
    assert [r.sub_id for r in await a.records()] == ["bad", "good", "other"]
    assert [r.sub_id for r in await a.records(limit=1)] == ["bad"]
    # the service ignores it; the operator may remove it (revision 0: no command wrote it)
    assert [s.sub_id for s in await kit.subs.list_for_tenant(T)] == ["good"]
    assert await a.remove("bad", bad.rev, bad.ref)
    assert [r.sub_id for r in await a.records(T)] == ["good"]


async def test_a_document_whose_id_is_not_its_sub_id_is_edited_in_place(kit: Kit) -> None:
    """R2: a subscription written by another tool under an ObjectId is found by its sub_id, and
    an edit or a removal addresses that very document (never a second one)."""
    from bson import ObjectId

    a = admin(kit)
    assert kit.put_raw_sub is not None
    oid = ObjectId()
    await kit.put_raw_sub({"_id": oid, "sub_id": "x", "tenant_id": T, "bot": "b"})
    rec = await a.record("x")
    # the memory store keys every subscription by its sub_id: no other id to address
    assert rec is not None and rec.ref == (None if kit.name == "memory" else oid)
    assert rec.sub is not None
    oid = rec.ref
    assert await a.update(msgspec.structs.replace(rec.sub, priority=2), entry("edit"), rec.rev,
                          rec.ref)
    [again] = await a.records(T)
    assert again.ref == oid and again.sub is not None and again.sub.priority == 2
    assert await a.remove("x", again.rev, again.ref)
    assert await a.records(T) == []
