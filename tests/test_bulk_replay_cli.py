"""``board-outbox dead-letters replay --filter ...`` (issue 33 item 5): a bad filter is one line and
exit 2 before the store is opened; the plan is a dry run that writes nothing (the writes the
store is asked for are counted); the apply asks first (or --yes), shows progress, audits each row
as the bulk's, and a SIGINT stops it between two rows with the summary saying how many; on the
wire, a real SIGTERM to a real process leaves every row replayed or untouched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.model.board import EventSnapshot
from board_outbox.model.rows import ErrorEntry, new_launch_row
from board_outbox.model.subscriptions import Subscription
from board_outbox.ports import Stores
from board_outbox.surface.cli import main
from tests.support.faults import FaultInjector, FaultProxy

WRITES = ("upsert_rows", "apply_failed", "apply_claimed", "apply_claimed_many", "apply_marks",
          "park_broken", "purge", "claim_any", "reclaim_expired")


def _rows(n: int, tenant: str = "t1", sub: str = "s1", at: float | None = None) -> list[Any]:
    at = time.time() - 600 if at is None else at
    out = []
    for i in range(1, n + 1):
        ev = EventSnapshot(seq=i, type="card.created", card_id=f"c{i}", at=at)
        row = new_launch_row(tenant, ev, Subscription(sub_id=sub, tenant_id=tenant, bot="b"), at)
        row.state = "failed"
        row.attempts = 3
        row.errors = [ErrorEntry(attempt=3, at=at, error="LaunchFailed: bot runner answered 503")]
        row.updated_at = at + i
        out.append(row)
    return out


class Rig:
    """A memory backend whose outbox counts every call (the writes a dry run must not make)."""

    def __init__(self) -> None:
        self.backend = MemoryBackend()
        self.faults = FaultInjector()
        self.opened = 0

    async def plant(self, n: int = 6) -> None:
        await self.backend.subs.put(Subscription(sub_id="s1", tenant_id="t1", bot="b"))
        await self.backend.subs.put(Subscription(sub_id="s2", tenant_id="t2", bot="b"))
        await self.backend.outbox.upsert_rows(_rows(n) + _rows(2, "t2", "s2"))

    def factory(self) -> Any:
        @asynccontextmanager
        async def factory(cfg: Any, *, ensure_schema: bool = False) -> AsyncIterator[Stores]:
            self.opened += 1
            stores = self.backend.stores()
            stores.outbox = FaultProxy(stores.outbox, "outbox", self.faults)  # type: ignore[assignment]
            yield stores

        return factory

    def run(self, *args: str) -> int:
        return main(["dead-letters", "replay", *args], factory=self.factory())

    def writes(self) -> int:
        return sum(self.faults.hits[f"outbox.{w}"] for w in WRITES)

    def states(self) -> dict[str, str]:
        return {d["row_key"]: d["state"] for d in self.backend.outbox.all_docs()}


@pytest.mark.parametrize(("args", "says"), [
    (["--filter", "t1"], "expected KEY=VALUE"),
    (["--filter", "color=red"], "unknown key 'color'"),
    (["--filter", "tenant="], "tenant= needs a value"),
    (["--filter", "tenant=a/b"], "invalid tenant"),
    (["--filter", "since=yesterday-ish"], "is not a time"),
    (["--filter", "since=nan"], "finite"),
    (["--filter", "limit=0"], "limit=0"),
    (["--filter", "limit=1e3"], "whole number"),
    (["--filter", "limit=99999999999999999999"], "whole number"),
    (["--filter", "since=2h", "--filter", "before=3h"], "since must be earlier"),
    (["--filter", "tenant=a", "--tenant", "b"], "tenant given twice"),
    (["--filter", "error-class=not a class"], "error-class"),
    (["--filter", "error=\x1b[31m"], "printable"),
    (["--filter", "bot=" + "b" * 501], "at most 500"),
    (["--filter", "tenant=t1", "t1/1/sub/s1"], "one of them"),
    (["--filter", "tenant=t1", "--all"], "one of them"),
    (["--yes", "--all"], "go with --filter"),
    (["--rate", "5", "t1/1/sub/s1"], "go with --filter"),
])
def test_a_bad_filter_is_one_line_exit_2_and_the_store_is_not_opened(
        args: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    rig = Rig()
    assert rig.run(*args) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and says in err and "Traceback" not in err, err
    assert rig.opened == 0


@pytest.mark.parametrize("rate", ["0", "-1", "nan", "inf", "1e9", "fast"])
def test_a_bad_rate_is_a_usage_error(rate: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["dead-letters", "replay", "--filter", "tenant=t1", "--rate", rate])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "error: argument --rate" in err and "Traceback" not in err


def test_the_dry_run_prints_the_plan_and_writes_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    rig = Rig()
    anyio.run(rig.plant)
    before = rig.states()
    rig.faults.hits.clear()
    assert rig.run("--filter", "tenant=t1", "--filter", "error=503", "--dry-run") == 0
    out = capsys.readouterr().out
    assert "plan: 6 dead-letters match tenant=t1 error=503 limit=10000" in out
    assert "by tenant:" in out and "t1 6" in out and "by subscription:" in out and "s1 6" in out
    assert "dry run: nothing changed" in out
    assert rig.writes() == 0 and rig.faults.hits["outbox.failed_page"] >= 1
    assert rig.states() == before


def test_without_yes_and_without_a_terminal_it_is_exit_2_and_writes_nothing(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    rig = Rig()
    anyio.run(rig.plant)
    rig.faults.hits.clear()
    monkeypatch.setattr(sys.stdin, "isatty", lambda: False)
    assert rig.run("--filter", "tenant=t1") == 2
    cap = capsys.readouterr()
    assert "plan: 6 dead-letters" in cap.out
    assert "apply the plan with --yes" in cap.err and len(cap.err.strip().splitlines()) == 1
    assert rig.writes() == 0


def test_on_a_terminal_it_asks_and_no_writes_nothing(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    rig = Rig()
    anyio.run(rig.plant)
    rig.faults.hits.clear()
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    asked: list[str] = []

    def no(question: str) -> str:
        asked.append(question)
        return "n"

    monkeypatch.setattr("builtins.input", no)
    assert rig.run("--filter", "tenant=t1", "--rate", "20") == 1
    assert asked == ["Replay 6 dead-letters at 20 rows/s? [y/N] "]
    assert "nothing replayed" in capsys.readouterr().out and rig.writes() == 0
    monkeypatch.setattr("builtins.input", lambda q: "y")
    assert rig.run("--filter", "tenant=t1", "--rate", "1000") == 0
    assert sum(1 for s in rig.states().values() if s == "pending") == 6


def test_yes_applies_the_plan_audited_with_a_summary(capsys: pytest.CaptureFixture[str]) -> None:
    rig = Rig()
    anyio.run(rig.plant)
    assert rig.run("--filter", "tenant=t1", "--filter", "limit=4", "--yes", "--by", "ops",
                   "--rate", "1000") == 0
    cap = capsys.readouterr()
    assert "plan: 4 dead-letters match tenant=t1 limit=4 (the limit: more may match)" in cap.out
    assert "4 of 4 planned rows replayed, 0 skipped" in cap.out
    assert "replay" in cap.err  # the progress bar, on stderr
    docs = {d["row_key"]: d for d in rig.backend.outbox.all_docs()}
    replayed = [d for d in docs.values() if d["state"] == "pending"]
    assert sorted(d["row_key"] for d in replayed) == [f"t1/{i}/sub/s1" for i in range(1, 5)]
    details = {d["audit"][-1]["detail"] for d in replayed}
    assert len(details) == 1 and details.pop().startswith("attempts reset (bulk replay ")
    assert {d["audit"][-1]["by"] for d in replayed} == {"ops"}


def test_the_legacy_limit_flag_and_time_flags_feed_the_filter(capsys: pytest.CaptureFixture[str]) -> None:
    rig = Rig()
    anyio.run(rig.plant)
    assert rig.run("--filter", "kind=launch", "--limit", "3", "--since", "1d", "--dry-run") == 0
    out = capsys.readouterr().out
    assert "plan: 3 dead-letters match kind=launch since=" in out and "limit=3" in out


def test_sigint_stops_between_two_rows_and_the_summary_counts(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The signal arrives while the third write is on the wire: that write finishes and counts,
    no other starts; exit 130."""
    rig = Rig()
    anyio.run(rig.plant)
    real = rig.backend.outbox.apply_failed
    calls = {"n": 0}

    async def apply_failed(*a: Any, **kw: Any) -> bool:
        calls["n"] += 1
        if calls["n"] == 3:
            os.kill(os.getpid(), signal.SIGINT)
        return await real(*a, **kw)

    rig.backend.outbox.apply_failed = apply_failed  # type: ignore[method-assign]
    assert rig.run("--filter", "tenant=t1", "--yes", "--rate", "200") == 130
    cap = capsys.readouterr()
    assert "aborted: 3 of 6 planned rows replayed" in cap.out and "3 left untouched" in cap.out
    assert "SIGINT: stopping after the row in flight" in cap.err
    assert sum(1 for s in rig.states().values() if s == "pending") == 3


