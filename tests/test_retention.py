"""Retention in the configuration (O8): ``[retention]`` per terminal state, the TTL indexes
following it (collMod when it changes, at ensure-schema and at start; the dead-letters' index
only when they may expire), the audit and the replays reading it to tell an expired row from a
missing one, and the old ``audit.done_ttl_seconds`` refused in one line naming the new one."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.adapters.mongo import ensure_schema
from board_outbox.model import transitions as tr
from board_outbox.model.board import Card, EventSnapshot
from board_outbox.model.errors import ConfigError
from board_outbox.model.retention import Retention, days
from board_outbox.model.row_documents import park_fields
from board_outbox.model.rows import ErrorEntry, new_launch_row
from board_outbox.model.subscriptions import Subscription
from board_outbox.ports import RowFilter
from board_outbox.service.config import load_config
from board_outbox.service.runtime import Service
from board_outbox.surface.cli import main
from tests.support.mongomock_async import mock_database
from tests.test_admin_cli import factory_for

T = "t1"
DAY = 86400


def test_the_settings_and_their_bounds(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text("[retention]\ndone_seconds = 86400\ncoalesced_seconds = 7200\n"
                 "failed_seconds = 2592000\n")
    r = load_config(f, env={}).retention
    assert (r.done_seconds, r.coalesced_seconds, r.failed_seconds) == (DAY, 7200, 30 * DAY)
    assert r.horizon() == 7200  # the shortest: a row older may have expired
    assert Retention().horizon() == 7 * DAY  # dead-letters kept forever do not count
    assert load_config(env={"BOARD_OUTBOX_RETENTION__DONE_SECONDS": "3600"}
                       ).retention.done_seconds == 3600
    assert (days(7 * DAY), days(36 * 3600), days(0)) == ("after 7 days", "after 36 hours", "never")
    for toml, words in (("[retention]\ndone_seconds = 60\n", "retention.done_seconds"),
                        ("[retention]\ndone_seconds = 0\n", "retention.done_seconds"),
                        ("[retention]\ncoalesced_seconds = 1e12\n", "retention.coalesced_seconds"),
                        ("[retention]\nfailed_seconds = 100\n", "failed_seconds 100: 0"),
                        ("[retention]\nfailed_seconds = -1\n", "retention.failed_seconds"),
                        ("[retention]\nkept = 1\n", "retention.kept: unknown setting")):
        f.write_text(toml)
        with pytest.raises(ConfigError, match="retention") as err:
            load_config(f, env={})
        assert words in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("how", ["file", "env"])
def test_the_old_audit_key_is_one_line_naming_the_new_one(
        how: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "c.toml"
    f.write_text('[store]\nbackend = "memory"\n'
                 + ("[audit]\ndone_ttl_seconds = 604800\n" if how == "file" else ""))
    if how == "env":
        monkeypatch.setenv("BOARD_OUTBOX_AUDIT__DONE_TTL_SECONDS", "604800")
    assert main(["status", "--config", str(f)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("board-outbox: config error: audit.done_ttl_seconds: no longer a setting: it "
                   "is now retention.done_seconds (how long done rows are kept; the TTL index, "
                   "the audit and the replays follow it)")


def test_a_parked_row_carries_the_date_the_dead_letters_ttl_counts_from() -> None:
    err = ErrorEntry(attempt=1, at=1000.0, error="x")
    assert tr.park(now=1000.0, error=err, count_attempt=True).set["failed_at"] == \
        datetime.fromtimestamp(1000.0, UTC)
    fixed = park_fields({"tenant_id": T, "row_key": "r", "seq": 1, "attempts": "x"}, now=2000.0,
                        error="broken")
    assert fixed["failed_at"] == datetime.fromtimestamp(2000.0, UTC)


@pytest.mark.anyio
async def test_the_ttl_indexes_follow_the_retention_and_dead_letters_expire_only_when_set(
) -> None:
    """mongomock (which expires on read): the failed rows' index appears when
    ``failed_seconds`` is set -- keyed by ``failed_at``, partial on state failed -- and a
    dead-letter parked longer ago goes; set back to 0, the index is dropped."""
    from board_outbox.adapters.mongo import MongoEffectOutbox

    db = mock_database()
    assert "failed_ttl" not in await ensure_schema(db)
    info = await db["trigger_effects"].index_information()
    assert "failed_ttl" not in info and info["done_ttl"]["expireAfterSeconds"] == 7 * DAY
    changed = await ensure_schema(db, Retention(done_seconds=DAY, failed_seconds=2 * DAY))
    assert changed == ["done_ttl (expireAfterSeconds 604800 -> 86400)", "failed_ttl"]
    info = await db["trigger_effects"].index_information()
    assert info["done_ttl"]["expireAfterSeconds"] == DAY
    assert info["failed_ttl"]["expireAfterSeconds"] == 2 * DAY
    assert list(info["failed_ttl"]["key"]) == [("failed_at", 1)]
    assert info["failed_ttl"]["partialFilterExpression"] == {"state": "failed"}
    assert await ensure_schema(db, Retention(done_seconds=DAY, failed_seconds=2 * DAY)) == []

    outbox = MongoEffectOutbox(db)
    sub = Subscription(sub_id="s", tenant_id=T, bot="b")
    await outbox.upsert_rows([new_launch_row(T, EventSnapshot(seq=i, type="x", card_id="c"),
                                             sub, 0.0) for i in (1, 2)])
    long_ago, recent = time.time() - 3 * DAY, time.time() - 3600
    c1, c2 = await outbox.claim_any(long_ago, 30, 2)
    for claim, when in ((c1, long_ago), (c2, recent)):
        assert await outbox.apply_claimed(claim.ref, claim.claim_id, tr.park(
            now=when, error=ErrorEntry(attempt=1, at=when, error="x"), count_attempt=True))
    assert [r.seq for r in await outbox.find(RowFilter(tenant_id=T))] == [2]
    assert await ensure_schema(db, Retention(done_seconds=DAY)) == [
        "failed_ttl (dropped: kept forever)"]
    assert "failed_ttl" not in await db["trigger_effects"].index_information()


def test_on_the_wire_ensure_schema_and_a_start_make_the_ttl_follow_the_config(
        live_uri: str, tmp_path: Path) -> None:
    from pymongo import MongoClient

    from board_outbox.service.backends import open_backend

    db = f"retention_{uuid.uuid4().hex[:8]}"
    conf = tmp_path / "c.toml"

    def write(extra: str) -> None:
        conf.write_text(f'[store]\nbackend = "mongo"\nuri = "{live_uri}"\ndatabase = "{db}"\n'
                        f"{extra}")

    client: MongoClient[dict[str, Any]] = MongoClient(live_uri)

    def ttl() -> dict[str, Any]:
        info = client[db]["trigger_effects"].index_information()
        return {n: info[n].get("expireAfterSeconds") for n in ("done_ttl", "coalesced_ttl",
                                                               "failed_ttl") if n in info}

    try:
        write("")
        assert main(["ensure-schema", "--config", str(conf)]) == 0
        assert ttl() == {"done_ttl": 7 * DAY, "coalesced_ttl": 7 * DAY}
        write("[retention]\ndone_seconds = 172800\nfailed_seconds = 2592000\n")
        assert main(["ensure-schema", "--config", str(conf), "--json"]) == 0
        assert ttl() == {"done_ttl": 2 * DAY, "coalesced_ttl": 7 * DAY, "failed_ttl": 30 * DAY}
        # `run` ensures the schema at its start, through the same backend opening
        write("[retention]\ndone_seconds = 3600\ncoalesced_seconds = 7200\n")

        async def start() -> None:
            async with open_backend(load_config(conf, env={}), ensure_schema=True):
                pass

        anyio.run(start)
        assert ttl() == {"done_ttl": 3600, "coalesced_ttl": 7200}
    finally:
        client.drop_database(db)
        client.close()


def _old_events(backend: MemoryBackend, age: float) -> None:
    """Three events of T, ``age`` seconds old, materialized with board-reflect; then the
    second one's projection row is deleted (it ran and expired, or it went missing)."""
    async def go() -> None:
        await backend.board.put(Card(tenant_id=T, card_id="c"))
        await backend.subs.put(Subscription(sub_id="s", tenant_id=T, bot="b"))
        for _ in range(3):
            await backend.events.emit(T, "card.created", "c", time.time() - age)
        await Service(backend.stores(), load_config(env={}, tail={"seed": "earliest"})
                      ).tail.drain_all()

    anyio.run(go)
    assert backend.outbox.delete_raw(f"{T}/2/proj/board-reflect")


