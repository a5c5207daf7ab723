"""``board-outbox doctor`` (O7): is this deployment ready to run the service? Each check judges
what a store's probe found (``adapters/mongo/diagnostics``) and says, unless it passed, what to
do. ``fail``: the service will not work as promised (no change streams, missing indexes or
privileges, a TTL other than ``[retention]``, a clock far off, an oplog shorter than the lag
budget); ``warn``: it works, but look (no access control, an oplog that has not filled yet).

The judging is pure given the facts, so a fake probe tests every verdict; the Mongo probe is
tested on the wire."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Protocol

from board_outbox.model.bad_documents import cap
from board_outbox.model.diagnosis import (
    Check,
    IndexFacts,
    OplogFacts,
    Privilege,
    ServerFacts,
)
from board_outbox.model.errors import BoardOutboxError
from board_outbox.model.retention import days
from board_outbox.service.config_sections import Config

__all__ = ["Probe", "diagnose", "required_privileges"]

MIN_VERSION = (6, 0)  # the oldest MongoDB the service is tested against
ROLES = ("readWrite and dbAdmin on the service's database, clusterMonitor for the oplog window "
         "(docs/operations.md, \"Minimal roles\")")


class Probe(Protocol):
    """What the doctor asks a store (``MongoProbe``; a fake in the tests)."""

    async def server(self) -> ServerFacts: ...

    async def change_stream(self) -> None: ...

    async def privileges(self) -> tuple[list[str], list[Privilege]]: ...

    async def indexes(self, collections: list[str]) -> dict[str, list[IndexFacts]]: ...

    async def oplog(self) -> OplogFacts: ...


def _fmt_seconds(seconds: float) -> str:
    s = abs(seconds)
    if s < 1:
        return f"{seconds * 1000:.0f} ms"
    if s < 120:
        return f"{seconds:.1f} s"
    if s < 7200:
        return f"{seconds / 60:.0f} min"
    if s < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def _loopback(host: str) -> bool:
    return host.split(":")[0] in ("127.0.0.1", "localhost", "::1", "[::1]")


def config_check(cfg: Config) -> Check:
    """What the configuration asks for, and what in it a production deployment should look
    at (it loaded, so it is consistent: ``load_config`` refuses anything else)."""
    from board_outbox.adapters.mongo.client import seed_hosts

    s = cfg.store
    hosts = seed_hosts(s.uri)
    found = (f"store {s.backend} " + (f"database {s.database!r} at {hosts}"
                                      if s.backend == "mongo" else "(in memory)")
             + f"; projections {', '.join(cfg.projections) or 'none'}; launcher {cfg.launcher.kind}")
    notes = []
    if s.backend == "memory":
        notes.append("store.backend = \"memory\" keeps nothing: a try-out, not a deployment")
    if cfg.launcher.kind == "log":
        notes.append("launcher.kind = \"log\" only logs launches (set \"http\" and launcher.url)")
    if not cfg.tail.change_streams:
        notes.append("tail.change_streams = false: events wait for the poll "
                     f"({cfg.tail.poll_interval_seconds:g} s)")
    if s.read_concern != "majority" or s.write_concern != "majority":
        notes.append("store read/write concern below majority: an election can roll back what "
                     "the service acted on (O5)")
    if s.backend == "mongo" and not re.search(r"[?&](tls|ssl)=true", s.uri, re.I) \
            and not s.uri.startswith("mongodb+srv://") \
            and not all(_loopback(h) for h in hosts.split(",")):
        notes.append("store.uri has no tls=true for a host that is not this machine")
    if notes:
        return Check(name="config", status="warn", found=found, todo="; ".join(notes))
    return Check(name="config", status="ok", found=found)


def _server_checks(cfg: Config, facts: ServerFacts) -> list[Check]:
    out = []
    rtt = facts.received_at - facts.sent_at
    major_minor = tuple(int(x) for x in re.findall(r"\d+", facts.version)[:2])
    found = f"answered in {_fmt_seconds(rtt)}: MongoDB {facts.version}"
    if major_minor and major_minor < MIN_VERSION:
        out.append(Check(name="server", status="warn", found=found,
                         todo=f"the service is tested on MongoDB {MIN_VERSION[0]}.{MIN_VERSION[1]} "
                              "and later: upgrade"))
    else:
        out.append(Check(name="server", status="ok", found=found))
    if facts.set_name is None:
        out.append(Check(name="replica set", status="fail",
                         found="a standalone server: no replica set, so no change streams and no "
                               "majority writes",
                         todo="run it as a replica set (one node is enough: mongod --replSet rs0, "
                              "then rs.initiate()) and name it in store.uri (?replicaSet=rs0)"))
    elif not facts.writable_primary:
        out.append(Check(name="replica set", status="fail",
                         found=f"replica set {facts.set_name!r}, but this member is not the primary",
                         todo="connect through the replica set (?replicaSet= in store.uri, not "
                              "directConnection)"))
    else:
        out.append(Check(name="replica set", status="ok",
                         found=f"replica set {facts.set_name!r}, primary {facts.primary}"))
    if facts.server_time is None:
        out.append(Check(name="clock", status="warn", found="the server gave no time",
                         todo="compare the clocks by hand (leases and heartbeats use each "
                              "replica's own)"))
    else:
        skew = facts.server_time - (facts.sent_at + facts.received_at) / 2
        slack = rtt / 2 + 0.001  # the server's time is in whole milliseconds
        limit = cfg.doctor.max_clock_skew_seconds
        text = (f"this clock is {_fmt_seconds(abs(skew))} {'behind' if skew > 0 else 'ahead of'} "
                f"the server's (+/- {_fmt_seconds(slack)})")
        if abs(skew) - slack > limit:
            out.append(Check(name="clock", status="fail", found=text,
                             todo=f"sync the clocks (NTP, chrony): more than {limit:g} s "
                                  "([doctor] max_clock_skew_seconds) skews leases "
                                  f"(worker.lease_seconds = {cfg.worker.lease_seconds:g}) and "
                                  "membership heartbeats across replicas"))
        else:
            out.append(Check(name="clock", status="ok", found=text))
    return out


def required_privileges(database: str) -> dict[str, list[str]]:
    """Action -> the collections of ``database`` the service needs it on (the doctor checks
    them; docs/operations.md grants them through roles)."""
    from board_outbox.adapters.mongo.api_tokens import API_TOKENS
    from board_outbox.adapters.mongo.cards import CARDS
    from board_outbox.adapters.mongo.cursors import CURSORS
    from board_outbox.adapters.mongo.events import COUNTERS, EVENTS
    from board_outbox.adapters.mongo.outbox.statements import EFFECTS
    from board_outbox.adapters.mongo.schema import INDEXES
    from board_outbox.adapters.mongo.subscriptions import SUBSCRIPTIONS

    own = sorted({EFFECTS, CURSORS, API_TOKENS, *INDEXES} - {EVENTS, SUBSCRIPTIONS})
    return {
        "find": sorted({*own, EVENTS, COUNTERS, CARDS, SUBSCRIPTIONS}),
        "insert": own, "remove": own, "update": sorted({*own, CARDS}),
        "changeStream": [EVENTS, SUBSCRIPTIONS],
        "createIndex": sorted(INDEXES), "listIndexes": sorted(INDEXES),
        "dropIndex": [EFFECTS], "collMod": [EFFECTS],
    }


def _privilege_check(cfg: Config, users: Sequence[str], privs: Sequence[Privilege]) -> Check:
    if not users:
        return Check(name="privileges", status="warn",
                     found="no user is authenticated: the server runs without access control",
                     todo="enable authentication in production and give the service a user with "
                          + ROLES)
    db = cfg.store.database
    missing: dict[str, list[str]] = {}
    for action, collections in required_privileges(db).items():
        for coll in collections:
            if not any(p.grants(action, db, coll) for p in privs):
                missing.setdefault(coll, []).append(action)
    oplog = any(p.grants("find", "local", "oplog.rs") for p in privs)
    who = ", ".join(users)
    if missing:
        groups: dict[tuple[str, ...], list[str]] = {}  # the same actions missing: one group
        for coll, actions in sorted(missing.items()):
            groups.setdefault(tuple(actions), []).append(coll)
        shown = "; ".join(f"{', '.join(a)} on {', '.join(c)}" for a, c in groups.items())
        return Check(name="privileges", status="fail", found=f"{who} lacks {shown}",
                     todo=f"grant {ROLES}")
    if not oplog:
        return Check(name="privileges", status="warn",
                     found=f"{who} has what the service needs, but cannot read local.oplog.rs",
                     todo="grant clusterMonitor for the oplog window and the history headroom "
                          "gauge (optional)")
    return Check(name="privileges", status="ok", found=f"{who} has what the service needs")


def _index_doc(model: Any) -> dict[str, Any]:
    doc = dict(model.document)
    return {"key": [(k, int(v) if isinstance(v, (int, float)) else v)
                    for k, v in dict(doc["key"]).items()],
            "unique": bool(doc.get("unique", False)),
            "partial": dict(doc["partialFilterExpression"]) if "partialFilterExpression" in doc
            else None,
            "expire": doc.get("expireAfterSeconds")}


def _facts_doc(f: IndexFacts) -> dict[str, Any]:
    return {"key": [(k, int(v) if isinstance(v, (int, float)) else v) for k, v in f.key],
            "unique": f.unique, "partial": f.partial, "expire": f.expire_after_seconds}


def _index_checks(cfg: Config, found: dict[str, list[IndexFacts]]) -> list[Check]:
    from board_outbox.adapters.mongo.outbox.statements import EFFECTS
    from board_outbox.adapters.mongo.schema import OBSOLETE, TTL_NAMES, TTL_STATES, expected_indexes

    missing, differ, obsolete = [], [], []
    expected = expected_indexes(cfg.retention)
    for coll, models in expected.items():
        have = {f.name: f for f in found.get(coll, [])}
        for m in models:
            name = m.document["name"]
            if name in TTL_NAMES:
                continue  # the retention check's
            if name not in have:
                missing.append(f"{coll}.{name}")
            elif _facts_doc(have[name]) != _index_doc(m):
                differ.append(f"{coll}.{name}")
        obsolete += [f"{coll}.{n}" for n in OBSOLETE.get(coll, ()) if n in have]
    total = sum(len(m) for m in expected.values())
    out = []
    if missing or differ:
        parts = ([f"missing {', '.join(missing[:8])}"] if missing else []) + \
            ([f"other options: {', '.join(differ[:8])}"] if differ else [])
        out.append(Check(name="indexes", status="fail", found="; ".join(parts),
                         todo="run `board-outbox ensure-schema` (an index with other options: "
                              "drop it first); without them the claims and the audit scan"))
    elif obsolete:
        out.append(Check(name="indexes", status="warn",
                         found=f"obsolete indexes still there: {', '.join(obsolete)}",
                         todo="run `board-outbox ensure-schema` (drops them; they slow every "
                              "row write)"))
    else:
        out.append(Check(name="indexes", status="ok",
                         found=f"all {total} indexes ensure-schema makes are in place"))
    have = {f.name: f for f in found.get(EFFECTS, [])}
    wrong = []
    for state, seconds in cfg.retention.by_state().items():
        name, _field = TTL_STATES[state]
        got = have.get(name)
        now = got.expire_after_seconds if got is not None else None
        if (seconds or None) != now:
            wrong.append(f"{name}: {'absent' if now is None else f'{now} s'}, [retention] "
                         f"{state}_seconds = {seconds}{' (kept forever)' if not seconds else ''}")
    kept = ", ".join(f"{state} {days(s)}" for state, s in cfg.retention.by_state().items())
    if wrong:
        out.append(Check(name="retention", status="fail", found="; ".join(wrong),
                         todo="run `board-outbox ensure-schema` (or start a replica): the TTL "
                              "indexes then follow [retention] (collMod, in place)"))
    else:
        out.append(Check(name="retention", status="ok",
                         found=f"the TTL indexes follow [retention]: expire {kept}"))
    return out


def _oplog_check(cfg: Config, facts: OplogFacts) -> Check:
    budget = cfg.doctor.oplog_budget_seconds
    if facts.first is None or facts.last is None:
        return Check(name="oplog", status="warn", found="the oplog is empty",
                     todo="check again once the replica set has taken writes")
    window = facts.last - facts.first
    found = f"the oplog holds {_fmt_seconds(window)} of history"
    if facts.token_saved_at is not None:
        headroom = facts.token_saved_at - facts.first  # A2, as the service's gauge reads it
        if headroom < 0:
            return Check(name="oplog", status="warn",
                         found=f"{found}; the saved resume token is {_fmt_seconds(-headroom)} "
                               "past its end",
                         todo="nothing is lost: the next start drops the token and polls every "
                              "tenant once; keep a replica running to keep the token fresh")
        found += f"; the saved resume token is {_fmt_seconds(headroom)} from falling off it"
    if window >= budget:
        return Check(name="oplog", status="ok",
                     found=f"{found}, at least the lag budget ({_fmt_seconds(budget)})")
    if facts.full:
        return Check(name="oplog", status="fail",
                     found=f"{found}, below the lag budget ([doctor] oplog_budget_seconds = "
                           f"{_fmt_seconds(budget)}): a change stream behind that long cannot "
                           "resume (the service then polls every tenant)",
                     todo="grow the oplog (replSetResizeOplog, or oplogMinRetentionHours) or "
                          "lower the budget")
    return Check(name="oplog", status="warn",
                 found=f"{found} so far, below the lag budget ({_fmt_seconds(budget)}), and is "
                       "not full yet (or the server does not say)",
                 todo="check again once it is full: the window only shrinks from there")


async def diagnose(cfg: Config, probe: Probe | None, *, reach_error: str | None = None
                   ) -> list[Check]:
    """Every check, in order. ``probe`` None: the store was not reached (``reach_error`` says
    why) or is the memory backend; the server's checks are then skipped."""
    checks = [config_check(cfg)]
    if cfg.store.backend == "memory":
        checks.append(Check(name="store", status="skip",
                            found="the memory backend: no server to check"))
        return checks
    if probe is None:
        checks.append(Check(name="store", status="fail", found=reach_error or "not reached",
                            todo="the other checks need the store: fix this first"))
        return checks
    skipped = "skipped: the store did not answer it"

    async def ask(name: str, fn: Any, *args: Any) -> Any:
        try:
            return await fn(*args)
        except BoardOutboxError as exc:
            checks.append(Check(name=name, status="fail", found=cap(str(exc), 300),
                                todo=skipped if name == "store" else
                                "see the error; `board-outbox doctor` again once it is fixed"))
            return None

    server = await ask("store", probe.server)
    if server is None:
        return checks
    checks += _server_checks(cfg, server)
    if not cfg.tail.change_streams:
        checks.append(Check(name="change streams", status="skip",
                            found="off in the configuration (tail.change_streams = false)"))
    elif server.set_name is not None:
        try:
            await probe.change_stream()
            checks.append(Check(name="change streams", status="ok",
                                found="a change stream opens on board_events"))
        except BoardOutboxError as exc:
            checks.append(Check(name="change streams", status="fail",
                                found=f"a change stream does not open: {cap(str(exc), 200)}",
                                todo="fix the replica set (and the changeStream privilege); "
                                     "until then the service waits for its poll"))
    try:
        users, privs = await probe.privileges()
        checks.append(_privilege_check(cfg, users, privs))
    except BoardOutboxError as exc:
        checks.append(Check(name="privileges", status="warn",
                            found=f"the server will not list them: {cap(str(exc), 200)}",
                            todo=f"check by hand that the service's user has {ROLES}"))
    from board_outbox.adapters.mongo.schema import expected_indexes

    found = await ask("indexes", probe.indexes, sorted(expected_indexes(cfg.retention)))
    if found is not None:
        checks += _index_checks(cfg, found)
    if server.set_name is not None:
        try:
            checks.append(_oplog_check(cfg, await probe.oplog()))
        except BoardOutboxError as exc:
            checks.append(Check(name="oplog", status="warn",
                                found=f"cannot read the oplog: {cap(str(exc), 200)}",
                                todo="grant clusterMonitor (read on local.oplog.rs) to check the "
                                     "oplog window against the lag budget"))
    return checks
