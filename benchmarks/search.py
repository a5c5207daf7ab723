"""The row search (A8, ``rows find``) on the wire: each form's latency at 200,000 rows.

Workload: ``--rows`` rows (default 200,000) over 100 tenants and 50 cards each, as a week of
history looks: 90% done, the rest pending, failed, claimed and cancelled, one launch row and one
projection row per event. Each form (card, event, seq range of 100, row key, state: the pending,
failed and cancelled rows, the pending rows of one tenant, the done rows of one tenant) runs
``--repeat`` times through ``EffectOutbox.search`` -- the query ``rows find`` sends, its decoding
included -- at limit 100, on varying targets; the result is each form's p50, p95 and max in
milliseconds, beside the goal (50 ms). Also: the documents the server examined for one query of
each form (``explain``, when the server gives it).

    python -m benchmarks.search [--rows N] [--repeat R]   # MONGODB_URI, else a wire server
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

import anyio

from board_outbox.model.board import EventSnapshot
from board_outbox.model.rows import new_projection_row, new_row_doc, new_subscription_row
from board_outbox.model.search import RowQuery
from board_outbox.model.subscriptions import Subscription

from .common import mongo_uri, open_backend, percentiles, pyplot, write_result

TENANTS, CARDS = 100, 50
GOAL_MS = 50.0
STATES = ["done"] * 90 + ["pending"] * 4 + ["failed"] * 3 + ["claimed"] * 2 + ["cancelled"]


def _docs(rows: int, now: float) -> list[dict[str, Any]]:
    out = []
    rng = random.Random(7)
    for i in range(rows // 2):
        tenant = f"t{i % TENANTS}"
        seq = i // TENANTS + 1
        ev = EventSnapshot(seq=seq, type="card.updated", card_id=f"c{rng.randrange(CARDS)}",
                           at=now - 86400)
        sub = Subscription(sub_id="triage", tenant_id=tenant, bot="bot")
        for row in (new_subscription_row(tenant, ev, sub, now - 86400 + i * 0.01),
                    new_projection_row(tenant, ev, "board-reflect", now - 86400 + i * 0.01)):
            state = STATES[rng.randrange(len(STATES))]
            doc = new_row_doc(row)
            doc["state"] = state
            if state in ("done", "cancelled"):
                from datetime import UTC, datetime

                doc["done_at"] = datetime.fromtimestamp(row.updated_at, UTC)
            if state == "claimed":
                doc["lease_until"], doc["claim_id"] = now + 60, "bench"
            out.append(doc)
    return out


def _queries(rng: random.Random, seqs: int) -> dict[str, Any]:
    def tenant() -> str:
        return f"t{rng.randrange(TENANTS)}"

    def seq() -> int:
        return rng.randrange(1, seqs)

    return {
        "card": lambda: RowQuery(form="card", tenant=tenant(), card=f"c{rng.randrange(CARDS)}"),
        "event": lambda: RowQuery(form="event", tenant=tenant(), seq_from=(s := seq()), seq_to=s),
        "seq range (100)": lambda: RowQuery(form="seq_range", tenant=tenant(),
                                            seq_from=(s := seq()), seq_to=s + 99),
        "row key": lambda: RowQuery(form="row_key", row_key=f"{tenant()}/{seq()}/sub/triage"),
        "state pending": lambda: RowQuery(form="state", state="pending"),
        "state failed": lambda: RowQuery(form="state", state="failed"),
        "state cancelled": lambda: RowQuery(form="state", state="cancelled"),
        "state pending, one tenant": lambda: RowQuery(form="state", state="pending",
                                                      tenant=tenant()),
        "state done, one tenant": lambda: RowQuery(form="state", state="done", tenant=tenant()),
    }


async def run(uri: str, rows: int, repeat: int) -> dict[str, Any]:
    async with open_backend("mongo", uri) as b:
        outbox = b.stores.outbox
        coll = outbox.coll  # type: ignore[attr-defined]
        t0 = time.perf_counter()
        docs = _docs(rows, time.time())
        for lo in range(0, len(docs), 5000):
            await coll.insert_many(docs[lo:lo + 5000], ordered=False)
        print(f"{len(docs)} rows in {time.perf_counter() - t0:.0f} s", flush=True)
        rng = random.Random(11)
        out: dict[str, Any] = {"rows": len(docs), "repeat": repeat, "goal_ms": GOAL_MS,
                               "forms": {}}
        for name, make in _queries(rng, rows // 2 // TENANTS).items():
            await outbox.search(make())  # warm
            ms, found = [], 0
            for _ in range(repeat):
                q = make()
                t = time.perf_counter()
                got = await outbox.search(q)
                ms.append((time.perf_counter() - t) * 1000)
                found += len(got)
            p = percentiles(ms)
            out["forms"][name] = {"p50_ms": round(p["p50"], 2), "p95_ms": round(p["p95"], 2),
                                  "max_ms": round(p["max"], 2), "rows_found_mean":
                                  round(found / repeat, 1), "met": p["p95"] <= GOAL_MS}
            print(f"{name:28} p50 {p['p50']:7.2f} ms  p95 {p['p95']:7.2f} ms  max "
                  f"{p['max']:7.2f} ms  ({found / repeat:.0f} rows a query)", flush=True)
    return out


def plot(res: dict[str, Any], path: str) -> None:
    plt = pyplot()
    names = list(res["forms"])
    fig, ax = plt.subplots(figsize=(9, 4.5))
    ys = range(len(names))
    ax.barh([y + 0.2 for y in ys], [res["forms"][n]["p50_ms"] for n in names], 0.4, label="p50")
    ax.barh([y - 0.2 for y in ys], [res["forms"][n]["p95_ms"] for n in names], 0.4, label="p95")
    ax.axvline(GOAL_MS, color="red", linestyle="--", label=f"goal {GOAL_MS:g} ms")
    ax.set_yticks(list(ys), names)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("ms per search (limit 100, log scale)")
    ax.set_title(f"rows find at {res['rows']:,} rows on the wire server")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=200_000, help="rows (default 200000)")
    ap.add_argument("--repeat", type=int, default=30, help="queries per form (default 30)")
    args = ap.parse_args()
    uri = mongo_uri()
    if uri is not None:
        res = anyio.run(run, uri, args.rows, args.repeat)
    else:
        from board_outbox.service.wireserver import WireServer

        with WireServer() as server:
            res = anyio.run(run, server.uri, args.rows, args.repeat)
    path = write_result("search", {"results": res})
    plot(res, str(path.with_suffix(".png")))
    print(path)


if __name__ == "__main__":
    main()
