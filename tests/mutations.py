"""A small, deterministic mutation campaign (issue 15): do the tests catch what they claim?

    ./dev.sh mutate                      # every mutant, unit suite + harness, one job
    ./dev.sh mutate --jobs 2             # two mutants at a time
    ./dev.sh mutate --only launch-no-reverify --only tail-poison-first-tick
    ./dev.sh mutate --list               # the mutants, and where each snippet is found

Each mutant is (name, original snippet, replacement, optional path hint). The file is found by
searching every ``.py`` under ``src/`` for the snippet, so the campaign
survives modules being moved; a snippet that is not found, or found more than once (and not
narrowed by the hint), fails loudly so the mutant can be retargeted.

For each mutant the repository (src/, projections/, tests/, tracing/, benchmarks/, docs/, .ci/, deploy/,
the top-level files) is copied to a temporary directory, the snippet replaced there, and run
with ``PYTHONPATH`` pointing at the copy (so the copy, not the editable install, is imported --
checked before the campaign):

(a) the unit suite: ``pytest -m "not live_mongo" -x -q -p no:cacheprovider``; the first failing
    test id is what caught the mutant. When the mutant's catcher is known (the test the last
    results table names, ``--catchers``, or ``CATCHERS``), that test runs alone first and a
    failure there is the kill (seconds instead of the suite up to it); only when it passes
    does the whole suite run (``--suite-only``: always the whole suite). A catcher in
    ``LIVE_CATCHERS`` is a live test (a real process killed on the wire server) and runs with
    the live tests selected;


"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COPY = ("src", "projections", "tests", "tracing", "benchmarks", "docs", "pyproject.toml",
        "README.md", "ARCHITECTURE.md", "board-outbox.example.toml", "dev.sh", ".ci",
        "deploy", "Dockerfile", ".dockerignore", "LICENSE", "CHANGELOG.md")
SEARCH = ("src",)
UNIT_TIMEOUT = 900.0
HARNESS_TIMEOUT = 600.0
# schedules (memory, mongomock) per mutant: more for the groups the harness must catch, where a
# mutant may need a rare interleaving (a lease stolen despite the heartbeat) to show
HARNESS_SCHEDULES = (200, 40)
HARNESS_SCHEDULES_CORE = (1000, 100)


@dataclass(frozen=True)
class Mutant:
    name: str
    group: str  # tail | worker | launch: the 14 the harness must see; then the others
    original: str
    replacement: str
    hint: str = ""  # a path fragment, used only to pick between several files with the snippet


MUTANTS: tuple[Mutant, ...] = (
    # --- the tail --------------------------------------------------------------------------
    Mutant("tail-poison-first-tick", "tail",
           "if ticks < self.settings.poison_ticks:", "if ticks < 1:", "tail"),
    Mutant("tail-seed-from-allocator", "tail",
           "seed = await self.events.seq_before(tenant_id, await self.begin())",
           "seed = await self.events.allocated_seq(tenant_id)", "tenants"),
    Mutant("tail-young-gap-stepped-at-once", "tail",
           "        if age < self.young_gap_seconds:\n            return False",
           "        if age < 0:\n            return False", "reading"),
    Mutant("tail-first-event-of-batch-unmatched", "tail",
           "        for snap in snapshots:\n            tc, first = events.begin(snap.seq), len(rows)",
           "        for snap in snapshots[1:]:\n            tc, first = events.begin(snap.seq), len(rows)",
           "tail"),
    Mutant("tail-poll-net-reads-counters-first", "tail",
           "        cursors = {t: c for t, c in (await self.cursors.all()).items() if is_seq(c)}\n"
           "        heads = await self.events.heads()\n",
           "        heads = await self.events.heads()\n"
           "        cursors = {t: c for t, c in (await self.cursors.all()).items() if is_seq(c)}\n",
           "tenants"),
    # --- the worker and the outbox's fencing -------------------------------------------------
    Mutant("worker-reclaim-no-attempt-memory", "worker",
           'return Transition(name="reclaim", count_attempt=True,',
           'return Transition(name="reclaim", count_attempt=False,', "outbox_transitions"),
    Mutant("worker-never-parks", "worker",
           "        if attempt >= self.max_attempts:\n"
           '            span.set_attribute(telemetry.ATTR_OUTCOME, "failed")',
           "        if False:\n"
           '            span.set_attribute(telemetry.ATTR_OUTCOME, "failed")', "completer"),
    Mutant("worker-budget-off-by-one", "worker",
           "if attempt >= self.max_attempts:",
           "if attempt > self.max_attempts:", "completer"),
    Mutant("worker-mark-done-unfenced-memory", "worker",
           '        if doc is None or doc.get("state") != CLAIMED or doc.get("claim_id") != claim_id:\n'
           '            return None',
           '        if doc is None:\n            return None', "memory/outbox/marks"),
    Mutant("worker-mark-done-unfenced-mongo", "worker",
           "res = await self.coll.update_one(by_ids([ref], state=CLAIMED, claim_id=claim_id),",
           "res = await self.coll.update_one(by_ids([ref]),", "mongo/outbox/marks"),
    # --- the launch handler ----------------------------------------------------------------
    Mutant("launch-no-reverify", "launch",
           "if not row.consume_marked and not matches(sub, row.event):", "if False:", "launch"),
    Mutant("launch-no-cross-tenant-check", "launch",
           "if sub.tenant_id != row.tenant_id:  # M10b", "if False:  # M10b", "launch"),
    Mutant("launch-consume-again-on-retry", "launch",
           "if sub.consume_labels and not row.consume_marked:", "if sub.consume_labels:", "launch"),
    Mutant("launch-own-consume-taken-as-absent", "launch",
           'if spent == "absent":', 'if spent != "consumed":', "launch"),
    Mutant("launch-transient-sub-read-drops", "launch",
           '            except SubscriptionNotFound:\n                return "dropped: subscription deleted"',
           "            except (SubscriptionNotFound, StoreUnavailable):\n"
           '                return "dropped: subscription deleted"', "launch"),
    # --- others: domain, error classification, runtime, adapters ---------------------------
    Mutant("domain-matches-ignores-column", "domain",
           "if rule.column is not None and ev.column != rule.column:", "if False:", "subscriptions"),
    Mutant("domain-disabled-subscription-matches", "domain",
           "if not sub.enabled or ev.deleted:", "if ev.deleted:", "subscriptions"),
    Mutant("domain-index-misses-column-only-rules", "domain",
           "for key in ((ev.type, ev.column), (ev.type, None), (None, ev.column), (None, None)):",
           "for key in ((ev.type, ev.column), (ev.type, None), (None, None)):", "subscriptions"),
    Mutant("domain-one-shot-labels-not-required", "domain",
           "return not (sub.consume_labels and not set(sub.consume_labels).issubset(ev.labels))",
           "return True", "subscriptions"),
    Mutant("domain-labels-all-ignored", "domain",
           "if rule.labels_all and not set(rule.labels_all).issubset(ev.labels):", "if False:",
           "subscriptions"),
    Mutant("errors-launch-failed-is-permanent", "errors",
           "class LaunchFailed(EffectError):", "class LaunchFailed(PermanentEffectError):",
           "errors"),
    Mutant("errors-mongo-transient-codes-permanent", "errors",
           "return isinstance(exc, OperationFailure) and exc.code in TRANSIENT_CODES",
           "return False", "mongo"),
    Mutant("runtime-stale-token-kept-after-lost-stream", "runtime",
           "        self.forget()\n        if self.store is not None:\n            await self.store.clear()",
           "        if self.store is not None:\n            await self.store.clear()", "resume"),
    Mutant("runtime-no-catch-up-poll-after-lost-stream", "runtime",
           "                    self.request_full_poll()\n                    poll_when_open = True\n"
           "                    try:",
           "                    try:", "runtime"),
    Mutant("runtime-stream-change-wakes-nothing", "runtime",
           "self.wake_tenant(change.tenant_id)", "pass", "runtime"),
    Mutant("worker-retry-without-backoff", "worker+",
           "T.retry(now=now, error=err, not_before=now + delay)",
           "T.retry(now=now, error=err, not_before=now)", "completer"),
    Mutant("worker-expired-lease-still-executes", "worker+",
           "if now >= claim.lease_until:", "if False:", "executing"),
    Mutant("cursor-cas-always-wins-memory", "adapters",
           "        if self._cursors.get(tenant_id) != expected:\n            return False",
           "        if False:\n            return False", "memory"),
    Mutant("worker-reclaim-no-attempt-mongo", "adapters",
           '    if t.count_attempt:\n        update["$inc"] = {"attempts": 1}',
           '    if t.count_attempt and t.name != "reclaim":\n        update["$inc"] = {"attempts": 1}',
           "mongo/outbox/statements"),
    Mutant("launch-consume-mark-not-persisted", "launch+",
           "            await self._persist_consumed(row, ctx)", "            pass", "launch"),
    Mutant("backoff-no-growth", "worker+",
           "self.base_seconds * self.factor ** max(0, attempt - 1)", "self.base_seconds",
           "backoff"),
    # --- issue 21: exact instants, counted throttles, caps, limits, types, hooks, budgets -----
    Mutant("claim-due-exact-instant-memory", "bounds",
           "_number(nb) and nb <= now", "_number(nb) and nb < now", "memory/outbox/claim"),
    Mutant("claim-due-exact-instant-mongo", "bounds",
           '{"state": PENDING, "not_before": {"$lte": now}}',
           '{"state": PENDING, "not_before": {"$lt": now}}', "mongo/outbox/claim"),
    Mutant("reclaim-exact-instant-memory", "bounds",
           "_number(lease) and lease <= now:", "_number(lease) and lease < now:",
           "memory/outbox/claim"),
    Mutant("reclaim-exact-instant-mongo", "bounds",
           '{"state": CLAIMED, "lease_until": {"$lte": now}}',
           '{"state": CLAIMED, "lease_until": {"$lt": now}}', "mongo/outbox/claim"),
    Mutant("membership-exact-instant-memory", "bounds",
           "            elif exp > now:\n",
           "            elif exp >= now:\n", "memory/membership"),
    Mutant("membership-exact-instant-mongo", "bounds",
           "if isinstance(member_id, str) and exp is not None and exp > now:",
           "if isinstance(member_id, str) and exp is not None and exp >= now:", "mongo/membership"),
    Mutant("gap-young-at-exact-instant", "bounds",
           "if age < self.young_gap_seconds:", "if age <= self.young_gap_seconds:", "reading"),
    # the steal cut-off (F1, S1) is shared by both adapters' claims: model/fairness.stealable
    Mutant("steal-cut-off-exact-instant", "bounds",
           '_number(doc.get("created_at")) <= steal_before',
           '_number(doc.get("created_at")) < steal_before', "fairness"),
    Mutant("steal-cut-off-from-not-before", "bounds",
           '_number(doc.get("created_at")) <= steal_before',
           '_number(doc.get("not_before")) <= steal_before', "fairness"),
    Mutant("steal-cut-off-from-wrong-setting", "membership",
           "steal_before=None if prefer is None else now - s.steal_after_seconds,",
           "steal_before=None if prefer is None else now - s.reclaim_every_seconds,", "claiming"),
    # the preference (S1) is shared too: model/fairness.pick takes every row oldest due first
    Mutant("prefer-ignored-under-limit", "bounds",
           "    return (round_robin(mine, tenant, rank_of, mine_more)\n"
           "            + round_robin(theirs, tenant, rank_of, [d for d in more if others(d)]))[:limit]",
           "    return round_robin(sorted(mine + theirs, key=lambda d: _number(d.get(\"not_before\"))),\n"
           "                       tenant, rank_of, more)[:limit]", "fairness"),
    Mutant("int-times-not-claimable-memory", "bounds",
           "return isinstance(value, (int, float)) and not isinstance(value, bool)\n",
           "return isinstance(value, float)\n", "memory/outbox/rows"),
    Mutant("int-times-swept-as-broken", "bounds",
           "return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)",
           "return isinstance(value, float) and math.isfinite(value)", "validation"),
    Mutant("int-times-swept-as-broken-mongo", "bounds",
           'not_number = {"$not": {"$type": "number"}}', 'not_number = {"$not": {"$type": "double"}}',
           "mongo/outbox/sweep"),
    Mutant("batch-expired-lease-exact-instant", "bounds",
           "        if now >= c.lease_until:\n", "        if now > c.lease_until:\n", "batch"),
    Mutant("sweep-horizon-exact-instant", "bounds",
           "if lease > now + horizon:", "if lease >= now + horizon:", "row_documents"),
    Mutant("sweep-horizon-exact-instant-mongo", "bounds",
           '{"state": CLAIMED, "lease_until": {"$gt": now + horizon}}',
           '{"state": CLAIMED, "lease_until": {"$gte": now + horizon}}', "mongo/outbox/sweep"),
    Mutant("heartbeat-cap-off-by-a-window", "bounds",
           "cap = lease.started + self.max_execution_seconds",
           "cap = lease.started + self.max_execution_seconds + self.lease_seconds", "leases"),
    Mutant("heartbeat-cap-exact-instant", "bounds",
           "        if now >= cap:\n", "        if now > cap:\n", "leases"),
    # a batch's done rows are counted in the completer's flush: only the metrics, or only the hook
    Mutant("hook-on-done-not-called-batched", "bounds",
           "                self._count_done(x.row, x.label, x.done_at)\n",
           "                if self.metrics is not None:\n"
           "                    self.metrics.row_done(x.row, x.done_at)\n", "done_marks"),
    Mutant("hook-metrics-not-called-batched", "bounds",
           "                self._count_done(x.row, x.label, x.done_at)\n",
           "                if self.on_done is not None:\n"
           "                    self.on_done(x.row, x.label)\n", "done_marks"),
    Mutant("hook-prepare-not-called", "bounds",
           "out[kind] = await prepare.prepare(rows)", "continue", "executing"),
    Mutant("budget-check-skipped-in-batched-plan", "bounds",
           "                and row.attempts < max_attempts):",
           "                ):", "batch"),
    Mutant("token-save-throttle-off", "bounds",
           "not force and now - self.last_save < every):", "not force and False):", "resume"),
    Mutant("token-not-saved-at-shutdown", "bounds",
           "return await self.resume.save(force=True)", "return await self.resume.save()",
           "runtime"),
    Mutant("handoff-first-come-first-served", "bounds",
           "taken = round_robin(eligible, lambda x: x.claim.tenant_id)[:room]",
           "taken = eligible[:room]", "handoff"),
    # --- ownership (S1): the harness's early-steal invariant -------------------------------
    Mutant("membership-owns-every-tenant", "membership",
           "got = self._owned[tenant_id] = owner(self.members, tenant_id) == self.member_id",
           "got = self._owned[tenant_id] = True", "membership"),
    Mutant("membership-prefers-nothing", "membership",
           "            return None\n        return _Owned(self)",
           "            return None\n        return None", "membership"),
    Mutant("steal-ignores-materialization", "membership",
           'return steal_before is None or _number(doc.get("created_at")) <= steal_before',
           "return True", "fairness"),
    Mutant("steal-cut-off-never-set", "membership",
           "steal_before=None if prefer is None else now - s.steal_after_seconds,",
           "steal_before=None,", "claiming"),
    Mutant("readyz-poll-fresh-exact-instant", "bounds",
           "service.clock.now() - last <= fresh", "service.clock.now() - last < fresh", "checks"),
    Mutant("readyz-wake-check-inverted", "bounds",
           "if not (stream or polling):", "if stream or polling:", "checks"),
    Mutant("stall-exact-instant", "bounds",
           "if waited < self.stall_seconds:", "if waited <= self.stall_seconds:", "health"),
    # F2: concurrency and rate limits
    Mutant("limits-slot-expiry-exact-instant", "limits",
           "return until is None or until <= now", "return until is None or until < now",
           "service_documents"),
    Mutant("limits-defer-counts-attempt", "limits",
           'return Transition(name="defer", set=',
           'return Transition(name="defer", count_attempt=True, set=', "transitions"),
    Mutant("limits-in-flight-not-checked", "limits",
           "if n and not await self.store.acquire(", "if False and await self.store.acquire(",
           "engine/flow/limits"),
    Mutant("limits-slots-never-released", "limits",
           "            if held:\n                await self._release(held, holder)",
           "            if False:\n                await self._release(held, holder)",
           "engine/flow/limits"),
    Mutant("limits-mongo-rate-uncapped", "limits",
           '{"_id": cid, "n": {"$gte": 0, "$lt": allowed}}', '{"_id": cid}', "mongo/limits"),
    # --- issue 29 (T1): completion in bulk, the born-claimed hand-off, backpressure, bounded
    # hot queries
    Mutant("completion-cancelled-flush-drops-marks", "completion",
           "                    self._staged[:0] = batch", "                    pass", "done_marks"),
    Mutant("completion-rides-out-to-the-last-lease", "completion",
           "lambda: min(self.lease_until(x.claim) for x in batch),",
           "lambda: max(self.lease_until(x.claim) for x in batch),", "done_marks"),
    Mutant("completion-gives-up-at-the-first-outage", "completion",
           "if self.clock.now() + delay >= lease_until():", "if True:", "done_marks"),
    Mutant("completion-no-flush-timer", "completion",
           "tg.start_soon(self._flush_timer)", "pass", "worker"),
    Mutant("marks-trust-the-modified-count", "completion",
           "if modified == len(marks):", "if True:", "mongo/outbox/marks"),
    Mutant("handoff-claims-rows-it-did-not-insert", "completion",
           "for i, r in enumerate(rows) if i not in refused and claimed[i])",
           "for i, r in enumerate(rows) if claimed[i])",
           "mongo/outbox/claim"),
    Mutant("pressure-never-backs-off", "pressure",
           "self.factor = max(MIN_FACTOR, self.factor / 2)", "self.factor = self.factor",
           "pressure"),
    Mutant("pressure-never-recovers", "pressure",
           "self.factor = min(1.0, self.factor + GROW * clean / COOLDOWN_SECONDS)",
           "self.factor = self.factor", "pressure"),
    # recovery by passes, not by time: a replica whose pauses are stretched sits at its floor
    Mutant("pressure-recovers-per-pass", "pressure",
           "self.factor = min(1.0, self.factor + GROW * clean / COOLDOWN_SECONDS)",
           "self.factor = min(1.0, self.factor + GROW)", "pressure"),
    Mutant("pressure-stretch-unbounded", "pressure",
           "return max(seconds, min(seconds / self.factor, MAX_STRETCHED_SECONDS))",
           "return seconds / self.factor", "pressure"),
    # a slow pass at the floor still credits the time before it
    Mutant("pressure-credits-slow-time", "pressure",
           "self._last_trouble = now  # no recovery is credited for the time up to here",
           "pass", "pressure"),
    Mutant("tail-batch-ignores-pressure", "pressure",
           "return limit if self.pressure is None else self.pressure.scale(limit)",
           "return limit", "tail"),
    Mutant("worker-claim-ignores-pressure", "pressure",
           "return limit if self.pressure is None else self.pressure.scale(limit)",
           "return limit", "claiming"),
    Mutant("state-filter-leaves-its-index-key-unbounded", "queries",
           'PENDING: {"state": PENDING, "not_before": _ANY_NUMBER},', 'PENDING: {"state": PENDING},',
           "mongo/outbox/statements"),
    Mutant("audit-short-read-is-the-end", "queries",
           "exhausted = not passed or len(passed) < len(reading.passed)",
           "exhausted = not passed or reading.read < budget or len(passed) < len(reading.passed)",
           "audit"),
    Mutant("tail-window-not-more-behind", "queries",
           "return res.full and (res.read >= limit or res.cursor_after - res.cursor_before >= limit)",
           "return res.full and res.read >= limit", "tail"),
    Mutant("limits-ghost-slot-held", "limits",
           "return until is None or until <= now or slot_problem(doc, now) is not None",
           "return until is None or until <= now", "service_documents"),
    Mutant("limits-negative-counter-counts", "limits",
           '{"_id": cid, "n": {"$gte": 0, "$lt": allowed}}', '{"_id": cid, "n": {"$lt": allowed}}',
           "mongo/limits"),
    # issue 30/32: the console's sessions and origin checks, the operator port's guards, the
    # console's page cost
    Mutant("console-same-site-accepted", "console",
           'site not in ("same-origin", "none")', 'site not in ("same-origin", "same-site", "none")',
           "console/security"),
    Mutant("console-origin-suffix", "console",
           "    if theirs is not None and theirs == _origin(here):\n",
           "    if theirs is not None and theirs == _origin(here) or origin.endswith(\n"
           "            request.headers.get('host', '')):\n", "console/security"),
    Mutant("console-session-any-token", "console",
           "if found is not None and hmac.compare_digest(found.token_tag, self.tag):",
           "if found is not None:", "console/security"),
    Mutant("console-logout-keeps-session", "console",
           "            await self.store.close(_stored_id(sid))", "            pass",
           "console/security"),
    Mutant("console-login-unthrottled", "console",
           "        if wait > 0:  # refused", "        if False:  # refused", "console/app"),
    Mutant("console-token-whitespace-ok", "console",
           "bad = next((c for c in token if not c.isprintable() or c.isspace()), None)",
           "bad = next((c for c in token if not c.isprintable()), None)", "config_rules"),
    Mutant("http-read-timeout-unset", "console",
           "    config.read_timeout = READ_TIMEOUT", "    config.read_timeout = None", "http/server"),
    Mutant("http-head-limit-off", "console",
           'if scope["type"] == "http" and head_size(scope) > self.limit:',
           'if scope["type"] == "http" and head_size(scope) > 4 * self.limit:', "http/guards"),
    Mutant("http-any-host", "console",
           "return name in self.names or (self.any_ip and _is_ip(name))",
           "return bool(name)", "http/guards"),
    Mutant("status-page-least-behind-first", "console",
           '{"$sort": {"lag": -1, "f": -1, "_id": 1}}', '{"$sort": {"lag": 1, "f": -1, "_id": 1}}',
           "mongo/status"),
    Mutant("next-events-budget-ignored", "console",
           "cut = len(todo) if self.budget is None else self.budget", "cut = len(todo)", "health"),
    Mutant("next-events-stale-cursor-trusted", "console",
           "if seen is not None and seen[0] == cursor:", "if seen is not None:", "health"),
    Mutant("console-overview-every-tenant", "console",
           "look = await self.status.attention(0, VIEW_PAGES * self.page_size)",
           "look = await self.status.attention(0, 10**9)", "console/attention"),
    # --- issue 32: the held-out kinds -- times as stored, parsing, audit, rebuild, ops ------
    # every rule that reads a time, with int/Int64/float at the boundary instant
    Mutant("steal-int-created-at-read-as-zero", "bounds",
           "return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0",
           "return float(value) if isinstance(value, float) else 0.0", "fairness"),
    Mutant("membership-trust-exact-timeout", "bounds",
           "if max_ahead is not None and expires_at > now + max_ahead:",
           "if max_ahead is not None and expires_at >= now + max_ahead:", "service_documents"),
    Mutant("cursor-one-ahead-not-held", "bounds",
           "elif head is not None and cur > head:", "elif head is not None and cur > head + 1:",
           "tenants"),
    # per-document parsing and the bad-document listing
    Mutant("parse-float-seq-accepted", "parse",
           "        if isinstance(t, str) and isinstance(seq, int) and is_seq(seq):",
           "        if isinstance(t, str) and isinstance(seq, (int, float)):", "service_documents"),
    Mutant("parse-fixed-seq-still-listed", "parse",
           "            BAD_DOCUMENTS.resolved(collection, t)", "            pass", "service_documents"),
    Mutant("parse-fixed-lease-still-listed", "parse",
           "            BAD_DOCUMENTS.resolved(MEMBERS, m.member_id)", "            pass",
           "membership"),
    Mutant("parse-binary-token-refused", "parse",
           "if not isinstance(data, (str, bytes)) or not data:",
           "if not isinstance(data, str) or not data:", "service_documents"),
    Mutant("parse-trace-id-lax", "parse",
           "return _keep(traceparent, ctx if ctx.is_valid else None)",
           "return _keep(traceparent, ctx)", "propagation"),
    # the four that died only in unrelated tests
    Mutant("resume-cleared-by-positionless-change", "ops",
           "        if token is not None:\n            self.token = token",
           "        self.token = token", "resume"),
    Mutant("limits-release-unshielded", "limits",
           "with anyio.move_on_after(RELEASE_SECONDS, shield=True):",
           "with anyio.move_on_after(RELEASE_SECONDS):", "engine/flow/limits"),
    Mutant("limits-bot-key-without-tenant", "limits",
           'return f"bot:{tenant_id}/{bot}"', 'return f"bot:{bot}"', "model/limits"),
    Mutant("accept-errors-reported-every-time", "ops",
           '            state["reported"], state["missed"] = now, 0',
           '            state["missed"] = 0', "http/server"),
    Mutant("accept-errors-count-never-reset", "ops",
           '            state["reported"], state["missed"] = now, 0',
           '            state["reported"] = now', "http/server"),
    # the audit
    Mutant("audit-reads-past-the-cursor", "audit",
           "passed = [(seq, snap) for seq, snap in reading.passed if seq <= cursor]",
           "passed = list(reading.passed)", "audit"),
    Mutant("audit-event-without-at-is-young", "audit",
           'age = now - at[row.seq] if at[row.seq] > 0 else float("inf")',
           "age = now - at[row.seq] if at[row.seq] > 0 else 0.0", "audit"),
    Mutant("audit-repairs-presumed-expired-rows", "audit",
           "            if age >= self.retention_seconds:\n                rep.presumed_expired += 1\n"
           "                continue\n            missing.append(row)",
           "            missing.append(row)\n            if age >= self.retention_seconds:\n"
           "                rep.presumed_expired += 1\n                continue", "audit"),
    Mutant("audit-repair-gives-up-on-a-slow-write", "audit",
           "            if len(rows) > 1:\n                half = len(rows) // 2",
           "            if False:\n                half = len(rows) // 2", "audit"),
    # rebuilds
    Mutant("swap-if-unchanged-sees-only-changes", "rebuild",
           "        return self.added == self.removed == self.changed == 0",
           "        return self.changed == 0", "shadow"),
    Mutant("generations-forget-is-a-no-op", "rebuild",
           '        """Drop the cached pointers: the next read loads them all again."""\n'
           "        self._loaded_at = None",
           '        """Drop the cached pointers: the next read loads them all again."""',
           "generations"),
    Mutant("rebuild-failed-projection-left-building", "rebuild",
           "            dropped = await drop_shadow(name=name, tenant_id=tenant_id, readmodels=readmodels,\n"
           "                                        sleep=sleep)",
           "            dropped = None", "shadow"),
    Mutant("cursor-reset-creates-ghosts", "ops",
           "and args.tenant not in await all_tenants(stores):", "and False:", "cursor"),
    # bulk replay (issue 33 item 5): a row parked again since it was read is replayed twice; a
    # page over rows parked at one instant skips the rest of them; the rate is not honoured
    Mutant("bulk-replay-unfenced-memory", "ops",
           "        if updated_at is not None and not (_number(was := self._docs[ref].get(",
           "        if False and not (_number(was := self._docs[ref].get(", "memory/outbox/marks"),
    Mutant("bulk-replay-page-skips-ties-mongo", "ops",
           '{"updated_at": at, "row_key": {"$gt": key}}', '{"updated_at": {"$gt": at}}',
           "mongo/outbox"),
    # A8: the cancel's and the rerun's fenced write on the row as read, and the rerun's two
    # writes in their order (the new row first: a kill between them leaves a row whose retry
    # writes the same key, never a note naming a rerun that was never written)
    Mutant("unclaimed-write-ignores-updated-at-mongo", "ops",
           '        res = await self.coll.update_one({"row_key": row_key, "state": state,\n'
           '                                          "updated_at": updated_at}, update_of(t))',
           '        res = await self.coll.update_one({"row_key": row_key, "state": state},\n'
           '                                         update_of(t))', "mongo/outbox"),
    Mutant("rerun-notes-before-its-new-row", "ops",
           "        await outbox.upsert_rows([new])\n"
           "        # the note must move ``updated_at`` (the fence of every other apply), even on a clock\n"
           "        # that has not moved since the row was done\n"
           "        noted = max(now, math.nextafter(row.updated_at, math.inf))\n"
           "        t = T.rerun_noted(now=noted, by=by, rerun_key=new.row_key, detail=detail)\n"
           "        return await outbox.apply_unclaimed(row.row_key, t, state=DONE,\n"
           "                                            updated_at=row.updated_at)",
           "        noted = max(now, math.nextafter(row.updated_at, math.inf))\n"
           "        t = T.rerun_noted(now=noted, by=by, rerun_key=new.row_key, detail=detail)\n"
           "        moved = await outbox.apply_unclaimed(row.row_key, t, state=DONE,\n"
           "                                             updated_at=row.updated_at)\n"
           "        await outbox.upsert_rows([new])\n"
           "        return moved", "bulk_actions"),
    # a rerun takes the done rows re-run already: the same command repeated after a kill
    # midway re-runs the killed apply's rows again (``/rerun/2``) and its new rows
    Mutant("rerun-retakes-rows-rerun-already", "ops",
           "    if flt.state == DONE and not flt.include_rerun and already_rerun(row):\n"
           "        return False\n",
           "", "dead_letters"),
    Mutant("bulk-replay-unpaced", "ops",
           "return 0.0 if self.next_at is None else", "return 0.0 if True else", "bulk_replay"),
    # --- issue 32: this round's code -- pause, coalescing, priority, explain, lanes, the stream
    # buffer, the subscription cache ---------------------------------------------------------
    # pause: the lift releases only the rows of pauses no longer on, twice (a late hold); the
    # pause set is read once per heartbeat, from the exact instant; a pause holds its own scope
    # only; a held row keeps its own due time
    Mutant("pause-release-ignores-pauses-still-on", "pause",
           "if isinstance(why, str) and why not in keep:",
           "if isinstance(why, str):", "mongo/outbox/marks"),
    Mutant("pause-lift-released-on-one-read-only", "pause",
           "RELEASE_PASSES = 2", "RELEASE_PASSES = 1", "engine/flow/pause"),
    Mutant("pause-read-late-at-the-heartbeat-instant", "pause",
           "if not force and now < self._next_read:", "if not force and now <= self._next_read:",
           "engine/flow/pause"),
    Mutant("pause-scope-ignored", "pause",
           "frozenset(p.key for p in on.values() if p.scope == scope)",
           "frozenset(p.key for p in on.values())", "engine/flow/pause"),
    Mutant("pause-held-row-loses-its-own-time", "pause",
           "not_before = held_not_before(row.not_before) if paused else",
           "not_before = held_not_before(now) if paused else", "completer"),
    # coalescing: the burst closes at its deadline's exact instant; the carry is fenced on the
    # newer row still pending; a burst is one subscription's; coalesced rows expire like done ones
    Mutant("coalesce-deadline-instant-not-closed", "coalesce",
           "close = now >= deadline", "close = now > deadline", "coalesce"),
    Mutant("coalesce-carry-onto-a-claimed-row-memory", "coalesce",
           '        if doc is None or doc.get("state") != PENDING:\n            return False\n'
           '        doc["burst_at"]',
           '        if doc is None:\n            return False\n        doc["burst_at"]',
           "memory/outbox/bursts"),
    Mutant("coalesce-carry-onto-a-claimed-row-mongo", "coalesce",
           'await self.coll.update_one({"row_key": row_key, "state": PENDING}, update)',
           'await self.coll.update_one({"row_key": row_key}, update)', "mongo/outbox/bursts"),
    Mutant("coalesce-burst-spans-subscriptions-mongo", "coalesce",
           '        return {"tenant_id": tenant_id, "sub_id": sub_id, "event.card_id": card_id,',
           '        return {"tenant_id": tenant_id, "event.card_id": card_id,', "mongo/outbox/bursts"),
    Mutant("coalesced-rows-never-expire", "coalesce",
           "        if seconds:\n            out[name] = IndexModel(",
           "        if seconds and state != COALESCED:\n            out[name] = IndexModel(",
           "schema"),
    # priority: highest first within a tenant; the stored range inclusive; the pick's third
    # query takes only due rows; a tick's merged claims are ordered by priority
    Mutant("priority-lowest-first", "priority",
           "pool.sort(key=lambda r: -(rank_of(r) or 0))  # stable",
           "pool.sort(key=lambda r: rank_of(r) or 0)  # stable", "fairness"),
    Mutant("priority-range-exclusive", "priority",
           "MIN_PRIORITY <= value <= MAX_PRIORITY):", "MIN_PRIORITY < value < MAX_PRIORITY):",
           "fairness"),
    Mutant("priority-pick-takes-rows-not-due", "priority",
           'urgent = {**due, "priority": {"$gt": 0}}',
           'urgent = {"state": PENDING, "priority": {"$gt": 0}}', "mongo/outbox/claim"),
    Mutant("priority-tick-not-reordered", "priority",
           "claims = by_priority(claims)  # each tenant's", "claims = claims  # each tenant's",
           "claiming"),
    # explain: a lease is live until its exact end, a row due from its exact not_before (as the
    # reclaim and the claim read them); the turn counts only the tenant's rows, strictly ahead
    Mutant("explain-lease-live-at-its-end", "explain",
           "if r.lease_until is not None and r.lease_until > c.now:",
           "if r.lease_until is not None and r.lease_until >= c.now:", "holds"),
    Mutant("explain-backs-off-at-its-due-instant", "explain",
           "if r.state != PENDING or r.not_before <= c.now or r.waiting:",
           "if r.state != PENDING or r.not_before < c.now or r.waiting:", "holds"),
    Mutant("explain-turn-counts-other-tenants-memory", "explain",
           'if (d.get("state") == PENDING and d.get("tenant_id") == tenant_id and nb is not None',
           'if (d.get("state") == PENDING and nb is not None', "memory/outbox/gauges"),
    Mutant("explain-turn-counts-itself-mongo", "explain",
           '{"not_before": not_before, "seq": {"$lt": seq}}]},',
           '{"not_before": not_before, "seq": {"$lte": seq}}]},', "mongo/outbox/gauges"),
    # R7: every stored time in one checked range, one guarded formatter, a due time beyond any
    # writer's swept; explain names a pause and follows a coalescing chain to the row that ran
    Mutant("r7-stamp-unbounded-above", "r7",
           "Stamp = Annotated[float, msgspec.Meta(ge=TIME_MIN, le=TIME_MAX)]",
           "Stamp = Annotated[float, msgspec.Meta(ge=TIME_MIN)]", "times"),
    Mutant("r7-stamp-takes-any-number", "r7",
           "    return t if TIME_MIN <= t <= TIME_MAX else None", "    return t", "times"),
    Mutant("r7-formatter-unguarded", "r7",
           '    if s is None:\n        return f"out of range: {_shown(t)}"',
           '    if s is None:\n        s = float(t)  # type: ignore[arg-type]', "times"),
    Mutant("r7-event-time-kept", "r7",
           "        if not TIME_MIN <= self.at <= TIME_MAX:  # NaN too",
           "        if False:  # NaN too", "board"),
    Mutant("r7-far-due-not-swept-memory", "r7",
           "        if due > due_limit(now):  # R7: no writer of ours sets one so far ahead",
           "        if False:  # R7: no writer of ours sets one so far ahead", "row_documents"),
    Mutant("r7-far-due-not-swept-mongo", "r7",
           '            ({"state": PENDING, "not_before": {"$gt": due_limit(now)}}, "pending_not_before"),\n',
           "", "mongo/outbox/sweep"),
    Mutant("explain-pause-not-named", "explain",
           "    paused,  # before the limits: a paused row tries none\n", "", "holds"),
    Mutant("explain-chain-not-followed", "explain",
           "        if row.state != COALESCED or row.coalesced_into is None:\n"
           "            return chain, row, None",
           "        if True:\n            return chain, row, None", "holds"),
    Mutant("explain-chain-loop-followed", "explain",
           "        if key in seen:", "        if False:", "holds"),
    # lanes: one lane per tenant, at most ``concurrency`` at once, nothing started after a
    # failure, ``[worker] concurrency`` honoured
    Mutant("lanes-one-per-row", "lanes",
           "pool = LanePool[Job](tg, lambda job: lane(job.claims), self._run_job,",
           "pool = LanePool[Job](tg, lambda job: job.claims[0].ref, self._run_job,", "running"),
    Mutant("lanes-start-after-a-failure", "lanes",
           "if not q or self.error is not None or self._stopping():",
           "if not q or self._stopping():", "lanes"),
    Mutant("lanes-unbounded", "lanes",
           "limiter = anyio.CapacityLimiter(max(1, concurrency))",
           "limiter = anyio.CapacityLimiter(10**6)", "lanes"),
    Mutant("lanes-concurrency-setting-ignored", "lanes",
           "concurrency=self.settings.concurrency,", "concurrency=8,", "running"),
    # lanes outlive the batch: the worker loop keeps them open; the rows in them are bounded, a
    # tenant's lane takes a claim's worth of its handed rows, one heartbeat beats the queued rows
    Mutant("lanes-close-with-the-batch", "lanes",
           "async with self.worker.lanes(self.stats.worker.add):",
           "async with anyio.create_task_group():", "hotloops"),
    Mutant("lanes-rows-unbounded", "lanes",
           "return 2 * self.claim_limit()", "return 10**6", "running"),
    Mutant("lanes-tenant-takes-every-handed-row", "lanes",
           "return max(1, self.claim_limit()) - self.held(tenant_id)", "return 10**6", "running"),
    Mutant("lanes-queued-rows-not-beaten", "lanes",
           "            self.inflight.setdefault(c.ref, Lease(c, now))\n", "", "running"),
    # the stream buffer: trusted only after a read that began with this very buffer; cleared on
    # (re)open; forgotten on ownership loss; bounded
    Mutant("stream-trust-from-an-older-buffer", "stream",
           "        if self._gen.get(tenant_id) == gen:\n            self._trusted.add(tenant_id)",
           "        if tenant_id in self._gen:\n            self._trusted.add(tenant_id)",
           "prefetch"),
    Mutant("stream-clear-keeps-trust", "stream",
           "        self._gen.clear()\n        self._trusted.clear()\n        self._count = 0",
           "        self._gen.clear()\n        self._count = 0", "prefetch"),
    Mutant("stream-reopen-keeps-the-buffer", "stream",
           "                                    self.tail.streamed.clear()",
           "                                    pass", "waker"),
    Mutant("stream-owner-loss-not-forgotten", "stream",
           "                streamed.forget(change.tenant_id)  # not ours now",
           "                pass  # not ours now", "waker"),
    Mutant("stream-per-tenant-bound-off-by-one", "stream",
           "if len(docs) >= self.per_tenant:", "if len(docs) > self.per_tenant:", "prefetch"),
    # the subscription cache: a read overtaken by a change is not kept; served only while open;
    # our own writes empty it; bounded
    Mutant("subcache-epoch-taken-after-the-read", "subcache",
           "        epoch = self._epoch\n        self.reads += 1\n"
           "        subs = await self.store.list_for_tenant(tenant_id)\n",
           "        self.reads += 1\n        subs = await self.store.list_for_tenant(tenant_id)\n"
           "        epoch = self._epoch\n", "subcache"),
    Mutant("subcache-closed-still-live", "subcache",
           "    def closed(self) -> None:\n        self.live = False\n",
           "    def closed(self) -> None:\n", "subcache"),
    Mutant("subcache-own-put-kept", "subcache",
           "        await self.store.put(sub)\n        self._reset()",
           "        await self.store.put(sub)", "subcache"),
    Mutant("subcache-unbounded", "subcache",
           "            if len(self._tenants) >= self.max_tenants:\n                self._reset()\n",
           "", "subcache"),
    # --- issue 32: fair claims ----------------------------------------------------------------
    # the held-out survivors: the Mongo pick's window not widened under a preference (owned
    # rows behind others' fresh rows unseen), the twin's tenants in first-insertion order, the
    # hand-off's backlog pick dropped (a full pick no longer brings the next one forward)
    Mutant("fair-mongo-pick-window-not-widened", "fair",
           "window = limit if prefer is None else limit * 2", "window = limit", "mongo/outbox/claim"),
    Mutant("fair-memory-tenants-by-first-insertion", "fair",
           "        candidates.sort(key=lambda c: c[0])  # tenants by their oldest claimable row\n",
           "", "memory/outbox/claim"),
    Mutant("fair-handoff-drops-the-backlog-pick", "fair",
           "if self._pick_full or (not self._handing and not stream_open):",
           "if not self._handing and not stream_open:", "handoff"),
    # while the change stream is open the idle pick is the net: it must still run at the due
    # time of a retry this worker wrote, and must not run on the old schedule
    Mutant("net-pick-misses-due-retries", "fair",
           "if self._due and self._due[0] <= now:", "if False:", "handoff"),
    Mutant("net-pick-ignores-the-open-stream", "fair",
           "return now >= (self._next_net if stream_open else self._next_pick)",
           "return now >= self._next_pick", "handoff"),
    # more of the kind: stolen rows before owned ones; tenants by name, not by oldest row; the
    # twin's tenants by their oldest high-priority row; the Mongo pick in the server's order
    # (mongomock: as stored); a hand-off whose backlog pick never stops, or gets no room
    Mutant("fair-stolen-before-owned", "fair",
           "    return (round_robin(mine, tenant, rank_of, mine_more)\n"
           "            + round_robin(theirs, tenant, rank_of, [d for d in more if others(d)]))[:limit]",
           "    return (round_robin(theirs, tenant, rank_of, [d for d in more if others(d)])\n"
           "            + round_robin(mine, tenant, rank_of, more))[:limit]", "fairness"),
    Mutant("fair-tenants-by-name", "fair",
           "    return _turns(queues.values()) + _turns(left.values())",
           "    return (_turns(q for _, q in sorted(queues.items(), key=lambda kv: str(kv[0])))\n"
           "            + _turns(left.values()))", "fairness"),
    Mutant("fair-memory-tenants-by-oldest-candidate", "fair",
           "candidates.append(((places[0][0], places[0][1]),",
           "candidates.append((min((d[0], d[1]) for d in top or places),", "memory/outbox/claim"),
    # priority never crosses tenants: a projection row keeps its place; the Mongo pick's third
    # query only competes for the places its tenant's rows hold; the hand-off keeps the places
    # a take ranked (so the kinds of the places left are as at priority 0)
    Mutant("priority-projection-rows-ranked", "priority",
           "return None if doc.get(\"kind\") == PROJECTION else priority_of(doc)",
           "return priority_of(doc)", "fairness"),
    Mutant("priority-pick-extra-rows-hold-places-mongo", "priority",
           "picked = fairness.pick(picked, limit, prefer=prefer, steal_before=steal_before,\n"
           "                               extra=extra)",
           "picked = fairness.pick(sorted(picked + extra, key=_due), limit, prefer=prefer,\n"
           "                               steal_before=steal_before)", "mongo/outbox/claim"),
    Mutant("priority-handoff-places-not-kept", "priority",
           "        self._queued = {x.claim.ref: x for x in order}\n", "", "handoff"),
    Mutant("fair-mongo-pick-in-server-order", "fair",
           "        picked.sort(key=_due)\n", "", "mongo/outbox/claim"),
    Mutant("fair-handoff-backlog-pick-never-stops", "fair",
           "self._pick_full = full", "self._pick_full = self._pick_full or full", "handoff"),
    Mutant("fair-handoff-crowds-out-the-pick", "fair",
           "claims += self._handoff.take(max(1, limit - limit // 2) if pick else limit, tenants,",
           "claims += self._handoff.take(limit, tenants,", "claiming"),
    # --- issue 32: the slot lifetime (harness) ---
    Mutant("limits-mongo-renew-unfenced", "limits",
           '            {"key": key, "holder": holder},\n            {"$set": {"until": until',
           '            {"key": key},\n            {"$set": {"until": until', "mongo/limits"),
    Mutant("limits-memory-renew-unfenced", "limits",
           'if d.get("key") == key and d.get("holder") == holder]', 'if d.get("key") == key]',
           "memory/limits"),
    Mutant("limits-riders-never-ride", "limits",
           "for ride in list(lease.riders):", "for ride in []:", "engine/flow/leases"),
    Mutant("limits-bound-not-renewed", "limits",
           "slots.scope.deadline = anyio.current_time() + until - clock.now()", "pass",
           "engine/flow/limits"),
    Mutant("limits-takeover-not-cut", "limits",
           'slots.cut(f"the in-flight slot of {key} was taken over by another holder")', "pass",
           "engine/flow/limits"),
    # O8, O10, P6: the TTL follows the retention; no backend is assumed; writes are fenced
    Mutant("retention-ttl-never-changed", "adopt",
           '        if have.get("expireAfterSeconds") != seconds:', "        if False:", "schema"),
    Mutant("retention-audit-ignores-it", "adopt",
           "Auditor(tail, retention_seconds=cfg.retention.horizon(),",
           "Auditor(tail,", "commands/audit"),
    Mutant("backend-memory-by-default", "adopt",
           "    if cfg.store.backend is None:\n        raise ConfigError(NO_BACKEND)\n"
           "    return cfg.store.backend",
           '    return cfg.store.backend or "memory"', "service/config"),
    Mutant("subscription-update-unfenced", "adopt",
           "if sub.sub_id not in self._subs or self._rev.get(sub.sub_id, 0) != rev:",
           "if sub.sub_id not in self._subs:", "memory/subscriptions"),
    # a latest seed at the tenant's highest seq when first seen, not its highest by the epoch:
    # a tenant born while the service runs (or while it is down) loses its first events
    Mutant("seed-ignores-the-epoch", "tail+",
           "seed = await self.events.seq_before(tenant_id, await self.begin())",
           "seed = await self.events.max_inserted_seq(tenant_id)", "tenants"),
    Mutant("subscription-written-unchecked", "adopt",
           "    problem = subscription_problem(sub) or key_problem(\"bot\", sub.bot)",
           "    problem = None", "subscribing"),
    # --- the fifth round: bulk done marks under cancellation and shutdown, one broken row in a
    # bulk write, the read back after a short bulk write, outages longer than the original
    # lease, the edges, the audit's repair -------------------------------------------------
    # cancellation and shutdown: a flush cut off with nothing else staged keeps its marks; the
    # closing flush is shielded; a cancelled batch gives back only rows whose mark is not staged
    Mutant("flush-cancelled-alone-drops-marks", "marks",
           "                if self._staged is not None:\n                    self._staged[:0] = batch",
           "                if self._staged:\n                    self._staged[:0] = batch", "done_marks"),
    Mutant("closing-flush-unshielded", "marks",
           "            with anyio.CancelScope(shield=True):\n                await self.flush()",
           "            with anyio.CancelScope():\n                await self.flush()", "done_marks"),
    Mutant("cancelled-batch-gives-back-staged-rows", "marks",
           "            run.tally.released += await self.completer.release(self._unstaged(back))",
           "            run.tally.released += await self.completer.release(back)", "running"),
    Mutant("release-unshielded", "marks",
           "        with anyio.CancelScope(shield=True):\n            for claim in claims:",
           "        with anyio.CancelScope():\n            for claim in claims:", "completer"),
    # one broken row in a bulk write: each mark alone, only the broken one parked
    Mutant("bulk-refusal-parks-every-row", "marks",
           "            alone = [(x.claim, await self._mark_alone(x, m))"
           " for x, m in zip(batch, marks, strict=True)]",
           "            alone = [(x.claim, await self.park_broken(x.claim.ref, x.claim.claim_id, 'refused',"
           " _ctx(x.row))) for x in batch]", "done_marks"),
    Mutant("bulk-refusal-records-nothing", "marks",
           "            alone = [(x.claim, await self._mark_alone(x, m))"
           " for x, m in zip(batch, marks, strict=True)]",
           "            alone = [(x.claim, 'unrecorded') for x in batch]", "done_marks"),
    Mutant("broken-mark-never-parked", "marks",
           "        except StoreUnavailable as exc:\n            log.error(\"effect done but not recorded",
           "        except StoreError as exc:\n            log.error(\"effect done but not recorded",
           "done_marks"),
    Mutant("gathered-refusal-fails-every-tenant", "marks",
           "        if len(writes) == 1:\n            writes[0].error = exc\n            return\n",
           "        for w in writes:\n            w.error = exc\n        return\n", "gathered"),
    Mutant("reclaim-broken-row-blames-the-first-mongo", "marks",
           'raise BrokenRow(d["_id"], f"reclaim: {cap(problem, 500)}")',
           'raise BrokenRow(found[0]["_id"], f"reclaim: {cap(problem, 500)}")', "mongo/outbox/claim"),
    Mutant("reclaim-writes-before-checking-memory", "marks",
           "        for ref in expired:\n            problem = (T.refusal(self._docs[ref], probe)\n"
           "                       or T.refusal(self._docs[ref], T.lease_expired(attempt=0, now=now)))\n"
           "            if problem is not None:\n"
           '                raise BrokenRow(ref, f"reclaim: {problem}")\n',
           "", "memory/outbox/claim"),
    # the read back after a short bulk write: a row counts as ours only in the state we wrote,
    # under our claim
    Mutant("marks-read-back-ignores-state-mongo", "marks",
           'moved = {d["_id"] for d in docs if want.get(d["_id"]) == (d.get("claim_id"), d.get("state"))}',
           'moved = {d["_id"] for d in docs if want.get(d["_id"], ("",))[0] == d.get("claim_id")}',
           "mongo/outbox/marks"),
    Mutant("marks-read-back-ignores-state-memory", "marks",
           'if was is not None and was.get("claim_id") == m.claim_id and \\\n'
           '                        was.get("state") == m.t.set.get("state", CLAIMED):',
           'if was is not None and was.get("claim_id") == m.claim_id:', "memory/outbox/marks"),
    Mutant("claim-trusts-the-modified-count-mongo", "marks",
           "            if modified == len(ids):\n                # no race lost",
           "            if True:\n                # no race lost", "mongo/outbox/claim"),
    Mutant("claim-read-back-takes-others-rows-mongo", "marks",
           "            else:\n"
           '                docs = [d for d in await self.read_ids(ids) if d.get("claim_id") == claim_id]',
           "            else:\n                docs = await self.read_ids(ids)", "mongo/outbox/claim"),
    Mutant("reclaim-read-back-takes-others-rows-mongo", "marks",
           '        docs = [d for d in await self.read_ids(ids) if d.get("claim_id") == claim_id]\n'
           "        if not docs:\n            return []\n        whys",
           "        docs = await self.read_ids(ids)\n"
           "        if not docs:\n            return []\n        whys",
           "mongo/outbox/claim"),
    Mutant("adopt-takes-another-claims-rows-mongo", "marks",
           'if d.get("state") == CLAIMED and d.get("claim_id") in ours and until is not None:',
           'if d.get("state") == CLAIMED and until is not None:', "mongo/outbox/claim"),
    Mutant("adopt-takes-another-claims-rows-memory", "marks",
           'if (held.get("state") == CLAIMED and held.get("claim_id") in ours',
           'if (held.get("state") == CLAIMED and claim is not None', "memory/outbox/claim"),
    Mutant("adopt-forgets-earlier-terms", "marks",
           "adopt=tuple(cid for cid, _ in self._minted))", "adopt=())", "handoff"),
    # outages longer than the original lease: the flush rides out to the lease as the heartbeat
    # extended it; a staged row keeps its heartbeat until its flush; the hand-off's beat window
    # is two beats; riders stop with their lease; a lost queued lease is never run
    Mutant("flush-gives-up-at-the-original-lease", "leases",
           "lambda: min(self.lease_until(x.claim) for x in batch),",
           "lambda: min(x.claim.lease_until for x in batch),", "done_marks"),
    Mutant("staged-row-leaves-the-heartbeat", "leases",
           '            if outcome != "staged":  # a staged row stays in flight until its flush',
           "            if True:  # a staged row stays in flight until its flush", "executing"),
    Mutant("staged-unit-leaves-the-heartbeat", "leases",
           "                if not self.completer.staged(c.ref):  # a staged row stays until its flush",
           "                if True:  # a staged row stays until its flush", "executing"),
    Mutant("settled-rows-keep-their-leases", "leases",
           "        for ref in refs:\n            self.inflight.pop(ref, None)",
           "        for ref in refs:\n            pass", "leases"),
    Mutant("handoff-beat-window-one-beat", "leases",
           "horizon = now + 2 * self.lease_seconds * max(self.heartbeat_fraction, 0.1)",
           "horizon = now + 1 * self.lease_seconds * max(self.heartbeat_fraction, 0.1)", "handoff"),
    Mutant("heartbeat-skips-handed-rows", "leases",
           "            await self.extend_many(list(self.inflight.values()) +\n"
           "                                   self._handoff.due(self.clock.now()))",
           "            await self.extend_many(list(self.inflight.values()))", "running"),
    Mutant("riders-ride-a-lost-lease", "leases",
           "        for lease in leases:\n            if not lease.stopped:\n"
           "                for ride in list(lease.riders):",
           "        for lease in leases:\n            if True:\n"
           "                for ride in list(lease.riders):", "leases"),
    Mutant("beat-extends-farthest-leases-first", "leases",
           "order = sorted(groups.items(), key=lambda kv: min(x.until for x in kv[1]))",
           "order = sorted(groups.items(), key=lambda kv: -min(x.until for x in kv[1]))", "leases"),
    Mutant("handoff-runs-a-lost-lease", "leases",
           "        self.dequeue([x for x in self._queued.values() if x.stopped])  # lost while waiting\n",
           "", "handoff"),
    # the edges
    Mutant("handoff-room-ignores-the-queue", "edges",
           "return max(self.batch_size, capacity - running - len(self._queued))",
           "return max(self.batch_size, capacity - running)", "handoff"),
    Mutant("insert-error-taken-for-a-duplicate-mongo", "edges",
           'if any(e.get("code") != DUPLICATE_KEY for e in errors) or details.get("writeConcernErrors"):',
           'if details.get("writeConcernErrors"):', "mongo/outbox/claim"),
    Mutant("stream-trust-from-a-full-read", "edges",
           "if gen is not None and buffer is not None and not res.stopped and not self.more_behind(res):",
           "if gen is not None and buffer is not None and not res.stopped:", "tail"),
    Mutant("lanes-last-error-wins", "edges",
           "                        if self.error is None:\n                            self.error = exc",
           "                        self.error = exc", "lanes"),
    Mutant("pause-release-failure-waits-for-the-sweep", "edges",
           "            self._release_passes = max(self._release_passes, 1)", "            pass",
           "engine/flow/pause"),
    Mutant("coalesce-into-a-running-row", "edges",
           "        if covered.state == CLAIMED:\n            raise CoalesceHold",
           "        if False:\n            raise CoalesceHold", "coalesce"),
    Mutant("priority-sorted-across-tenants", "edges",
           "    return [queues[tenant_of(item)].pop() for item in items]",
           "    return sorted(items, key=lambda r: -priority_of(r))", "fairness"),
    Mutant("bulk-replay-catches-up-after-a-slow-page", "edges",
           "self.next_at = max(now, self.next_at or now) + self.gap",
           "self.next_at = (self.next_at or now) + self.gap", "bulk_replay"),
    Mutant("bulk-replay-past-the-plan", "edges",
           "if taken >= quota or stop.requested:", "if stop.requested:", "bulk_replay"),
    # a cancel with include_expired takes a claimed row whatever its lease: a live holder's row
    # is cancelled under it
    Mutant("cancel-expired-ignores-the-lease", "edges",
           "return row.state == CLAIMED and row.lease_until is not None and row.lease_until <= at",
           "return row.state == CLAIMED", "dead_letters"),
    # the audit's repair writes only the rows found missing (an expired row stays expired)
    Mutant("audit-repair-rewrites-every-owed-row", "audit",
           "            rep.repaired += await self._repair(tenant_id, [s for s in snaps\n"
           "                                                           "
           "if s.seq in {r.seq for r in missing}],\n"
           "                                               {r.row_key for r in missing}, now)",
           "            rep.repaired += await self._repair(tenant_id, snaps, {r.row_key for r in owed}, now)",
           "audit"),
)

# The test expected to catch a mutant, for those the committed results table does not name yet
# (added since its run): run alone first, as ``--catchers`` does with the table's.
CATCHERS: dict[str, str] = {
    "unclaimed-write-ignores-updated-at-mongo":
        "tests/contract/test_bulk_cancel.py::test_rerun_writes_one_new_row_per_done_row_with_a_new_key[mongomock]",
    "lanes-close-with-the-batch":
        "tests/test_lanes.py::test_a_slow_tenant_holds_only_its_own_lane_while_new_rows_of_others_arrive",
    "lanes-rows-unbounded":
        "tests/test_lanes.py::test_open_lanes_hold_at_most_two_claims_and_a_slow_tenant_a_claims_worth",
    "lanes-tenant-takes-every-handed-row":
        "tests/test_lanes.py::test_open_lanes_hold_at_most_two_claims_and_a_slow_tenant_a_claims_worth",
    "lanes-queued-rows-not-beaten":
        "tests/contract/test_heartbeat.py::test_a_row_queued_behind_a_slow_one_in_open_lanes_keeps_its_lease[memory]",
    "priority-projection-rows-ranked":
        "tests/contract/test_priority.py::test_priorities_give_no_tenant_more_turns_for_its_launches[memory]",
    "priority-pick-extra-rows-hold-places-mongo":
        "tests/contract/test_priority.py::test_fair_share_across_tenants_holds_whatever_the_priorities[mongomock]",
    "priority-handoff-places-not-kept":
        "tests/contract/test_priority.py::test_fair_share_across_tenants_holds_whatever_the_priorities[memory]",
    "seed-ignores-the-epoch":
        "tests/contract/test_seed.py::test_a_tenant_born_while_the_service_runs_has_its_first_event_launched",
    "net-pick-misses-due-retries":
        "tests/contract/test_handoff.py::test_with_the_stream_open_the_idle_pick_is_the_net_and_its_own_retries_run_when_due",
    "net-pick-ignores-the-open-stream":
        "tests/contract/test_handoff.py::test_with_the_stream_open_the_idle_pick_is_the_net_and_its_own_retries_run_when_due",
    "pressure-recovers-per-pass":
        "tests/contract/test_pressure.py::test_recovery_follows_clean_time_not_the_count_of_passes",
    "pressure-stretch-unbounded":
        "tests/contract/test_pressure.py::test_recovery_follows_clean_time_not_the_count_of_passes",
    "pressure-credits-slow-time":
        "tests/contract/test_pressure.py::test_recovery_follows_clean_time_not_the_count_of_passes",
    "retention-ttl-never-changed": "tests/test_retention.py",
    "retention-audit-ignores-it": "tests/test_retention.py",
    "backend-memory-by-default": "tests/test_no_backend.py",
    "subscription-update-unfenced": "tests/contract/test_subscription_admin.py",
    "subscription-written-unchecked": "tests/test_subscriptions_cli.py",
    "fair-mongo-pick-window-not-widened": "tests/contract/test_fairness.py",
    "fair-memory-tenants-by-first-insertion": "tests/contract/test_fairness.py",
    "fair-stolen-before-owned": "tests/contract/test_fairness.py",
    "fair-tenants-by-name": "tests/contract/test_fairness.py",
    "fair-memory-tenants-by-oldest-candidate": "tests/contract/test_fairness.py",
    "fair-mongo-pick-in-server-order": "tests/contract/test_fairness.py",
    "fair-handoff-drops-the-backlog-pick": "tests/contract/test_handoff.py",
    "fair-handoff-backlog-pick-never-stops": "tests/contract/test_handoff.py",
    "fair-handoff-crowds-out-the-pick": "tests/contract/test_handoff.py",
    "limits-mongo-renew-unfenced": "tests/test_harness_limits.py",
    "limits-memory-renew-unfenced": "tests/test_harness_limits.py",
    "limits-riders-never-ride": "tests/test_harness_limits.py",
    "limits-bound-not-renewed": "tests/test_harness_limits.py",
    "limits-takeover-not-cut": "tests/contract/test_slot_lifetime.py",
    "hook-on-done-not-called-batched": "tests/contract/test_boundaries.py",
    "hook-metrics-not-called-batched": "tests/contract/test_boundaries.py",
    "pause-release-ignores-pauses-still-on":
        "tests/contract/test_pauses.py::test_release_held_gives_rows_back_their_own_time_and_nothing_else[mongomock]",
    "pause-lift-released-on-one-read-only":
        "tests/contract/test_pauses.py::test_a_hold_that_lands_after_the_lift_is_released_by_the_next_read[memory]",
    "pause-read-late-at-the-heartbeat-instant":
        "tests/contract/test_pauses.py::test_the_pause_set_is_read_at_most_once_per_heartbeat[memory]",
    "pause-scope-ignored":
        "tests/contract/test_pauses.py::test_a_bad_pause_document_pauses_and_unpauses_nothing_else[memory]",
    "pause-held-row-loses-its-own-time":
        "tests/contract/test_pauses.py::test_a_released_row_is_due_again_at_its_own_time[memory]",
    "coalesce-deadline-instant-not-closed":
        "tests/contract/test_coalesce.py::test_a_continuous_stream_launches_about_once_per_max_wait[memory-2.0]",
    "coalesce-carry-onto-a-claimed-row-memory":
        "tests/contract/test_coalesce.py::test_the_carry_is_fenced_on_the_newer_row_still_pending[memory]",
    "coalesce-carry-onto-a-claimed-row-mongo":
        "tests/contract/test_coalesce.py::test_the_carry_is_fenced_on_the_newer_row_still_pending[mongomock]",
    "coalesce-burst-spans-subscriptions-mongo":
        "tests/contract/test_coalesce.py::test_a_burst_is_one_subscriptions_never_another_ones_on_the_same_card[mongomock]",
    "coalesced-rows-never-expire":
        "tests/test_mongo_adapters.py::test_coalesced_rows_expire_like_done_rows",
    "priority-lowest-first":
        "tests/contract/test_priority.py::test_a_tenants_higher_priority_rows_are_claimed_first_oldest_first[memory]",
    "priority-range-exclusive":
        "tests/contract/test_priority.py::test_the_order_within_a_tenant_and_a_stored_priority_read_as_0_when_it_is_none",
    "priority-pick-takes-rows-not-due":
        "tests/contract/test_priority.py::test_a_high_priority_row_takes_no_place_in_a_claim_it_is_not_for[mongomock]",
    "priority-tick-not-reordered":
        "tests/contract/test_priority.py::test_a_tick_runs_its_handed_and_picked_rows_highest_priority_first[memory]",
    "explain-lease-live-at-its-end":
        "tests/contract/test_time_types.py::test_explain_reads_due_and_expired_exactly_as_the_claims_do[memory-int]",
    "explain-backs-off-at-its-due-instant":
        "tests/contract/test_explain.py::test_ownership_names_the_replica_that_owns_the_tenant[memory]",
    "explain-turn-counts-other-tenants-memory":
        "tests/contract/test_explain.py::test_a_due_row_waits_its_turn_behind_the_tenants_earlier_rows[memory]",
    "explain-turn-counts-itself-mongo":
        "tests/contract/test_explain.py::test_a_due_row_waits_its_turn_behind_the_tenants_earlier_rows[mongomock]",
    "r7-stamp-unbounded-above":
        "tests/contract/test_time_types.py::test_a_stored_time_decodes_exactly_inside_the_range[memory-float]",
    "r7-stamp-takes-any-number": "tests/test_time_boundaries.py",
    "r7-formatter-unguarded": "tests/test_time_boundaries.py",
    "r7-event-time-kept": "tests/test_time_boundaries.py",
    "r7-far-due-not-swept-memory":
        "tests/contract/test_time_types.py::test_a_pending_row_is_swept_exactly_past_the_furthest_due_time_a_writer_sets[memory-float]",
    "r7-far-due-not-swept-mongo":
        "tests/contract/test_time_types.py::test_a_pending_row_is_swept_exactly_past_the_furthest_due_time_a_writer_sets[mongomock-float]",
    "explain-pause-not-named":
        "tests/contract/test_explain.py::test_a_held_row_names_its_pause_scope_key_since_and_who[memory]",
    "explain-chain-not-followed":
        "tests/contract/test_explain.py::test_a_coalesced_row_names_the_row_that_ran_at_the_end_of_its_chain[memory]",
    "explain-chain-loop-followed":
        "tests/contract/test_explain.py::test_a_chain_that_loops_dangles_or_does_not_decode_is_said_not_followed[memory]",
    "lanes-one-per-row":
        "tests/test_lanes.py::test_a_slow_launch_holds_up_only_its_own_tenant",
    "lanes-start-after-a-failure":
        "tests/test_lanes.py::test_a_failure_starts_nothing_more_and_cancels_nothing_running",
    "lanes-unbounded":
        "tests/test_lanes.py::test_each_lane_keeps_its_order_and_lanes_run_side_by_side",
    "lanes-concurrency-setting-ignored":
        "tests/test_lanes.py::test_the_worker_runs_at_most_its_concurrency_of_lanes_at_once[1]",
    "stream-trust-from-an-older-buffer":
        "tests/test_stream_events.py::test_a_read_that_began_with_an_older_buffer_earns_the_new_one_nothing",
    "stream-clear-keeps-trust":
        "tests/test_stream_events.py::test_clear_and_forget_take_back_the_trust_a_read_earned",
    "stream-reopen-keeps-the-buffer":
        "tests/test_stream_events.py::test_a_reopened_stream_starts_an_untrusted_buffer",
    "stream-owner-loss-not-forgotten":
        "tests/test_stream_events.py::test_a_tenant_another_replica_owns_now_loses_its_buffer",
    "stream-per-tenant-bound-off-by-one":
        "tests/test_stream_events.py::test_a_buffer_over_its_bound_loses_its_trust",
    "subcache-epoch-taken-after-the-read":
        "tests/test_subscription_cache.py::test_a_read_overtaken_by_a_change_is_not_kept",
    "subcache-closed-still-live":
        "tests/test_subscription_cache.py::test_any_change_or_the_stream_ending_empties_the_cache",
    "subcache-own-put-kept":
        "tests/test_subscription_cache.py::test_our_own_writes_empty_the_cache",
    "subcache-unbounded":
        "tests/test_subscription_cache.py::test_the_cache_holds_at_most_its_tenants_then_starts_over",
    # the fifth round
    "flush-cancelled-alone-drops-marks":
        "tests/contract/test_bulk_marks.py::test_a_timer_flush_cut_off_with_nothing_else_staged_keeps_its_marks[memory]",
    "closing-flush-unshielded":
        "tests/contract/test_bulk_marks.py::test_a_batch_cancelled_at_shutdown_writes_the_marks_of_the_effects_that_ran[memory]",
    "cancelled-batch-gives-back-staged-rows":
        "tests/contract/test_bulk_marks.py::test_a_cancelled_unit_gives_back_only_the_rows_whose_marks_are_not_staged[memory]",
    "release-unshielded":
        "tests/contract/test_bulk_marks.py::test_a_batch_cancelled_at_shutdown_writes_the_marks_of_the_effects_that_ran[memory]",
    "bulk-refusal-parks-every-row":
        "tests/contract/test_bulk_marks.py::test_a_bulk_write_refused_for_one_row_parks_that_row_alone[memory]",
    "bulk-refusal-records-nothing":
        "tests/contract/test_bulk_marks.py::test_a_bulk_write_refused_for_one_row_parks_that_row_alone[memory]",
    "broken-mark-never-parked":
        "tests/contract/test_bulk_marks.py::test_a_bulk_write_refused_for_one_row_parks_that_row_alone[memory]",
    "marks-read-back-ignores-state-mongo":
        "tests/contract/test_bulk_marks.py::test_a_short_bulk_write_counts_only_rows_in_the_marks_state_under_its_claim[mongomock]",
    "marks-read-back-ignores-state-memory":
        "tests/contract/test_bulk_marks.py::test_a_short_bulk_write_counts_only_rows_in_the_marks_state_under_its_claim[memory]",
    "claim-trusts-the-modified-count-mongo":
        "tests/contract/test_bulk_marks.py::test_a_claim_that_loses_a_race_for_a_row_returns_only_the_rows_it_holds[mongomock]",
    "claim-read-back-takes-others-rows-mongo":
        "tests/contract/test_bulk_marks.py::test_a_claim_that_loses_a_race_for_a_row_returns_only_the_rows_it_holds[mongomock]",
    "gathered-refusal-fails-every-tenant":
        "tests/contract/test_bulk_marks.py::test_a_gathered_write_refused_for_one_tenant_fails_only_that_tenants_rows[memory]",
    "reclaim-broken-row-blames-the-first-mongo":
        "tests/contract/test_bulk_marks.py::test_a_row_refusing_its_reclaim_costs_only_itself[mongomock]",
    "reclaim-writes-before-checking-memory":
        "tests/contract/test_bulk_marks.py::test_a_row_refusing_its_reclaim_costs_only_itself[memory]",
    "reclaim-read-back-takes-others-rows-mongo":
        "tests/contract/test_bulk_marks.py::test_a_reclaim_that_loses_a_race_for_a_row_returns_only_the_rows_it_holds[mongomock]",
    "flush-gives-up-at-the-original-lease":
        "tests/contract/test_long_outages.py::test_a_flush_rides_out_an_outage_past_the_original_lease_while_the_heartbeat_holds[memory-launch]",
    "staged-row-leaves-the-heartbeat":
        "tests/contract/test_long_outages.py::test_a_flush_rides_out_an_outage_past_the_original_lease_while_the_heartbeat_holds[memory-launch]",
    "staged-unit-leaves-the-heartbeat":
        "tests/contract/test_long_outages.py::test_a_flush_rides_out_an_outage_past_the_original_lease_while_the_heartbeat_holds[memory-projection]",
    "settled-rows-keep-their-leases":
        "tests/contract/test_long_outages.py::test_a_row_leaves_the_heartbeat_once_its_mark_is_written[memory]",
    "handoff-beat-window-one-beat":
        "tests/contract/test_long_outages.py::test_a_failed_beat_between_batches_is_ridden_out_by_the_handed_rows[memory]",
    "heartbeat-skips-handed-rows":
        "tests/contract/test_long_outages.py::test_handed_rows_keep_their_leases_while_a_long_effect_runs_ahead_of_them[memory]",
    "riders-ride-a-lost-lease":
        "tests/contract/test_long_outages.py::test_a_launch_whose_lease_was_lost_stops_renewing_its_slots[memory]",
    "beat-extends-farthest-leases-first":
        "tests/contract/test_long_outages.py::test_a_beat_cut_short_by_the_store_has_extended_the_leases_nearest_their_end[memory]",
    "handoff-runs-a-lost-lease":
        "tests/contract/test_edges.py::test_a_handed_row_whose_lease_was_lost_while_it_waited_is_never_run[memory]",
    "handoff-room-ignores-the-queue":
        "tests/contract/test_edges.py::test_the_hand_off_room_counts_the_rows_already_waiting[memory]",
    "insert-error-taken-for-a-duplicate-mongo":
        "tests/contract/test_edges.py::test_an_insert_error_that_is_not_a_duplicate_key_stops_the_cursor[mongomock]",
    "stream-trust-from-a-full-read":
        "tests/contract/test_edges.py::test_a_read_that_filled_its_limit_earns_the_buffer_no_trust",
    "lanes-last-error-wins":
        "tests/contract/test_edges.py::test_of_two_failing_lanes_the_first_failure_is_raised",
    "pause-release-failure-waits-for-the-sweep":
        "tests/contract/test_edges.py::test_a_pause_release_that_fails_is_tried_again_at_the_next_read[memory]",
    "coalesce-into-a-running-row":
        "tests/contract/test_edges.py::test_a_row_is_never_coalesced_into_a_newer_row_that_is_still_running[memory]",
    "priority-sorted-across-tenants":
        "tests/contract/test_edges.py::test_priority_orders_a_tenants_own_rows_and_never_one_tenant_ahead_of_anothers_turn",
    "bulk-replay-catches-up-after-a-slow-page":
        "tests/contract/test_edges.py::test_a_bulk_replay_does_not_catch_up_after_a_slow_page[memory]",
    "bulk-replay-past-the-plan":
        "tests/contract/test_edges.py::test_a_bulk_replay_applies_no_more_rows_than_its_plan_counted[memory]",
    "rerun-retakes-rows-rerun-already":
        "tests/contract/test_bulk_cancel.py::test_a_rerun_repeated_after_a_crash_midway_reruns_only_the_rows_not_yet_rerun[memory]",
    "cancel-expired-ignores-the-lease":
        "tests/contract/test_bulk_cancel.py::test_include_expired_cancels_claimed_rows_whose_lease_ended_and_no_live_one[memory]",
    "audit-repair-rewrites-every-owed-row":
        "tests/contract/test_audit.py::test_repair_rewrites_only_the_missing_rows_of_a_mixed_range[memory]",
    "adopt-takes-another-claims-rows-mongo":
        "tests/contract/test_handoff.py::test_two_replicas_inserting_the_same_rows_collapse_on_the_row_key[mongomock]",
    "adopt-takes-another-claims-rows-memory":
        "tests/contract/test_handoff.py::test_two_replicas_inserting_the_same_rows_collapse_on_the_row_key[memory]",
    "adopt-forgets-earlier-terms":
        "tests/contract/test_handoff.py::test_rows_an_insert_wrote_after_its_caller_gave_up_run_now_and_once[memory]",
}

HARNESS_GROUPS = ("tail", "worker", "membership", "launch")

# Mutants only a live test catches (a real process killed on the wire server): their catcher
# runs alone first with the live tests selected -- it starts its own SecantusDB, as in the
# suite -- and the unit suite (no live tests) decides only if it passes.
LIVE_CATCHERS: dict[str, str] = {
    "rerun-notes-before-its-new-row":
        "tests/test_bulk_kill.py::"
        "test_rerun_killed_between_a_new_row_and_its_note_then_three_applies_rerun_each_row_once",
}

# The Mongo mark_done mutant calls this helper, added next to ``_fenced``: an update by _id only.
MONGO_UNFENCED_HELPER = '''
    async def _unfenced(self, ref: Any, claim_id: str, update: dict[str, Any]) -> bool:
        res = await self.coll.update_one({"_id": ref}, update)
        return bool(res.matched_count == 1)
'''


class MutantError(Exception):
    pass


def candidate_files(root: Path) -> list[Path]:
    out: list[Path] = []
    for top in SEARCH:
        out += sorted(p for p in (root / top).rglob("*.py") if "__pycache__" not in p.parts)
    return out


def locate(m: Mutant, root: Path = ROOT) -> Path:
    """The one file holding the mutant's snippet exactly once."""
    hits = [(p, p.read_text().count(m.original)) for p in candidate_files(root)]
    hits = [(p, n) for p, n in hits if n]
    if not hits:
        raise MutantError(f"mutant {m.name}: snippet not found under {SEARCH} -- retarget it:\n"
                          f"{m.original}")
    if len(hits) > 1 and m.hint:
        narrowed = [(p, n) for p, n in hits if m.hint in str(p.relative_to(root))]
        hits = narrowed or hits
    if len(hits) > 1 or hits[0][1] > 1:
        where = ", ".join(f"{p.relative_to(root)} (x{n})" for p, n in hits)
        raise MutantError(f"mutant {m.name}: snippet ambiguous ({where}) -- make it unique")
    return hits[0][0]


