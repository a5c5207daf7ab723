"""The demo's final check: every event materialized once, every row settled, no launch doubled,
the board-reflect read model equal to the cards, every ``notify`` row (the user effect kind)
done by its handler. It reads through the ports, so it checks the
in-memory twin and the wire server alike."""

from __future__ import annotations

from typing import TextIO

from board_outbox.adapters.memory import MemoryLauncher
from board_outbox.ports import RowFilter, Stores
from board_outbox.service.runtime import Service
from board_outbox.surface.demo.notify import KIND as NOTIFY
from board_outbox.surface.demo.notify import Notify, notifications
from board_outbox.surface.demo.simulator import BoardSimulator

ALL_ROWS = 10**9


async def verify(
    stores: Stores,
    launcher: MemoryLauncher,
    service: Service,
    tenants: list[str],
    sim: BoardSimulator,
    out: TextIO,
    timed_out: bool,
    elapsed: float,
) -> int:
    problems: list[str] = []
    rows = await stores.outbox.find(RowFilter(limit=ALL_ROWS))
    counts = await stores.outbox.count_by_state()
    if sum(counts.values()) != len(rows):
        problems.append(f"{sum(counts.values()) - len(rows)} rows unreadable")
    keys = [r.row_key for r in rows]
    if len(keys) != len(set(keys)):
        problems.append("duplicate row keys")
    launched: dict[str, int] = {}
    for req in launcher.launches:
        launched[req.row_key] = launched.get(req.row_key, 0) + 1
    doubles = sorted(k for k, n in launched.items() if n > 1)
    if doubles:
        problems.append(f"{len(doubles)} rows launched more than once")
    live = [r for r in rows if r.state in ("pending", "claimed")]
    if live:
        problems.append(f"{len(live)} rows not settled")
    events = 0
    for t in tenants:
        events += await stores.events.max_inserted_seq(t)
    skipped = service.stats.skipped_deleted
    for name in service.registry.projections:  # one row per event per projection
        n = sum(1 for r in rows if r.kind == "projection" and r.projection == name)
        if n + skipped != events:
            problems.append(f"{n} {name} rows + {skipped} events of deleted cards "
                            f"!= {events} events")
    for t in tenants:
        model = {d["card_id"]: d for d in await stores.readmodels.list("board-reflect", t)
                 if not d["deleted"]}
        truth = sim.cards[t]
        if set(model) != set(truth):
            problems.append(f"{t}: board-reflect has {len(model)} cards, board has {len(truth)}")
        else:
            for cid, card in truth.items():
                if model[cid]["column"] != card.column:
                    problems.append(f"{t}: board-reflect card {cid} in {model[cid]['column']!r}, "
                                    f"board says {card.column!r}")
                    break
    launch_rows = [r for r in rows if r.kind == "launch"]
    by_outcome: dict[str, int] = {}
    for r in launch_rows:
        label = str(r.outcome or r.state).split(" launch-")[0]
        by_outcome[label] = by_outcome.get(label, 0) + 1
    consumed = sum(1 for r in launch_rows if r.consume_marked)
    by_kind: dict[str, int] = {}
    for r in rows:
        by_kind[r.kind] = by_kind.get(r.kind, 0) + 1
    # the user kind: every row done by the notify handler (its outcome says what it did), and
    # every "notified" one recorded in its read model, once
    notify_rows = [r for r in rows if r.kind == NOTIFY]
    notified = [r for r in notify_rows if r.state == "done" and str(r.outcome).startswith("notified")]
    not_by_handler = [r for r in notify_rows if r.state != "done" or not str(r.outcome).startswith(
        ("notified", "dropped"))]
    if not_by_handler:
        problems.append(f"{len(not_by_handler)} notify rows not done by the notify handler "
                        f"(first: {not_by_handler[0].row_key} {not_by_handler[0].state} "
                        f"{not_by_handler[0].outcome or ''})")
    recorded = 0
    expected: dict[tuple[str, str], int] = {}
    for r in notified:
        key = (r.tenant_id, r.sub_id or "")
        expected[key] = expected.get(key, 0) + 1
    for (t, sub_id), n in expected.items():
        got = len(await notifications(stores.readmodels, t, sub_id))
        recorded += got
        if got != min(n, Notify.keep):
            problems.append(f"{t}: {sub_id} has {got} notifications recorded, {n} rows notified")
    print(f"\n{events} events -> {len(rows)} rows ("
          + ", ".join(f"{v} {k}" for k, v in sorted(by_kind.items())) + "); launch outcomes: "
          + ", ".join(f"{k} {v}" for k, v in sorted(by_outcome.items())), file=out)
    print(f"notify rows (a user effect kind) {len(notify_rows)}: {len(notified)} notified by the "
          f"notify handler, {recorded} notifications recorded, "
          f"{len(notify_rows) - len(notified) - len(not_by_handler)} dropped", file=out)
    print(f"events of cards deleted before materialization (skipped, ADR-094): {skipped}",
          file=out)
    print(f"launches {len(launcher.launches)} after {launcher.attempts} attempts "
          f"(failed attempts retried with backoff); one-shot labels consumed {consumed}",
          file=out)
    lag: dict[str, int] = {}
    for (_t, name), n in service.metrics.projection_lag().items():
        lag[name] = lag.get(name, 0) + n
    print("projection lag (materialized seq - applied seq, summed over tenants): "
          + (", ".join(f"{k} {v}" for k, v in sorted(lag.items())) or "none"), file=out)
    if elapsed > 0:
        print(f"throughput: {events / elapsed:,.0f} events/s and {len(rows) / elapsed:,.0f} "
              f"rows/s end to end ({events} events settled in {elapsed:.1f} s)", file=out)
    if timed_out:
        problems.append("timed out before the pipeline settled")
    if problems:
        print("FAILED: " + "; ".join(problems), file=out)
        return 1
    print("OK: every event materialized once, every row settled, no launch doubled, "
          "read model matches the board, every notify row done by its handler", file=out)
    return 0
