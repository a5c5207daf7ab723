"""Every metric the Grafana dashboard and the Prometheus alert rules name exists in a real
``/metrics`` scrape (O9): a running service (``Service`` with its operator port, as ``run``
builds it, on the memory backend) that has materialized and executed rows, retried, parked a
dead-letter, held rows under a pause and deferred launches over a limit. A metric renamed in
the code, or misspelt in the dashboard or the rules, fails here: an alert on a name no scrape
has never fires, and a dashboard panel on one stays empty without a word.

The labels the expressions group by or match on are checked too, against the samples of the
metrics they name (``tenant`` for ``tenant_id`` would otherwise group everything into one
series)."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.model.board import Card
from board_outbox.model.subscriptions import Subscription
from board_outbox.service.config import load_config
from board_outbox.service.runtime import Service
from board_outbox.surface.http import open_ops_server

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "deploy" / "grafana" / "board-outbox.json"
RULES = ROOT / "deploy" / "prometheus" / "board-outbox.rules.yml"

# Prometheus' own series (the scrape's health) and the labels it adds to every scraped series
PROMETHEUS_OWN = frozenset({"up"})
TARGET_LABELS = frozenset({"job", "instance"})
# PromQL's functions, aggregations and keywords the expressions use
PROMQL_WORDS = frozenset({
    "sum", "min", "max", "avg", "count", "topk", "bottomk", "rate", "irate", "increase", "delta",
    "histogram_quantile", "absent", "vector", "or", "and", "unless", "by", "without", "on",
    "ignoring", "group_left", "group_right", "offset", "bool", "label_values", "time",
})


# --- what the artifacts name ----------------------------------------------------------------


def dashboard_exprs() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    out: list[str] = []

    def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for p in items:
            yield p
            yield from panels(p.get("panels", []))

    for p in panels(dash["panels"]):
        out += [t["expr"] for t in p.get("targets", [])]
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            q = var["query"]
            out.append(q["query"] if isinstance(q, dict) else q)
    return out


def rule_exprs() -> list[str]:
    doc = yaml.safe_load(RULES.read_text())
    return [str(r["expr"]) for g in doc["groups"] for r in g["rules"]]


def _strip(expr: str) -> str:
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings (label values, $variables)
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # range selectors
    return expr


def metric_names(expr: str) -> set[str]:
    """The series names an expression selects (PromQL words, label names and numbers out)."""
    expr = _strip(expr)
    expr = re.sub(r"(label_values\([^,]*),[^)]*\)", r"\1)", expr)  # the label it lists
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\b(?:by|without|on|ignoring)\s*\([^)]*\)", "", expr)
    words = set(re.findall(r"(?<![\w$.])[A-Za-z_:][A-Za-z0-9_:]*", expr))
    return words - PROMQL_WORDS


def label_names(expr: str) -> set[str]:
    """The label names an expression matches on or groups by."""
    expr = _strip(expr)
    names: set[str] = set()
    for block in re.findall(r"\{([^}]*)\}", expr):
        names |= set(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)", block))
    for block in re.findall(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", expr):
        names |= {n.strip() for n in block.split(",") if n.strip()}
    # label_values(metric, label)
    names |= set(re.findall(r"label_values\([^,]*,\s*([A-Za-z_]\w*)\)", expr))
    return names


def test_the_expression_reader_finds_names_and_labels() -> None:
    expr = ('histogram_quantile(0.99, sum by (le, kind) (rate(board_outbox_effect_latency_seconds'
            '_bucket{job=~"$job", tenant_id=~"$tenant"}[$__rate_interval]))) > 60 or '
            'absent(up{job="board-outbox"}) or vector(0)')
    assert metric_names(expr) == {"board_outbox_effect_latency_seconds_bucket", "up"}
    assert label_names(expr) == {"le", "kind", "job", "tenant_id"}
    values = 'label_values(board_outbox_tail_lag_events{job=~"$job"}, tenant_id)'
    assert metric_names(values) == {"board_outbox_tail_lag_events"}
    assert label_names(values) == {"job", "tenant_id"}


# --- a real scrape ----------------------------------------------------------------------------


class Scrape:
    """The series names a scrape declares (by the families' types: a counter ``x`` is
    ``x_total``, a histogram ``x`` has ``x_bucket``, ``x_sum``, ``x_count``) and the labels seen on
    each series' samples."""

    SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
                "gauge": ("",), "summary": ("", "_sum", "_count", "_created"), "info": ("_info",),
                "untyped": ("",), "unknown": ("",), "stateset": ("",), "gaugehistogram": ("_bucket",)}

    def __init__(self, text: str) -> None:
        self.series: set[str] = set()
        self.labels: dict[str, set[str]] = {}
        for fam in text_string_to_metric_families(text):
            for suffix in self.SUFFIXES[fam.type]:
                self.series.add(fam.name + suffix)
            for s in fam.samples:
                self.series.add(s.name)
                self.labels.setdefault(s.name, set()).update(s.labels)