def make_copy(dest: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis", ".pytest_cache")
    for name in COPY:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=ignore)
        elif src.exists():
            shutil.copy2(src, dest / name)


def apply(m: Mutant, copy: Path) -> Path:
    target = copy / locate(m).relative_to(ROOT)
    text = target.read_text()
    if text.count(m.original) != 1:
        raise MutantError(f"mutant {m.name}: snippet not unique in the copy of {target.name}")
    text = text.replace(m.original, m.replacement)
    if "self._unfenced(" in m.replacement:
        anchor = "    async def _fenced("
        if anchor not in text:
            raise MutantError(f"mutant {m.name}: no _fenced helper to put _unfenced next to")
        text = text.replace(anchor, MONGO_UNFENCED_HELPER.lstrip("\n") + "\n" + anchor, 1)
    target.write_text(text)
    return target


def env_for(copy: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(copy / "src"), str(copy / "projections"), str(copy)])
    env.pop("MONGODB_URI", None)  # the live tests stay skipped: the campaign is about logic
    return env


def run(cmd: list[str], copy: Path, timeout: float) -> tuple[int | None, str]:
    try:
        p = subprocess.run(cmd, cwd=copy, env=env_for(copy), capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return None, out
    return p.returncode, p.stdout + p.stderr


# Not run against mutants: it SIGTERMs a `board-outbox run` subprocess after a fixed 1.5 s sleep,
# and in the temp copy that subprocess is not up yet (rc -15, even alone, even unmutated), so it
# would "kill" every mutant it reaches. It tests the CLI's signal wiring, which no mutant touches.
UNIT_DESELECT = ("tests/test_admin_cli.py::test_run_stops_gracefully_on_sigterm",)
UNIT = [sys.executable, "-m", "pytest", "-m", "not live_mongo", "-x", "-q", "-p", "no:cacheprovider",
        *(f"--deselect={t}" for t in UNIT_DESELECT)]

HARNESS_SCRIPT = """
import json, sys
from tests.harness.sim import run_many, violation_kinds
out = {{}}
for store, n in (("memory", {}), ("mongomock", {})):
    rep = run_many(n, store=store)
    out[store] = {{"kinds": dict(violation_kinds(rep.violations)), "first": rep.violations[:1]}}
print("HARNESS-RESULT " + json.dumps(out))
"""


def first_failure(out: str) -> str:
    for line in out.splitlines():
        m = re.match(r"(FAILED|ERROR) (\S+)", line)
        if m:
            return m.group(2)
    if "Timeout" in out:
        return "timeout"
    return "exit status"


@dataclass
class Result:
    mutant: Mutant
    where: str = ""
    unit: str = "-"  # killed | survived | error | -
    unit_by: str = ""
    harness: str = "-"
    harness_by: str = ""
    seconds: float = 0.0


def catchers(table_file: Path) -> dict[str, str]:
    """Each mutant's catcher in an earlier results table (``--out``; the committed one is
    benchmarks/results/mutations.txt): the test id its unit-suite column names."""
    out: dict[str, str] = {}
    if not table_file.is_file():
        return out
    for line in table_file.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[2] == "killed" and "::" in parts[4]:
            out[parts[0]] = parts[4]
    return out


def first_run(res: Result, copy: Path, test: str) -> bool:
    """Run the mutant's expected catcher alone; True (killed, by it) when it fails. A test
    that fails alone fails the suite: the same standard as a kill's confirmation below. A test
    id that no longer exists is not a kill (pytest's exit status 4/5): the suite decides."""
    live = test in LIVE_CATCHERS.values()  # else a live catcher would be deselected
    rc, out = run([sys.executable, "-m", "pytest", *([] if live else ["-m", "not live_mongo"]),
                   "-q", "-p", "no:cacheprovider", test], copy, 300)
    if rc is None:
        return False  # a hang alone is not trusted as the catch: the suite decides
    if rc == 1 and first_failure(out) != "exit status":
        res.unit, res.unit_by = "killed", f"{first_failure(out)} (run first)"
        return True
    return False


def unit_run(res: Result, copy: Path, first: str = "") -> None:
    """The unit suite against the mutant (its expected catcher ``first`` alone before it, when
    known: the suite runs only if that test passes). A kill is confirmed by re-running the failing test
    alone on the mutant: a test that then passes failed for another reason (a timing test under
    load), so it is deselected and the suite runs again -- it does not count as the catch."""
    if first and first_run(res, copy, first):
        return
    flaky: list[str] = []
    for _ in range(3):
        rc, out = run([*UNIT, *(f"--deselect={t}" for t in flaky)], copy, UNIT_TIMEOUT)
        if rc == 0:
            res.unit = "survived"
            break
        if rc is None:
            res.unit, res.unit_by = "killed", "suite timeout (hang)"
            break
        test = first_failure(out)
        if "::" not in test:
            res.unit, res.unit_by = "killed", test
            break
        rc_alone, _ = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test],
                          copy, 300)
        if rc_alone != 0:
            res.unit, res.unit_by = "killed", test
            break
        flaky.append(test)
    else:
        res.unit, res.unit_by = "survived", "only failures that pass alone"
    if flaky:
        res.unit_by += f" (not counted, passed alone: {', '.join(t.split('::')[-1] for t in flaky)})"


