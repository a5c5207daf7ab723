"""The in-process reading of ``trace_overhead.py``: the same pipeline on the memory twins in this
process, a ``Service`` driven by its own passes, no server to vary the pace, so the tracing cost
per event is steady. Separate from the wire round, which spawns processes."""

from __future__ import annotations

import random
import statistics
import time
from typing import Any

from .trace_overhead_wire import CARDS, TENANTS, traceparent

# --- in process: the same pipeline on the memory twins, no server to vary its pace -----------------


# name -> (the sampler, or None: no SDK; whether the events carry a context)
IN_PROCESS: dict[str, tuple[str | None, bool]] = {
    "off": (None, True), "off-no-context": (None, False),
    "100%": ("parentbased_always_on", True), "100%-no-context": ("parentbased_always_on", False),
    "0.01": ("parentbased_traceidratio", True)}


async def in_process_once(name: str, events: int, runner: str, endpoint: str) -> float:
    """One replica's ``Service`` on the memory twins, driven by its own passes (``drain_pass``,
    ``work_pass``: the loops' bodies) until every row is done, HTTP launches to the runner and
    spans over OTLP/HTTP to the receiver as ``run`` exports them; this process's CPU (every
    thread: the exporter's too) per event."""
    import gc

    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from board_outbox.adapters.launchers import HttpLauncher
    from board_outbox.adapters.memory import open_stores
    from board_outbox.model.board import Card
    from board_outbox.model.subscriptions import MatchRule, Subscription
    from board_outbox.service.config import load_config
    from board_outbox.service.runtime import Service
    from board_outbox.service.telemetry import sampler

    tp: trace.TracerProvider = trace.NoOpTracerProvider()
    sdk: TracerProvider | None = None
    chosen, context = IN_PROCESS[name]
    if chosen is not None:
        env = {"OTEL_TRACES_SAMPLER": chosen, "OTEL_TRACES_SAMPLER_ARG": "0.01"}
        sdk = TracerProvider(resource=Resource.create({"service.name": "board-outbox"}),
                             sampler=sampler(env))
        sdk.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(f"{endpoint}/v1/traces")))
        tp = sdk
    launcher = HttpLauncher(runner, tracer_provider=tp)
    ratio = 0.01 if name == "0.01" else 1.0
    async with open_stores(launcher=launcher) as stores:
        svc = Service(stores, load_config(env={}, tail={"seed": "earliest",
                                                        "change_streams": False}),
                      tracer_provider=tp)
        tenants = [f"t{i:02d}" for i in range(TENANTS)]
        for t in tenants:
            await stores.subs.put(Subscription(sub_id=f"{t}.s", tenant_id=t, bot="bot",
                                               rule=MatchRule()))
            for c in range(CARDS):
                await stores.cards.put(Card(tenant_id=t, card_id=f"c{c}", title=f"card {c}"))
        rng = random.Random(7)
        for k in range(events):
            t = tenants[k % TENANTS]
            doc = {"tenant_id": t, "seq": await stores.events.allocate_seq(t),
                   "type": "card.updated", "card_id": f"c{k % CARDS}", "at": time.time()}
            if context:
                doc["trace"] = {"traceparent": traceparent(rng, ratio), "tracestate": ""}
            await stores.events.insert(doc)
        gc.collect()
        gc.freeze()  # as ``Service.run`` does at start
        c0 = time.process_time()
        done = 0
        while done < 2 * events:
            await svc.drain_pass(full=True)
            res = await svc.work_pass()
            done += 0 if res is None else res.done
        if sdk is not None:
            sdk.force_flush()
        cpu = time.process_time() - c0
        gc.unfreeze()
        await launcher.aclose()
    if sdk is not None:
        sdk.shutdown()
    return cpu * 1e6 / events


def in_process(events: int, rounds: int, runner: str, endpoint: str) -> dict[str, Any]:
    import anyio

    got: dict[str, list[float]] = {n: [] for n in IN_PROCESS}
    for r in range(rounds):
        for n in (IN_PROCESS if r % 2 == 0 else list(IN_PROCESS)[::-1]):
            got[n].append(anyio.run(in_process_once, n, events, runner, endpoint))
            print("in-process", n, round(got[n][-1], 1), "us/event", flush=True)
    med = {n: statistics.median(v) for n, v in got.items()}
    out: dict[str, Any] = {
        n: {"cpu_us_per_event_median": round(med[n], 1), "runs": [round(x, 1) for x in v],
            "tracing_us_per_event": round(med[n] - med["off"], 1),
            "overhead_vs_off": round(med[n] / med["off"] - 1.0, 4)}
        for n, v in got.items()}
    # what the span per event costs (100% with contexts against without), and what reading and
    # passing on the contexts costs with tracing off
    out["materialize_span_us_per_event"] = round(med["100%"] - med["100%-no-context"], 1)
    out["context_us_per_event_off"] = round(med["off"] - med["off-no-context"], 1)
    return out