def named_series() -> set[str]:
    return set().union(*(metric_names(e) for e in dashboard_exprs() + rule_exprs())) - PROMETHEUS_OWN


async def _scrape() -> str:
    """Drive a service through what the dashboard and the rules watch -- rows done, retried and
    parked, rows held by a pause, launches deferred over a rate limit, a tenant held for a cursor
    ahead of its counter, a malformed cursor, a row the audit finds missing -- and scrape it
    until every series they name has samples."""
    backend = MemoryBackend()
    # the malformed cursor is recorded in the process-wide bad-document list: a name no other
    # test uses
    broken = "deploy-metrics-broken"
    for tenant in ("acme", "globex", "held", "ahead", broken):
        await backend.subs.put(Subscription(sub_id=f"{tenant}-ok", tenant_id=tenant, bot="ok"))
        await backend.board.put(Card(tenant_id=tenant, card_id="c"))
    # every launch at this bot fails: one retry, then a dead-letter (max_attempts 2)
    await backend.subs.put(Subscription(sub_id="acme-flaky", tenant_id="acme", bot="flaky"))
    backend.launcher.fail = lambda req: req.bot == "flaky"
    # one launch a second at this bot: the rest are deferred over the limit
    await backend.subs.put(Subscription(sub_id="globex-slow", tenant_id="globex", bot="slow",
                                        max_per_second=1.0))
    await backend.pauses.pause("tenant", "held", reason="maintenance", by="test", at=0.0)
    await backend.events.emit("ahead", "card.created", "c", at=1.0)
    backend.cursors._cursors["ahead"] = 5  # restored from a backup: ahead of its counter (1)
    backend.cursors._cursors[broken] = "abc"  # type: ignore[assignment]  # malformed
    cfg = load_config(env={}, tail={"seed": "earliest", "poll_interval_seconds": 0.05},
                      worker={"max_attempts": 2, "backoff_base_seconds": 0.01,
                              "backoff_cap_seconds": 0.02, "idle_seconds": 0.02},
                      limits={"wait_seconds": 0.05}, audit={"interval_seconds": 0.1},
                      service={"metrics_interval_seconds": 0.05})
    service = Service(backend.stores(), cfg, rng=random.Random(1))
    want = named_series()
    async with open_ops_server(service, "127.0.0.1", 0) as server, \
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}", timeout=10) as client, \
            anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        for _ in range(4):
            for tenant in ("acme", "globex", "held"):
                await backend.events.emit(tenant, "card.created", "c", at=1.0)
        deleted = False
        with anyio.fail_after(20):
            while True:
                text = (await client.get("/metrics")).text
                scrape = Scrape(text)
                if not deleted:  # a done row deleted behind the cursor: the audit's to find
                    done = [d for d in backend.outbox.all_docs()
                            if d["state"] == "done" and d["tenant_id"] == "acme"]
                    if done:
                        deleted = backend.outbox.delete_raw(done[0]["row_key"])
                # a name the scrape does not declare at all is the name test's to report
                if all(n in scrape.labels for n in want if n in scrape.series):
                    break
                await anyio.sleep(0.05)
        service.stop()
    return text


@pytest.fixture(scope="module")
def scrape() -> Scrape:
    return Scrape(anyio.run(_scrape))


def test_every_metric_the_dashboard_and_the_rules_name_is_in_a_real_scrape(scrape: Scrape) -> None:
    named = {"dashboard": dashboard_exprs(), "rules": rule_exprs()}
    assert len(named["dashboard"]) >= 30 and len(named["rules"]) >= 10
    missing: list[str] = []
    for where, exprs in named.items():
        for expr in exprs:
            for name in sorted(metric_names(expr) - PROMETHEUS_OWN):
                if name not in scrape.series:
                    missing.append(f"{where}: {name} (in {expr[:80]!r})")
    assert not missing, "named but not in a real /metrics scrape:\n" + "\n".join(missing)


def test_every_label_the_dashboard_and_the_rules_use_is_on_the_series(scrape: Scrape) -> None:
    wrong: list[str] = []
    for expr in dashboard_exprs() + rule_exprs():
        ours = metric_names(expr) - PROMETHEUS_OWN
        seen = set().union(*(scrape.labels.get(n, set()) for n in ours)) if ours else set()
        for label in sorted(label_names(expr) - TARGET_LABELS):
            if label not in seen:
                wrong.append(f"{label} on {sorted(ours)} (in {expr[:80]!r})")
    assert not wrong, "labels no sample of the named series carries:\n" + "\n".join(wrong)