def test_the_audit_and_the_replay_read_the_retention(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """An event two hours old whose row is gone: missing under the default retention (7 days),
    presumably expired when done rows are kept one hour -- then the audit leaves it alone
    (exit 0) and a replay never writes it again (maybe-expired)."""
    backend = MemoryBackend()
    _old_events(backend, 7200)
    short = tmp_path / "short.toml"
    short.write_text("[retention]\ndone_seconds = 3600\n")

    def cli(*args: str) -> int:
        return main(list(args), factory=factory_for(backend))

    assert cli("audit", "--tenant", T, "--json") == 1
    assert [f["row_key"] for f in json.loads(capsys.readouterr().out)["missing"]] == [
        f"{T}/2/proj/board-reflect"]
    assert cli("audit", "--tenant", T, "--config", str(short)) == 0
    out = capsys.readouterr().out
    assert "missing: 0 rows" in out and "shortest retention, 3600 s): 1" in out
    assert cli("replay", "--tenant", T, "--since", "1", "--dry-run", "--json", "--all-rows") == 0
    actions = {r["row_key"]: r["action"] for r in json.loads(capsys.readouterr().out)["rows"]}
    assert actions[f"{T}/2/proj/board-reflect"] == "fire"
    assert cli("replay", "--tenant", T, "--since", "1", "--json", "--config", str(short)) == 0
    plan = json.loads(capsys.readouterr().out)
    assert {r["row_key"]: r["action"] for r in plan["rows"]}[f"{T}/2/proj/board-reflect"] == \
        "maybe-expired"
    assert plan["written"] == 0 and backend.outbox.raw(f"{T}/2/proj/board-reflect") is None
