"""``board-outbox doctor`` (O7): every verdict from a fake probe (a standalone server, a member
that is not the primary, no change streams, missing privileges, a short full oplog, a clock
far off, an old server), and the real probe on the wire: healthy after ensure-schema, a missing
index, a TTL other than [retention], a change stream the server refuses (failCommand), an
unreachable store. Exit 0 when no check fails, 1 otherwise; one line per check."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from board_outbox.model.diagnosis import IndexFacts, OplogFacts, Privilege, ServerFacts
from board_outbox.model.errors import StoreError
from board_outbox.service.config import load_config
from board_outbox.surface.cli import main
from board_outbox.surface.doctor import diagnose, required_privileges

DB = "board_outbox"


def _all_indexes(retention: Any) -> dict[str, list[IndexFacts]]:
    from board_outbox.adapters.mongo.schema import expected_indexes

    out: dict[str, list[IndexFacts]] = {}
    for coll, models in expected_indexes(retention).items():
        out[coll] = [IndexFacts(
            name=m.document["name"], key=list(dict(m.document["key"]).items()),
            unique=bool(m.document.get("unique", False)),
            partial=m.document.get("partialFilterExpression"),
            expire_after_seconds=m.document.get("expireAfterSeconds")) for m in models]
    return out


class FakeProbe:
    """A healthy replica set, unless a test changes one answer."""

    def __init__(self, cfg: Any) -> None:
        now = time.time()
        self.facts = ServerFacts(version="7.0.12", set_name="rs0", writable_primary=True,
                                 primary="db1:27017", sent_at=now, received_at=now + 0.004,
                                 server_time=now + 0.002)
        self.stream_error: Exception | None = None
        self.users = ["svc@admin"]
        self.privs = [Privilege(db=DB, collection="", actions=[
            "find", "insert", "update", "remove", "createIndex", "dropIndex", "listIndexes",
            "changeStream", "collMod"]), Privilege(db="local", collection="oplog.rs",
                                                   actions=["find"])]
        self.index_facts = _all_indexes(cfg.retention)
        self.oplog_facts = OplogFacts(first=now - 3 * 86400, last=now, full=True)

    async def server(self) -> ServerFacts:
        return self.facts

    async def change_stream(self) -> None:
        if self.stream_error is not None:
            raise self.stream_error

    async def privileges(self) -> tuple[list[str], list[Privilege]]:
        return self.users, self.privs

    async def indexes(self, collections: list[str]) -> dict[str, list[IndexFacts]]:
        return {c: self.index_facts.get(c, []) for c in collections}

    async def oplog(self) -> OplogFacts:
        return self.oplog_facts


def mongo_cfg(**over: Any) -> Any:
    return load_config(env={}, store={"backend": "mongo", "uri": "mongodb://db1:27017/?tls=true"},
                       launcher={"kind": "http", "url": "http://runner"}, **over)


def verdicts(checks: list[Any]) -> dict[str, tuple[str, str, str]]:
    return {c.name: (c.status, c.found, c.todo) for c in checks}


@pytest.mark.anyio
async def test_a_healthy_deployment_passes_every_check() -> None:
    cfg = mongo_cfg()
    got = verdicts(await diagnose(cfg, FakeProbe(cfg)))
    assert {k: v[0] for k, v in got.items()} == {
        "config": "ok", "server": "ok", "replica set": "ok", "clock": "ok",
        "change streams": "ok", "privileges": "ok", "indexes": "ok", "retention": "ok",
        "oplog": "ok"}
    probe = FakeProbe(cfg)
    probe.oplog_facts.token_saved_at = probe.oplog_facts.last
    got = verdicts(await diagnose(cfg, probe))
    assert got["oplog"][0] == "ok" and "the saved resume token is 3.0 days from falling off" in \
        got["oplog"][1]


def _probe(change: str, cfg: Any) -> FakeProbe:
    import msgspec

    p = FakeProbe(cfg)
    now = time.time()
    if change == "standalone":
        p.facts = msgspec.structs.replace(p.facts, set_name=None)
    elif change == "secondary":
        p.facts = msgspec.structs.replace(p.facts, writable_primary=False)
    elif change == "old":
        p.facts = msgspec.structs.replace(p.facts, version="4.4.29")
    elif change == "clock":
        p.facts = msgspec.structs.replace(p.facts, server_time=now + 30)
    elif change == "no-time":
        p.facts = msgspec.structs.replace(p.facts, server_time=None)
    elif change == "stream":
        p.stream_error = StoreError("aggregate: OperationFailure: The $changeStream stage is "
                                    "only supported on replica sets")
    elif change == "privileges":
        p.privs = [Privilege(db=DB, collection="", actions=["find", "insert", "update"])]
    elif change == "no-oplog-read":
        p.privs = p.privs[:1]
    elif change == "no-auth":
        p.users = []
    elif change == "oplog-short":
        p.oplog_facts = OplogFacts(first=now - 3600, last=now, full=True)
    elif change == "oplog-filling":
        p.oplog_facts = OplogFacts(first=now - 600, last=now, full=None)
    elif change == "token-gone":
        p.oplog_facts = OplogFacts(first=now - 3 * 86400, last=now, full=True,
                                   token_saved_at=now - 4 * 86400)
    elif change == "index-missing":
        p.index_facts["trigger_effects"] = [f for f in p.index_facts["trigger_effects"]
                                            if f.name != "pending_not_before"]
    elif change == "index-other-options":
        for f in p.index_facts["trigger_effects"]:
            if f.name == "row_key_unique":
                f.unique = False
    elif change == "ttl":
        for f in p.index_facts["trigger_effects"]:
            if f.name == "done_ttl":
                f.expire_after_seconds = 86400
    return p


@pytest.mark.anyio
@pytest.mark.parametrize(("change", "check", "status", "words"), [
    ("standalone", "replica set", "fail", "run it as a replica set"),
    ("secondary", "replica set", "fail", "not the primary"),
    ("old", "server", "warn", "upgrade"),
    ("clock", "clock", "fail", "sync the clocks"),
    ("no-time", "clock", "warn", "compare the clocks by hand"),
    ("stream", "change streams", "fail", "only supported on replica sets"),
    ("privileges", "privileges", "fail",
     "remove, createIndex, listIndexes, dropIndex, collMod on trigger_effects"),
    ("no-oplog-read", "privileges", "warn", "cannot read local.oplog.rs"),
    ("no-auth", "privileges", "warn", "without access control"),
    ("oplog-short", "oplog", "fail", "below the lag budget"),
    ("oplog-filling", "oplog", "warn", "not full yet"),
    ("token-gone", "oplog", "warn", "the saved resume token is 24.0 h past its end"),
    ("index-missing", "indexes", "fail", "missing trigger_effects.pending_not_before"),
    ("index-other-options", "indexes", "fail", "other options: trigger_effects.row_key_unique"),
    ("ttl", "retention", "fail", "done_ttl: 86400 s, [retention] done_seconds = 604800"),
])
async def test_each_problem_is_named_with_what_to_do(change: str, check: str, status: str,
                                                     words: str) -> None:
    cfg = mongo_cfg()
    checks = await diagnose(cfg, _probe(change, cfg))
    got = verdicts(checks)
    assert got[check][0] == status, got[check]
    assert words in got[check][1] + " " + got[check][2]
    if status != "ok":
        assert got[check][2], "a check that does not pass says what to do"
    others = [c for c in checks if c.name != check and c.status == "fail"]
    if change == "standalone":  # no replica set: no change stream to open, no oplog
        assert "change streams" not in got and "oplog" not in got
    else:
        assert others == [], others


@pytest.mark.anyio
async def test_the_config_check_names_what_production_should_look_at() -> None:
    cfg = load_config(env={}, store={"backend": "mongo", "uri": "mongodb://db1:27017/",
                                     "write_concern": 1}, tail={"change_streams": False})
    checks = verdicts(await diagnose(cfg, FakeProbe(cfg)))
    status, _found, todo = checks["config"]
    assert status == "warn" and "launcher.kind = \"log\"" in todo and "tls=true" in todo
    assert "below majority" in todo and "tail.change_streams = false" in todo
    assert checks["change streams"][0] == "skip"


def test_a_failing_check_is_exit_1_one_line_each_and_json(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    """The command's own output on a probe with one problem: one line per check, exit 1."""
    conf = tmp_path / "c.toml"
    conf.write_text('[store]\nbackend = "mongo"\nuri = "mongodb://db1:27017/?tls=true"\n')
    cfg = load_config(conf, env={})
    probe = _probe("index-missing", cfg)
    import board_outbox.adapters.mongo.client as client_mod
    import board_outbox.adapters.mongo.diagnostics as diag

    async def reached(*_args: Any) -> None:
        return None

    monkeypatch.setattr(client_mod, "reach", reached)
    monkeypatch.setattr(diag, "MongoProbe", lambda *_a: probe)
    assert main(["doctor", "--config", str(conf)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 10 and out[-1] == "9 checks: 1 failed, 1 to look at"
    assert out[6].startswith("FAIL  indexes ") and "-> run `board-outbox ensure-schema`" in out[6]
    assert main(["doctor", "--config", str(conf), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["schema"] == 1 and report["ok"] is False
    assert [c["status"] for c in report["checks"] if c["name"] == "indexes"] == ["fail"]


def test_the_privileges_cover_every_collection_the_service_writes() -> None:
    need = required_privileges(DB)
    assert "trigger_effects" in need["insert"] and "board_events" not in need["insert"]
    assert need["changeStream"] == ["board_events", "trigger_subscriptions"]
    assert need["collMod"] == ["trigger_effects"]
    # a database-wide readWrite + dbAdmin grant covers them; another database's does not
    wide = Privilege(db=DB, collection="", actions=sorted({a for a in need}))
    assert all(wide.grants(a, DB, c) for a, cs in need.items() for c in cs)
    assert not wide.grants("find", "other", "trigger_effects")
    assert Privilege(any_resource=True, actions=["anyAction"]).grants("find", DB, "x")
    assert not Privilege(cluster=True, actions=["find"]).grants("find", DB, "x")


def test_memory_and_no_backend(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    for var in [v for v in __import__("os").environ if v.startswith("BOARD_OUTBOX_")]:
        monkeypatch.delenv(var)
    conf = tmp_path / "c.toml"
    conf.write_text('[store]\nbackend = "memory"\n')
    assert main(["doctor", "--config", str(conf)]) == 0
    out = capsys.readouterr().out
    assert "skip  store" in out and "keeps nothing: a try-out" in out
    assert main(["doctor"]) == 2
    assert "store.backend is not set" in capsys.readouterr().err


def test_an_unreachable_store_is_the_store_check_failing_in_one_line(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from board_outbox.service.wireserver import free_port

    conf = tmp_path / "c.toml"
    conf.write_text(f'[store]\nbackend = "mongo"\nuri = "mongodb://127.0.0.1:{free_port()}/"\n'
                    'server_selection_timeout_seconds = 0.5\n')
    assert main(["doctor", "--config", str(conf)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("FAIL  store ") and "connection refused" in out[1]
    assert out[-1] == "2 checks: 1 failed, 1 to look at"


# --- on the wire ---------------------------------------------------------------------------


def _wire_conf(tmp_path: Path, uri: str, db: str, extra: str = "") -> Path:
    conf = tmp_path / "c.toml"
    conf.write_text(f'[store]\nbackend = "mongo"\nuri = "{uri}"\ndatabase = "{db}"\n{extra}')
    return conf


def _run(*args: str) -> tuple[int, dict[str, Any]]:
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main([*args, "--json"])
    return code, {c["name"]: c for c in json.loads(buf.getvalue())["checks"]}


def test_on_the_wire_healthy_then_a_missing_index_then_a_ttl_off_the_config(
        live_uri: str, tmp_path: Path) -> None:
    from pymongo import MongoClient

    db = f"doctor_{uuid.uuid4().hex[:8]}"
    conf = _wire_conf(tmp_path, live_uri, db)
    code, before = _run("doctor", "--config", str(conf))
    assert code == 1 and before["indexes"]["status"] == "fail"
    assert before["retention"]["status"] == "fail"
    assert main(["ensure-schema", "--config", str(conf)]) == 0
    code, checks = _run("doctor", "--config", str(conf))
    assert code == 0, checks
    assert {n: c["status"] for n, c in checks.items() if c["status"] == "fail"} == {}
    for name in ("server", "replica set", "clock", "change streams", "indexes", "retention"):
        assert checks[name]["status"] == "ok", checks[name]
    client: MongoClient[dict[str, Any]] = MongoClient(live_uri)
    try:
        client[db]["trigger_effects"].drop_index("claimed_lease_until")
        code, checks = _run("doctor", "--config", str(conf))
        assert code == 1 and checks["indexes"]["status"] == "fail"
        assert "trigger_effects.claimed_lease_until" in checks["indexes"]["found"]
        assert checks["retention"]["status"] == "ok"
        # the retention changes in the config but not yet in the store
        other = _wire_conf(tmp_path, live_uri, db, "[retention]\ndone_seconds = 86400\n")
        code, checks = _run("doctor", "--config", str(other))
        assert code == 1 and "done_ttl: 604800 s" in checks["retention"]["found"]
    finally:
        client.close()


def test_on_the_wire_a_change_stream_the_server_refuses_fails_its_check(
        live: Any, tmp_path: Path) -> None:
    """``failCommand`` on the change stream's aggregate: the server answers as a standalone
    would (40573), once; the check fails, the others pass."""
    if not live.failpoints():
        pytest.fail("the wire server has no failpoints (test commands)")
    from pymongo import MongoClient

    db = f"doctor_{uuid.uuid4().hex[:8]}"
    conf = _wire_conf(tmp_path, live.uri, db)
    assert main(["ensure-schema", "--config", str(conf)]) == 0
    client: MongoClient[dict[str, Any]] = MongoClient(live.uri)
    try:
        client.admin.command("configureFailPoint", "failCommand", mode={"times": 1}, data={
            "failCommands": ["aggregate"], "errorCode": 40573, "appName": "board-outbox"})
        code, checks = _run("doctor", "--config", str(conf))
    finally:
        client.admin.command("configureFailPoint", "failCommand", mode="off")
        client.close()
    assert code == 1 and checks["change streams"]["status"] == "fail"
    assert "40573" in checks["change streams"]["found"] or "does not open" in \
        checks["change streams"]["found"]
    assert [n for n, c in checks.items() if c["status"] == "fail"] == ["change streams"]
