"""A8 with real processes on the wire: ``board-outbox rows cancel`` and ``rows rerun`` are
SIGKILLed midway, then three applies of the same command run at once, while a ``board-outbox
run`` service claims and launches the same tenant's rows through an HTTP bot runner that counts
each row key's launches on its side.

- cancel: every planned pending row ends either cancelled, with one cancel entry in its history
  and 0 launches, or claimed by the service first and launched once -- never both; the service
  takes some of the rows the killed apply had planned (the race is real).
- rerun: every planned done row gets one rerun row (``ROW_KEY/rerun/1``, never ``/rerun/2``),
  its history names it once, and the bot sees each new key once.

Each apply plans, asks on its terminal (a pty) and applies once a y is typed: the three are
told to go together after all three have read their plan (two before the kill, one after it),
so every row is raced by all three whatever the machine's load. The bot runner holds its
launches while the commands start (the service's claims stop where they are) and lets them go
with the y: the service then races the applies for the same rows. The four applies run one
command the way an operator would repeat it. The cancel's is bounded by ``before=`` the moment
the rows were in place (a row a bulk action touched moves its ``updated_at`` past it, so no
later plan of the command takes it again). The rerun's has no bound: a plan after the kill
leaves out the rows re-run already (noted by the killed apply, or a rerun themselves, done by
the service since) and takes the rest, the half-done row among them."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from pymongo import AsyncMongoClient, MongoClient

from board_outbox.adapters.memory import MemoryLauncher
from board_outbox.adapters.mongo import ensure_schema, mongo_stores
from board_outbox.model.board import EventSnapshot
from board_outbox.model.rows import new_launch_row
from board_outbox.model.subscriptions import Subscription
from tests.support.bot_runner import CountingBots
from tests.support.live_mongo import LiveServer
from tests.support.process import running
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.live_mongo]

ROOT = Path(__file__).resolve().parent.parent
CANCEL_T, RERUN_T = "ck", "rk"  # one tenant each, one subscription each
CANCEL_SUB = Subscription(sub_id="sc", tenant_id=CANCEL_T, bot="slow")
RERUN_SUB = Subscription(sub_id="sr", tenant_id=RERUN_T, bot="fast")
CANCEL_ROWS, RERUN_ROWS = 24, 18
SLOW = 0.1  # seconds a launch of the cancel tenant's bot takes: the service races the applies
KILL_AFTER = 3  # rows the first apply has written when it is SIGKILLed
FIRST_RATE, THEN_RATE = "8", "40"  # rows a second: the killed apply's, the three applies'
BOUND = 60.0  # seconds a held launch waits at most for the bot's go
TEST_SECONDS = 55.0  # every wait of one test comes out of this (the suite's timeout is 90 s)
KILLED_APP = "bulk-kill-first"  # the killed apply's store client (the failpoint's scope)
HELD_MS = 15_000  # how long the failpoint holds the killed apply's write (then refuses it)


@dataclass
class Live:
    uri: str
    name: str
    db: Any  # pymongo Database
    cfg: Path
    bots: CountingBots
    log: Path
    env: dict[str, str]
    tmp: Path
    end: float = 0.0  # when this test's waits run out (``budget``)

    def budget(self) -> float:
        """Seconds left for the next wait: what remains of the test's ``TEST_SECONDS``."""
        return max(0.5, self.end - time.monotonic())

    @property
    def rows(self) -> Any:
        return self.db["trigger_effects"]

    def text(self, tag: str, ext: str = "out") -> str:
        return (self.tmp / f"{tag}.{ext}").read_text()


def _config(path: Path, uri: str, name: str, bot_url: str) -> None:
    path.write_text(f"""projections = []
[store]
backend = "mongo"
uri = "{uri}"
database = "{name}"
[tail]
seed = "earliest"
change_streams = false
poll_interval_seconds = 0.5
[worker]
batch_size = 3
idle_seconds = 0.05
net_pick_seconds = 0.1
lease_seconds = 30
[launcher]
kind = "http"
url = "{bot_url}"
timeout_seconds = {2 * BOUND:g}
[service]
http_port = 0
log_level = "WARNING"
shutdown_grace_seconds = 5
""")


def _event(seq: int, at: float) -> EventSnapshot:
    return EventSnapshot(seq=seq, type="card.created", card_id=f"c{seq}", at=at)


async def _seed(uri: str, name: str) -> None:
    """The schema, the two subscriptions, and the rerun tenant's rows, done a minute ago."""
    client: Any = AsyncMongoClient(uri, tz_aware=True)
    try:
        db = client[name]
        await ensure_schema(db)
        stores = mongo_stores(db, MemoryLauncher(), change_feed=False)
        await stores.subs.put(CANCEL_SUB)
        await stores.subs.put(RERUN_SUB)
        then = time.time() - 60
        rows = []
        for seq in range(1, RERUN_ROWS + 1):
            row = new_launch_row(RERUN_T, _event(seq, then), RERUN_SUB, then)
            row.state, row.outcome = "done", "launched run-0"
            rows.append(row)
        await stores.outbox.upsert_rows(rows)
    finally:
        await client.close()


