"""Series as SVG, drawn on the server: no script, nothing fetched by the browser.

``layout`` turns a ``Chart`` (one value per minute per line; None: no figure that minute) into
plain geometry -- the plot box, the y scale (0 to a round maximum), the axis labels and one path
per line, a gap wherever a value is None -- and ``render`` writes it through the console's own
jinja2 templates (``templates/svg_chart.html``), autoescaped: a tenant id is text in a
``<title>``, a legend or a ``<desc>``, never markup. The same chart renders to the same bytes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import jinja2
from markupsafe import Markup

from board_outbox.model.times import when

# line colours, in order (colour-blind-safe: Okabe-Ito)
PALETTE = ("#0072b2", "#e69f00", "#009e73", "#d55e00", "#cc79a7", "#56b4e9", "#f0e442", "#000000")
X_LABELS = 6  # time labels along the x axis at most
LEGEND_CHARS = 24  # a legend entry shows this much of its label (the whole in its <title>)
LEGEND_WIDTH = 180  # pixels per legend entry; entries wrap into rows
# what XML 1.0 cannot carry even escaped (control characters, lone surrogates, U+FFFE/F)
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def text(value: str) -> str:
    """``value`` as XML text may carry it: every character XML forbids becomes U+FFFD (the
    escaping of ``<``, ``&`` and quotes is the template's)."""
    return _NOT_XML.sub("\ufffd", value)


@dataclass(frozen=True)
class Line:
    label: str
    values: Sequence[int | None]  # one per minute of the chart


@dataclass(frozen=True)
class Chart:
    title: str  # the accessible name (<title>)
    unit: str  # what the y axis counts
    minutes: Sequence[int]  # epoch seconds, oldest first
    lines: Sequence[Line]
    width: int = 720
    height: int = 220


@dataclass(frozen=True)
class Path:
    label: str
    short: str  # the legend's text
    color: str
    d: str  # the SVG path (empty: the line has no value at all)
    last: int | None  # its newest value
    peak: int | None  # its largest
    legend: tuple[float, float]  # where its legend entry goes


@dataclass(frozen=True)
class Layout:
    chart: Chart
    title: str
    unit: str
    left: float
    top: float
    right: float
    bottom: float
    y_max: int  # the y axis runs 0..y_max
    y_ticks: list[tuple[float, str]]  # (y, label)
    x_ticks: list[tuple[float, str]]  # (x, label)
    paths: list[Path] = field(default_factory=list)
    desc: str = ""


def nice_max(value: float) -> int:
    """The smallest of 1, 2, 5 x 10^k at or above ``value`` (at least 1)."""
    if value <= 1:
        return 1
    exp = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if step * exp >= value:
            return int(step * exp)
    return int(10 * exp)  # pragma: no cover - the loop always returns


def compact(n: float) -> str:
    """A count for an axis label: 950, 1.2k, 35k, 4.5M."""
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            v = n / div
            return f"{v:.1f}{suffix}".replace(".0" + suffix, suffix) if v < 10 else \
                f"{v:.0f}{suffix}"
    return f"{n:.0f}" if n == int(n) else f"{n:.1f}"


def hhmm(epoch: int) -> str:
    return when(epoch, fmt="%H:%M")


def _xs(n: int, left: float, right: float) -> list[float]:
    if n == 1:
        return [(left + right) / 2]
    step = (right - left) / (n - 1)
    return [left + i * step for i in range(n)]


def _path(xs: Sequence[float], values: Sequence[int | None], scale: float, bottom: float) -> str:
    """``M x,y L x,y ...``, a new ``M`` after every gap; a lone point is a zero-length segment
    (drawn as a dot by the round line cap)."""
    parts: list[str] = []
    pen_down = False
    run = 0
    for x, v in zip(xs, values, strict=True):
        if v is None:
            if pen_down and run == 1:
                parts.append("l0,0")
            pen_down, run = False, 0
            continue
        y = bottom - v * scale
        parts.append(f"{'L' if pen_down else 'M'}{x:.1f},{y:.1f}")
        pen_down, run = True, run + 1
    if pen_down and run == 1:
        parts.append("l0,0")
    return " ".join(parts)


def layout(chart: Chart) -> Layout:
    """The chart's geometry: deterministic, from the chart alone."""
    per_row = max(1, int((chart.width - 56.0) // LEGEND_WIDTH))
    rows = max(1, math.ceil(len(chart.lines) / per_row))
    # the legend's rows at the top, the unit above the y axis, then the plot
    left, top, right, bottom = 56.0, 30.0 + 16 * rows, chart.width - 12.0, chart.height - 28.0
    values = [v for line in chart.lines for v in line.values if v is not None]
    y_max = nice_max(max(values, default=0))
    scale = (bottom - top) / y_max
    y_ticks = [(bottom - v * scale, compact(v)) for v in (0, y_max / 2, y_max)]
    n = len(chart.minutes)
    xs = _xs(n, left, right)
    every = max(1, math.ceil(n / X_LABELS)) if n else 1
    x_ticks = [(xs[i], hhmm(chart.minutes[i])) for i in range(0, n, every)]
    paths = []
    for i, line in enumerate(chart.lines):
        if len(line.values) != n:
            raise ValueError(f"line {line.label!r}: {len(line.values)} values for {n} minutes")
        known = [v for v in line.values if v is not None]
        last = next((v for v in reversed(line.values) if v is not None), None)
        label = text(line.label)
        short = label if len(label) <= LEGEND_CHARS else label[:LEGEND_CHARS] + "…"
        paths.append(Path(label=label, short=short, color=PALETTE[i % len(PALETTE)],
                          d=_path(xs, line.values, scale, bottom), last=last,
                          peak=max(known, default=None),
                          legend=(left + LEGEND_WIDTH * (i % per_row), 14.0 + 16 * (i // per_row))))
    span = f"{hhmm(chart.minutes[0])} to {hhmm(chart.minutes[-1])} UTC" if n else "no minutes"
    desc = f"{text(chart.unit)}, {span}, one point a minute. " + "; ".join(
        f"{p.label}: " + ("no figures" if p.last is None else f"newest {p.last}, peak {p.peak}")
        for p in paths)
    return Layout(chart=chart, title=text(chart.title), unit=text(chart.unit), left=left,
                  top=top, right=right, bottom=bottom, y_max=y_max,
                  y_ticks=y_ticks, x_ticks=x_ticks, paths=paths, desc=desc)


@dataclass(frozen=True)
class Spark:
    title: str
    d: str
    dot: tuple[float, float] | None  # the newest value
    width: int
    height: int


def sparkline(title: str, values: Sequence[int | None], width: int = 120,
              height: int = 24) -> Spark | None:
    """A small line with no axes (None when no value is known)."""
    known = [v for v in values if v is not None]
    if not known:
        return None
    top, bottom = 2.0, height - 2.0
    scale = (bottom - top) / max(1, max(known))
    xs = _xs(len(values), 2.0, width - 4.0)
    last = max((i for i, v in enumerate(values) if v is not None))
    newest = values[last]
    assert newest is not None
    return Spark(title=text(title), d=_path(xs, values, scale, bottom),
                 dot=(round(xs[last], 1), round(bottom - newest * scale, 1)),
                 width=width, height=height)


_ENV = jinja2.Environment(loader=jinja2.PackageLoader("board_outbox.surface.console", "templates"),
                          autoescape=True, undefined=jinja2.StrictUndefined)
_ENV.filters["compact"] = compact


def render(chart: Chart) -> Markup:
    """The chart as an inline ``<svg>`` element (escaped, deterministic)."""
    return Markup(_ENV.get_template("svg_chart.html").render(c=layout(chart)).strip())


def render_spark(spark: Spark | None) -> Markup:
    """A sparkline as an inline ``<svg>`` (nothing when there is no value)."""
    if spark is None:
        return Markup("")
    return Markup(_ENV.get_template("svg_spark.html").render(s=spark).strip())