def run_mutant(m: Mutant, unit: bool, harness: bool, first: str = "") -> Result:
    res = Result(m)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"mutant-{m.name}-") as tmp:
        copy = Path(tmp)
        make_copy(copy)
        try:
            res.where = str(apply(m, copy).relative_to(copy))
        except MutantError as exc:
            res.unit = res.harness = "error"
            res.unit_by = str(exc).splitlines()[0]
            return res
        if unit:
            unit_run(res, copy, first)
        if harness:
            n = HARNESS_SCHEDULES_CORE if m.group in HARNESS_GROUPS else HARNESS_SCHEDULES
            rc, out = run([sys.executable, "-c", HARNESS_SCRIPT.format(*n)], copy, HARNESS_TIMEOUT)
            line = next((x for x in out.splitlines() if x.startswith("HARNESS-RESULT ")), None)
            if rc is None:
                res.harness, res.harness_by = "killed", "harness timeout"
            elif line is None:
                tail = [x for x in out.strip().splitlines() if x.strip()][-1:] or ["?"]
                res.harness, res.harness_by = "killed", f"harness crashed: {tail[0][:80]}"
            else:
                data = json.loads(line.split(" ", 1)[1])
                kinds: dict[str, int] = {}
                for store in data.values():
                    for k, n in store["kinds"].items():
                        kinds[k] = kinds.get(k, 0) + n
                if kinds:
                    res.harness = "killed"
                    res.harness_by = ", ".join(
                        f"{k}:{n}" for k, n in sorted(kinds.items(), key=lambda kv: -kv[1]))
                else:
                    res.harness = "survived"
    res.seconds = time.monotonic() - t0
    return res