async def _pending(uri: str, name: str) -> None:
    """The cancel tenant's rows, pending and due now."""
    client: Any = AsyncMongoClient(uri, tz_aware=True)
    try:
        stores = mongo_stores(client[name], MemoryLauncher(), change_feed=False)
        now = time.time()
        await stores.outbox.upsert_rows([new_launch_row(CANCEL_T, _event(seq, now), CANCEL_SUB, now)
                                         for seq in range(1, CANCEL_ROWS + 1)])
    finally:
        await client.close()


@pytest.fixture(scope="module")
def served(live_uri: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """A fresh database, the bot runner, and one ``board-outbox run`` on both, up (its
    membership heartbeat is in the store); still running at the end."""
    tmp = tmp_path_factory.mktemp("bulk_kill")
    name = f"bulk_kill_{uuid.uuid4().hex[:8]}"
    client: MongoClient[dict[str, Any]] = MongoClient(live_uri)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "BOARD_OUTBOX_SERVICE__HTTP_PORT": "0"}
    with ExitStack() as stack:
        stack.callback(client.close)
        stack.callback(client.drop_database, name)
        bots = stack.enter_context(CountingBots({"slow": SLOW}, hold_seconds=BOUND))
        anyio.run(_seed, live_uri, name)
        cfg = tmp / "bo.toml"
        _config(cfg, live_uri, name, bots.url)
        log = tmp / "run.log"
        service = stack.enter_context(running(cfg, log, env))
        db = client[name]
        wait_until(lambda: service.poll() is not None
                   or db["board_outbox_members"].count_documents({}) > 0, 30,
                   lambda: f"the service's first heartbeat: {log.read_text()[-2000:]}")
        assert service.poll() is None, log.read_text()[-2000:]
        live = Live(live_uri, name, db, cfg, bots, log, env, tmp)
        yield live
        assert service.poll() is None, f"the service died: {log.read_text()[-2000:]}"


