"""``board-outbox status``: one row per tenant (O3) -- cursor, allocated seq, lag in events and
seconds, oldest pending row age, rows by state, dead-letters. ``--json`` prints one stable
document (see "status --json" in docs/operations.md); an unknown ``--tenant`` is one line, exit 2."""

from __future__ import annotations

import argparse
import time

import msgspec

from board_outbox.model.bad_documents import BAD_DOCUMENTS, BadDocument
from board_outbox.model.errors import UsageError
from board_outbox.model.times import ago
from board_outbox.surface.cli.commands import StoresFactory
from board_outbox.surface.format import age

# bumped only when a field changes meaning or goes away; new fields may be added
STATUS_SCHEMA = 1


class StatusReport(msgspec.Struct, kw_only=True):
    schema: int
    generated_at: float
    tenants: list[object]
    # the replicas whose membership lease is live (S1); null when the backend keeps none
    replicas: list[ReplicaAlive] | None = None
    # R1: stored documents of the service's own collections that did not parse (each one left
    # out, alone), as this run's reads met them
    bad_documents: list[BadDocument] = msgspec.field(default_factory=list)


class ReplicaAlive(msgspec.Struct, kw_only=True):
    member_id: str
    lease_left_seconds: float


def _latency(seconds: float | None) -> str:
    if seconds is not None and seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    return age(seconds)


async def cmd_status(args: argparse.Namespace, factory: StoresFactory) -> int:
    from board_outbox.engine.flow.membership import trusted
    from board_outbox.service.config import load_config
    from board_outbox.service.health import effect_latency, tenant_statuses

    cfg = load_config(args.config)
    async with factory(cfg) as stores:
        now = time.time()
        statuses = await tenant_statuses(stores, now)  # constant queries, whatever the count
        if args.tenant is not None:
            if args.tenant not in statuses:
                raise UsageError(f"status: unknown tenant {args.tenant!r} "
                                 f"({len(statuses)} known; run without --tenant to list them)")
            statuses = {args.tenant: statuses[args.tenant]}
        rows = list(statuses.values())
        latency = await effect_latency(stores, now)
        for st in rows:
            lat = latency.get(st.tenant_id)
            if lat is not None:
                st.effect_latency_p50_seconds, st.effect_latency_p99_seconds = lat.p50, lat.p99
                st.effect_latency_rows = lat.rows
        # F3: the pauses on (one small read; a pause document that does not parse is listed
        # under bad_documents like any other)
        pauses = [] if stores.pauses is None else [p for p in await stores.pauses.all()
                                                   if p.active]
        replicas = None
        if stores.members is not None:
            live = trusted(await stores.members.live(now), now, cfg.membership)
            replicas = [ReplicaAlive(member_id=m.member_id,
                                     lease_left_seconds=round(m.expires_at - now, 3))
                        for m in live]
    bad = BAD_DOCUMENTS.current()
    if args.json:
        report = StatusReport(schema=STATUS_SCHEMA, generated_at=now, tenants=list(rows),
                              replicas=replicas, bad_documents=bad)
        print(msgspec.json.format(msgspec.json.encode(report), indent=2).decode())
        return 0
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"board-outbox status ({len(rows)} tenants)")
    for col, justify in (("tenant", "left"), ("cursor", "right"), ("allocated", "right"),
                         ("lag (events)", "right"), ("lag (time)", "right"),
                         ("oldest pending", "right"), ("rows by state", "left"),
                         ("dead-letters", "right"), ("effect p50 / p99", "right")):
        table.add_column(col, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for st in rows:
        by_state = ", ".join(f"{k} {v}" for k, v in st.rows.items()) or "-"
        if st.waiting_on_limit:  # F2: pending rows deferred over a limit
            by_state += f" ({st.waiting_on_limit} limited)"
        if st.held_by_pause:  # F3: pending rows held by a pause
            by_state += f" ({st.held_by_pause} paused)"
        table.add_row(st.tenant_id, str(st.cursor), str(st.allocated_seq), str(st.lag_events),
                      age(st.lag_seconds if st.lag_events else None),
                      age(st.oldest_pending_age_seconds), by_state,
                      f"[red]{st.dead_letters}[/red]" if st.dead_letters else "0",
                      f"{_latency(st.effect_latency_p50_seconds)} / {_latency(st.effect_latency_p99_seconds)}"
                      if st.effect_latency_rows else "-")
    console = Console(width=max(140, Console().width))
    console.print(table)
    if replicas is not None:
        names = ", ".join(r.member_id for r in replicas) or "none (no replica is running)"
        console.print(f"replicas alive: {len(replicas)}: {names}", highlight=False)
    for p in sorted(pauses, key=lambda p: (p.scope, p.key)):
        line = (f"paused: {p.scope} {p.key} since {age(ago(now, p.since))} ago, by {p.by}"
                f"{': ' + p.reason if p.reason else ''}")
        console.print(f"[yellow]{escape(line)}[/yellow] (`board-outbox paused`)",
                      highlight=False, emoji=False)
    for st in rows:
        for problem in st.problems:
            console.print(f"[red]tenant {st.tenant_id}: {problem}[/red]", highlight=False)
    for doc in bad:
        # escaped, no emoji: a key such as a pause's "bot:x" followed by ": " read ":x:" as an emoji
        line = f"malformed {doc.collection} document {doc.key}: {doc.problem}"
        console.print(f"[red]{escape(line)}[/red]", highlight=False, emoji=False)
    return 0