# the whole suite as CI runs it (two workers, the live tests too), for ``--together``
SUITE = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
         "--durations=15", *(f"--deselect={t}" for t in UNIT_DESELECT)]


def run_together(chosen: list[Mutant], timeout: float) -> int:
    """Every chosen mutant applied to one copy (a mutant whose snippet an earlier one rewrote is
    left out, said so), then the whole suite once, without ``-x``: how long a broken build
    takes to fail, and how many tests say so. Exit status 0 when the suite failed (the build is
    broken: it must), 1 when it passed or did not finish within ``timeout``."""
    with tempfile.TemporaryDirectory(prefix="mutants-together-") as tmp:
        copy = Path(tmp)
        make_copy(copy)
        applied: list[str] = []
        for m in chosen:
            try:
                apply(m, copy)
                applied.append(m.name)
            except MutantError as exc:
                print(f"  left out: {str(exc).splitlines()[0]}", file=sys.stderr)
        print(f"{len(applied)} mutants applied at once: {', '.join(applied)}", file=sys.stderr,
              flush=True)
        t0 = time.monotonic()
        rc, out = run(SUITE, copy, timeout)
        took = time.monotonic() - t0
    lines = out.strip().splitlines()
    tally = next((x for x in reversed(lines) if " passed" in x or " failed" in x), "?")
    slowest = [x for x in lines if re.match(r"\s*[0-9.]+s (call|setup|teardown) ", x)][:15]
    failed = sorted({m.group(2) for x in lines if (m := re.match(r"(FAILED|ERROR) (\S+)", x))})
    print("\n".join(slowest))
    print(f"\n{len(failed)} tests failed, e.g.: {', '.join(failed[:10])}")
    state = "did not finish" if rc is None else ("failed" if rc else "PASSED")
    print(f"the suite with {len(applied)} mutants at once {state} in {took:.0f}s: {tally}")
    return 0 if rc not in (None, 0) else 1