class Asking:
    """``board-outbox rows ACTION ... --json`` as child processes, each asking on a terminal of
    its own (a pty) before it applies its plan; stdout (the plan, the question, the summary) in
    ``TAG.out``, stderr (the progress bar, the summary line) in ``TAG.err``."""

    def __init__(self, live: Live, stack: ExitStack, action: str, args: list[str],
                 tags: list[str], app: str = "board-outbox") -> None:
        self.live, self.tags = live, tags
        self.procs: list[subprocess.Popen[bytes]] = []
        self.terminals: list[int] = []
        for tag in tags:
            ours, theirs = pty.openpty()
            stack.callback(os.close, ours)
            with ((live.tmp / f"{tag}.out").open("wb") as out,
                  (live.tmp / f"{tag}.err").open("wb") as err):
                self.procs.append(subprocess.Popen(
                    [sys.executable, "-m", "board_outbox", "rows", action, *args, "--json",
                     "--by", tag, "--config", str(live.cfg)],
                    env={**live.env, "BOARD_OUTBOX_STORE__APP_NAME": app}, stdin=theirs,
                    stdout=out, stderr=err))
            os.close(theirs)
            self.terminals.append(ours)
        stack.callback(self._reap)

    def _reap(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    def plans_read(self) -> None:
        """Wait until every one has printed its plan and asks."""
        wait_until(lambda: all("[y/N]" in self.live.text(t) or p.poll() is not None
                               for t, p in zip(self.tags, self.procs, strict=True)),
                   self.live.budget(),
                   lambda: f"the plans: {[self.live.text(t, 'err')[-500:] for t in self.tags]}")
        for tag, p in zip(self.tags, self.procs, strict=True):
            assert p.poll() is None, f"{tag} did not ask: {self.live.text(tag)[-1500:]}"

    def yes(self) -> None:
        for fd in self.terminals:
            os.write(fd, b"y\n")

    def ended(self) -> None:
        for tag, p in zip(self.tags, self.procs, strict=True):
            rc = p.wait(timeout=self.live.budget())
            assert rc == 0, f"{tag}: exit {rc}: {self.live.text(tag, 'err')[-1500:]}"


def _docs(live: Live, tag: str) -> list[dict[str, Any]]:
    """The JSON documents a ``rows`` command printed (indented, one after another; the
    question between them skipped)."""
    text, docs, at = live.text(tag), [], 0
    dec = json.JSONDecoder()
    while (at := text.find("{", at)) >= 0:
        doc, at = dec.raw_decode(text, at)
        docs.append(doc)
    return docs


def _killed_then_three(live: Live, action: str, args: list[str], written: Callable[[], int],
                       kill_at: int, *, app: str = "board-outbox",
                       ) -> tuple[int, int, list[dict[str, Any]]]:
    """Four applies of one command, each asking once it has read its plan; the bot holds the
    service's launches while they start. The first (its store client named ``app``) is told
    y (and the bot to go) and SIGKILLed once ``written()`` (its writes, read from the store)
    reaches ``kill_at``. Of the three after it, two read their plans before the kill (stale
    by the time they write) and one after it (as an operator repeating the command would);
    then all three are told y together and run to their end. The rows the killed one's plan
    counted, ``written()`` right after the kill, and the three's summaries."""
    tags = [f"{action}-{i}" for i in range(4)]
    with ExitStack() as stack:
        stack.callback(live.bots.go)  # whatever happens here, the service's launches go on
        live.bots.hold()
        first = Asking(live, stack, action, [*args, "--rate", FIRST_RATE], tags[:1], app)
        early = Asking(live, stack, action, [*args, "--rate", THEN_RATE], tags[1:3])
        first.plans_read()
        early.plans_read()
        first.yes()
        live.bots.go()
        killed = first.procs[0]
        wait_until(lambda: killed.poll() is not None or written() >= kill_at, live.budget(),
                   lambda: f"{tags[0]} writing: {live.text(tags[0], 'err')[-1500:]}")
        assert killed.poll() is None, (f"{tags[0]} ended before the kill: {_docs(live, tags[0])}",
                                       Counter(d["state"] for d in live.rows.find()))
        killed.send_signal(signal.SIGKILL)
        live.bots.hold()
        assert killed.wait(timeout=live.budget()) == -signal.SIGKILL
        left = written()
        late = Asking(live, stack, action, [*args, "--rate", THEN_RATE], tags[3:])
        late.plans_read()
        early.yes()
        late.yes()
        live.bots.go()
        early.ended()
        late.ended()
    (plan,), plans, summaries = _docs(live, tags[0]), [], []  # killed before its summary
    for tag in tags[1:]:
        their_plan, summary = _docs(live, tag)
        assert their_plan["matched"] > 0 and summary["planned"] == their_plan["matched"], tag
        assert summary["state"] == "done" and summary["in_doubt"] is None, (tag, summary)
        assert summary["applied"] + summary["skipped"] == summary["planned"], (tag, summary)
        plans.append(their_plan)
        summaries.append(summary)
    # every plan was read before any of the three wrote: each row was raced by all three
    assert max(p["planned_at"] for p in plans) < min(s["started_at"] for s in summaries)
    return int(plan["matched"]), left, summaries


def _settled(live: Live, tenant: str) -> None:
    wait_until(lambda: live.rows.count_documents(
        {"tenant_id": tenant, "state": {"$in": ["pending", "claimed"]}}) == 0, live.budget(),
        lambda: f"the service ran the rest: {live.log.read_text()[-1500:]}")


def test_cancel_killed_midway_then_three_applies_cancel_each_row_once_and_launch_none(
        served: Live) -> None:
    live, started = served, time.monotonic()
    live.end = started + TEST_SECONDS
    anyio.run(_pending, live.uri, live.name)
    # the plan the four applies share: the tenant's rows as they were once all were in
    args = ["--filter", f"tenant={CANCEL_T}", "--filter", f"before={time.time():.6f}",
            "--reason", "bot retired"]
    mine = {"tenant_id": CANCEL_T, "state": "cancelled"}
    planned, _, summaries = _killed_then_three(
        live, "cancel", args, lambda: int(live.rows.count_documents(mine)), KILL_AFTER)
    _settled(live, CANCEL_T)
    took = time.monotonic() - started

    rows = {d["row_key"]: d for d in live.rows.find({"tenant_id": CANCEL_T})}
    launched = live.bots.counts(f"{CANCEL_T}/")
    assert len(rows) == CANCEL_ROWS
    cancelled = {k for k, d in rows.items() if d["state"] == "cancelled"}
    done = {k for k, d in rows.items() if d["state"] == "done"}
    assert cancelled | done == set(rows), Counter(d["state"] for d in rows.values())
    for key in cancelled:  # never launched, and cancelled once, by one apply
        assert launched[key] == 0, f"{key} was cancelled and launched {launched[key]} times"
        audit = rows[key]["audit"]
        assert len(audit) == 1, f"{key} cancelled {len(audit)} times: {audit}"
        assert audit[0]["action"] == "cancel", audit
        assert audit[0]["detail"].startswith("bot retired (bulk "), audit
    for key in done:  # the service claimed it first: it ran, once, and no cancel touched it
        assert launched[key] == 1 and not rows[key].get("audit"), (key, launched[key], rows[key])
    by = Counter(rows[k]["audit"][0]["by"] for k in cancelled)
    assert KILL_AFTER <= by["cancel-0"] < planned, by  # killed midway, its cancels stand
    for i, s in enumerate(summaries, 1):  # each apply counts what it did, and nothing more
        assert s["applied"] == by[f"cancel-{i}"], (s, by)
    # the race is real: of the rows the killed apply planned (pending then), the service
    # claimed some before any apply reached them, and those ran instead of being cancelled
    assert len(cancelled) < planned, (planned, len(cancelled))
    print(f"\ncancel: {planned} planned, {len(cancelled)} cancelled ({by['cancel-0']} before "
          f"the kill, then {[s['applied'] for s in summaries]} of "
          f"{[s['planned'] for s in summaries]}), "
          f"{len(done)} ran (claimed first); {took:.1f}s")


def test_rerun_killed_between_a_new_row_and_its_note_then_three_applies_rerun_each_row_once(
        served: Live, live: LiveServer) -> None:
    """The killed apply's writes are a row's new row (an insert), then its note (an update);
    a failpoint holds its sixth -- the third row's note -- on the server until the kill, so the
    kill lands between the two writes of one row."""
    if not live.failpoints():
        pytest.skip("the wire server has no failpoints (test commands disabled)")
    started = time.monotonic()
    served.end = started + TEST_SECONDS
    coll = served.rows
    originals = {d["row_key"] for d in coll.find({"tenant_id": RERUN_T, "state": "done"})}
    assert len(originals) == RERUN_ROWS
    args = ["--filter", f"tenant={RERUN_T}"]  # no bound: the operator repeats the command

    def writes() -> int:  # the new rows and the notes in the store
        return int(coll.count_documents({"tenant_id": RERUN_T, "rerun_of": {"$ne": None}})
                   + coll.count_documents({"tenant_id": RERUN_T, "audit.action": "rerun"}))

    admin = served.db.client.admin
    admin.command("configureFailPoint", "failCommand",
                  mode={"skip": 2 * KILL_AFTER - 1, "times": 1},
                  data={"failCommands": ["insert", "update"], "appName": KILLED_APP,
                        "blockConnection": True, "blockTimeMS": HELD_MS,
                        "errorCode": 2})
    try:
        planned, left, summaries = _killed_then_three(
            served, "rerun", args, writes, 2 * KILL_AFTER - 1, app=KILLED_APP)
    finally:
        admin.command("configureFailPoint", "failCommand", mode="off")
    _settled(served, RERUN_T)
    took = time.monotonic() - started
    assert planned == RERUN_ROWS and left == 2 * KILL_AFTER - 1  # killed at the held write
    # the plan read after the kill leaves out the rows the killed apply noted, and the new rows
    # the service ran since, as re-run already, and keeps the one whose note it never wrote
    assert summaries[-1]["planned"] == RERUN_ROWS - (KILL_AFTER - 1), summaries[-1]
    late = _docs(served, "rerun-3")[0]
    assert KILL_AFTER - 1 <= late["already_rerun"] <= 2 * KILL_AFTER - 1, late

    rows = {d["row_key"]: d for d in coll.find({"tenant_id": RERUN_T})}
    reruns = {k: d for k, d in rows.items() if d.get("rerun_of")}
    assert sorted(reruns) == sorted(f"{k}/rerun/1" for k in originals)  # one each, none /rerun/2
    launched = served.bots.counts(f"{RERUN_T}/")
    assert launched == Counter(dict.fromkeys(reruns, 1))  # each new key once, no original again
    for key in originals:
        d = rows[key]
        assert d["state"] == "done" and reruns[f"{key}/rerun/1"]["rerun_of"] == key
        notes = [a for a in d["audit"] if a["action"] == "rerun"]
        assert len(notes) == 1 and notes[0]["detail"].startswith(f"re-run as {key}/rerun/1 "), \
            d["audit"]
    for d in reruns.values():
        assert d["state"] == "done" and [a["action"] for a in d["audit"]] == ["rerun_of"], d
    noted = Counter(rows[k]["audit"][-1]["by"] for k in originals)
    made = Counter(d["audit"][0]["by"] for d in reruns.values())
    # the killed apply's two rows noted, its third row's new row in, its note left to the three
    assert (noted["rerun-0"], made["rerun-0"]) == (KILL_AFTER - 1, KILL_AFTER), (noted, made)
    for i, s in enumerate(summaries, 1):
        assert s["applied"] == noted[f"rerun-{i}"], (s, noted)
    print(f"\nrerun: {planned} planned, {noted['rerun-0']} before the kill (+1 new row unnoted), "
          f"then {[s['applied'] for s in summaries]} of {[s['planned'] for s in summaries]}; "
          f"{took:.1f}s")
