"""The console's charts: the ``/charts`` page and the overview's per-tenant
sparklines, drawn from the rolling series every replica keeps in ``trigger_series``
(``engine/upkeep/series.py``) as server-side SVG (``charts.py``).

Costs: the charts page reads the window once (every replica's documents, the lag entries of the
tenants it draws only) plus the last three minutes to find the tenants most behind; the overview
reads its page's tenants' last hour once, and a store failure there costs the sparklines, never
the overview."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from board_outbox.engine.upkeep.series import SeriesWindow, most_behind, read_window
from board_outbox.model.errors import StoreError, StoreUnavailable
from board_outbox.ports import Stores
from board_outbox.service.config_sections import Config
from board_outbox.surface.console.charts import Chart, Line, render, render_spark, sparkline

log = logging.getLogger("board_outbox.console")

HOURS = (1, 3, 6, 12, 24, 48)  # the windows the charts page offers (1 h unless asked)
TOP_TENANTS = 8  # tenants the lag-per-tenant chart draws (the most behind now)
SPARK_MINUTES = 60  # the overview's sparklines: the last hour
SPARK_CACHE_SECONDS = 15.0  # the series moves once a minute: a reload within this reads nothing

Page = Callable[..., Awaitable[Response]]


@dataclass
class ChartsPage:
    hours: int
    offered: list[int]
    empty: bool
    charts: list[tuple[str, Markup]]  # (id, svg)
    totals: dict[str, int]
    tenants: list[str]  # the tenants whose lag is drawn
    keep_hours: float
    max_tenants: int


class Trends:
    """The series as the console shows it; ``clock`` is injected (tests)."""

    def __init__(self, stores: Stores, config: Config,
                 clock: Callable[[], float] = time.time) -> None:
        self.stores = stores
        self.config = config
        self.clock = clock
        self._spark: tuple[float, tuple[str, ...], dict[str, Markup]] | None = None

    @property
    def offered(self) -> list[int]:
        """The windows worth offering: those the documents live long enough for."""
        return [h for h in HOURS if h == 1 or h <= self.config.series.keep_hours]

    @property
    def available(self) -> bool:
        return self.stores.series is not None

    async def sparklines(self, tenants: Sequence[str]) -> dict[str, Markup]:
        """Each tenant's lag over the last hour, as a small SVG (a tenant with no figure has
        none); one read for them all, reused for ``SPARK_CACHE_SECONDS``."""
        store = self.stores.series
        if store is None or not tenants:
            return {}
        now, key = self.clock(), tuple(tenants)
        if self._spark is not None and self._spark[1] == key and now - self._spark[0] < \
                SPARK_CACHE_SECONDS:
            return self._spark[2]
        try:
            window = await read_window(store, now, SPARK_MINUTES, key)
        except (StoreError, StoreUnavailable) as exc:  # the sparklines go, the overview stays
            log.warning("console: the series could not be read for the sparklines: %s", exc)
            return {}
        out = {}
        for t in key:
            values = window.tenant_lag(t)
            peak = max((v for v in values if v is not None), default=None)
            spark = sparkline(f"{t}: events behind, last {SPARK_MINUTES} minutes "
                              f"(newest {next((v for v in reversed(values) if v is not None), '-')}"
                              f", peak {peak if peak is not None else '-'})", values)
            if spark is not None:
                out[t] = render_spark(spark)
        self._spark = (now, key, out)
        return out

    async def page(self, hours: int) -> ChartsPage:
        store = self.stores.series
        assert store is not None
        now = self.clock()
        tenants = await most_behind(store, now, TOP_TENANTS)
        window = await read_window(store, now, hours * 60, tenants)
        return ChartsPage(hours=hours, offered=self.offered, empty=window.empty,
                          charts=self.charts(window, tenants), totals=_totals(window),
                          tenants=tenants, keep_hours=self.config.series.keep_hours,
                          max_tenants=self.config.series.max_tenants)

    @staticmethod
    def charts(window: SeriesWindow, tenants: Sequence[str]) -> list[tuple[str, Markup]]:
        m = window.minutes
        out = [
            ("chart-throughput", render(Chart(
                title="Events materialized and rows done per minute, every replica",
                unit="per minute", minutes=m,
                lines=[Line("events materialized", window.counts("materialized")),
                       Line("rows done", window.counts("done"))]))),
            ("chart-dead", render(Chart(
                title="Rows dead-lettered per minute, every replica", unit="per minute",
                minutes=m, lines=[Line("rows dead-lettered", window.counts("dead"))]))),
            ("chart-lag", render(Chart(
                title="Events behind, every tenant", unit="events behind", minutes=m,
                lines=[Line("events behind", window.lag_total())]))),
        ]
        if tenants:
            out.append(("chart-tenant-lag", render(Chart(
                title=f"Events behind, the {len(tenants)} tenants most behind now",
                unit="events behind", minutes=m,
                lines=[Line(t, window.tenant_lag(t)) for t in tenants]))))
        return out


def _totals(window: SeriesWindow) -> dict[str, int]:
    return {"materialized": sum(window.counts("materialized")),
            "done": sum(window.counts("done")), "dead": sum(window.counts("dead"))}


def chart_routes(trends: Trends, page: Page) -> list[Route]:
    """``/charts`` (GET, read-only), rendered by the console's ``page``."""

    async def charts(request: Request) -> Response:
        if not trends.available:
            return await page(request, "message.html", 404, title="No charts",
                              message="This backend keeps no series.")
        raw = request.query_params.get("hours", "")
        hours = int(raw) if raw.isdigit() and len(raw) < 3 and int(raw) in trends.offered else 1
        ctx: dict[str, Any] = {"cp": await trends.page(hours)}
        return await page(request, "charts.html", **ctx)

    return [Route("/charts", charts, methods=["GET"])]