def preflight(baseline: bool) -> None:
    """The copy, not the editable install, must be what the subprocesses import: a copy whose
    subscriptions module raises at import must fail, and ``board_outbox`` must resolve inside it. With
    ``baseline``, the unmutated copy must also pass the unit suite."""
    for m in MUTANTS:
        locate(m)  # every snippet found exactly once, before spending minutes
    with tempfile.TemporaryDirectory(prefix="mutant-preflight-") as tmp:
        copy = Path(tmp)
        make_copy(copy)
        rc, out = run([sys.executable, "-c",
                       "import board_outbox, board_outbox_projections as p, tests; "
                       "print(board_outbox.__file__, p.__file__, tests.__file__)"],
                      copy, 60)
        files = out.split()
        if rc != 0 or len(files) != 3 or not all(f.startswith(str(copy)) for f in files):
            raise SystemExit(f"preflight: the copy is not what gets imported: {out.strip()}")
        if baseline:  # the unmutated copy must pass, or every "kill" below means nothing
            base = Result(Mutant("baseline", "", "", ""))
            unit_run(base, copy)
            if base.unit != "survived":
                raise SystemExit(f"preflight: the unmutated copy fails: {base.unit_by}")
            print(f"preflight: the unmutated copy passes the unit suite {base.unit_by}",
                  file=sys.stderr, flush=True)
        target = locate(Mutant("preflight-probe", "", "class Subscription(msgspec.Struct", "",
                               "subscriptions"))
        probe = copy / target.relative_to(ROOT)
        probe.write_text(probe.read_text() + '\nraise RuntimeError("mutation preflight")\n')
        rc, out = run([*UNIT, "tests/test_matching.py"], copy, 120)
        if rc == 0 or "mutation preflight" not in out:
            raise SystemExit("preflight: an obviously broken copy was not killed:\n" + out[-2000:])