# --- on the wire ------------------------------------------------------------------------------


@pytest.mark.live_mongo
def test_sigterm_on_the_wire_leaves_every_row_replayed_or_untouched(
        live_uri: str, tmp_path: Path) -> None:
    """A real process against the wire server, rate-limited to 20 rows/s, sent SIGTERM about a
    second in: it exits 130, and the rows are exactly the summary's count replayed (pending,
    attempts 0, one audit entry of this bulk replay) and the rest untouched."""
    from pymongo import MongoClient

    from board_outbox.adapters.mongo.schema import INDEXES
    from board_outbox.adapters.mongo.subscriptions import SUBSCRIPTIONS
    from board_outbox.model.rows import new_row_doc

    db_name = f"bulk_{uuid.uuid4().hex[:8]}"
    client: MongoClient[dict[str, Any]] = MongoClient(live_uri)
    try:
        coll = client[db_name]["trigger_effects"]
        coll.create_indexes(INDEXES["trigger_effects"])
        coll.insert_many([new_row_doc(r) for r in _rows(80)])
        client[db_name][SUBSCRIPTIONS].insert_one({"_id": "s1", "sub_id": "s1", "tenant_id": "t1",
                                                   "bot": "b"})
        before = {d["row_key"]: d for d in coll.find({}, {"_id": 0})}
        cfg = tmp_path / "cfg.toml"
        cfg.write_text(f'[store]\nbackend = "mongo"\nuri = "{live_uri}"\ndatabase = "{db_name}"\n')
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
        proc = subprocess.Popen(
            [sys.executable, "-m", "board_outbox", "dead-letters", "replay", "--config", str(cfg),
             "--filter", "tenant=t1", "--filter", "error-class=LaunchFailed", "--filter", "bot=b",
             "--yes",
             "--rate", "20", "--by", "wire"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and coll.count_documents({"state": "pending"}) < 10:
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 130, (out, err)
        text = out.decode()
        assert "plan: 80 dead-letters match" in text and "SIGTERM" in err.decode()
        summary = next(line for line in text.splitlines() if line.startswith("bulk replay "))
        replayed_said = int(summary.split(": ")[1].split(" of ")[0])
        after = {d["row_key"]: d for d in coll.find({}, {"_id": 0})}
        replayed = untouched = 0
        for key, was in before.items():
            now = after[key]
            if now == was:
                untouched += 1
                continue
            assert now["state"] == "pending" and now["attempts"] == 0, now
            (entry,) = now["audit"]
            assert entry["by"] == "wire" and entry["detail"].startswith("attempts reset (bulk replay ")
            assert now["errors"] == was["errors"]
            replayed += 1
        assert replayed == replayed_said and 10 <= replayed < 80
        assert f"{80 - replayed} left untouched" in summary
    finally:
        client.drop_database(db_name)
        client.close()