def table(results: list[Result]) -> str:
    lines = [f"{'mutant':44} {'group':8} {'unit suite':10} {'harness':9} caught by (unit | harness)"]
    for r in results:
        lines.append(f"{r.mutant.name:44} {r.mutant.group:8} {r.unit:10} {r.harness:9} "
                     f"{r.unit_by} | {r.harness_by}")
    unit = [r for r in results if r.unit != "-"]
    unit_killed = sum(r.unit == "killed" for r in unit)
    core = [r for r in results if r.mutant.group in HARNESS_GROUPS and r.harness != "-"]
    core_killed = sum(r.harness == "killed" for r in core)
    allh = [r for r in results if r.harness != "-"]
    lines.append("")
    lines.append(f"unit suite: {unit_killed}/{len(unit)} killed, "
                 f"{sum(r.unit == 'survived' for r in unit)} survived, "
                 f"{sum(r.unit == 'error' for r in unit)} not applied")
    survivors = [r.mutant.name for r in unit if r.unit == "survived"]
    if survivors:
        lines.append("  survivors: " + ", ".join(survivors))
    lines.append(f"harness alone: {core_killed}/{len(core)} of the tail/worker/membership/launch mutants "
                 f"caught; {sum(r.harness == 'killed' for r in allh)}/{len(allh)} overall")
    groups: dict[str, list[int]] = {}
    for r in allh:
        g = groups.setdefault(r.mutant.group, [0, 0])
        g[0] += r.harness == "killed"
        g[1] += 1
    lines.append("  harness alone by group: " + ", ".join(f"{g} {k}/{n}" for g, (k, n) in groups.items()))
    missed = [r.mutant.name for r in core if r.harness != "killed"]
    if missed:
        lines.append("  missed by the harness: " + ", ".join(missed))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", default=[], help="run this mutant (repeatable)")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--list", action="store_true", help="list the mutants and where they apply")
    ap.add_argument("--no-unit", action="store_true", help="skip the unit suite")
    ap.add_argument("--no-harness", action="store_true", help="skip the harness")
    ap.add_argument("--no-baseline", action="store_true",
                    help="skip the unmutated copy's unit run (it must pass)")
    ap.add_argument("--out", type=Path, help="also write the table to this file")
    ap.add_argument("--catchers", type=Path, default=ROOT / "benchmarks/results/mutations.txt",
                    help="an earlier results table: each mutant's catcher there is run alone "
                         "first (default: the committed table)")
    ap.add_argument("--suite-only", action="store_true",
                    help="never run a catcher first: the whole unit suite for every mutant")
    ap.add_argument("--together", action="store_true",
                    help="apply every chosen mutant (--only, else all) to ONE copy and time the "
                         "whole suite once, as CI runs it, without -x: how long a broken build "
                         "takes to fail")
    ap.add_argument("--timeout", type=float, default=1800.0,
                    help="with --together: the suite's bound in seconds (default 1800)")
    args = ap.parse_args(argv)
    if args.list:
        for m in MUTANTS:
            try:
                where = str(locate(m).relative_to(ROOT))
            except MutantError as exc:
                where = f"ERROR {exc}"
            print(f"{m.name:44} {m.group:8} {where}")
        return 0
    chosen = list(MUTANTS)
    if args.only:
        names = {m.name for m in MUTANTS}
        unknown = [n for n in args.only if n not in names]
        if unknown:
            raise SystemExit(f"unknown mutant(s): {', '.join(unknown)}")
        chosen = [m for m in MUTANTS if m.name in args.only]
    if args.together:
        return run_together(chosen, args.timeout)
    known = catchers(args.catchers)
    preflight(baseline=not args.no_unit and not args.no_baseline)
    t0 = time.monotonic()
    done: list[Result] = []

    def one(m: Mutant) -> Result:
        first = "" if args.suite_only else (known.get(m.name) or CATCHERS.get(m.name)
                                            or LIVE_CATCHERS.get(m.name, ""))
        r = run_mutant(m, unit=not args.no_unit, harness=not args.no_harness, first=first)
        print(f"  {m.name:44} unit {r.unit:9} {r.unit_by[:50]:50} harness {r.harness:9} "
              f"{r.harness_by[:60]}  ({r.seconds:.0f}s)", file=sys.stderr, flush=True)
        return r

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        done = list(pool.map(one, chosen))
    text = table(done) + (f"\n\n{len(done)} mutants in {time.monotonic() - t0:.0f}s, jobs={args.jobs}"
                          f"; unmutated copy passed first: {not args.no_unit and not args.no_baseline}")
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    bad = any(r.unit in ("survived", "error") for r in done)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
