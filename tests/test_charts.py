"""The console's charts (issue 33, item 6): the SVG the server draws parses as XML, its points are
the data's (read back through the drawn y axis), gaps stay gaps, hostile labels are text, and
the same chart is the same bytes; and the series merge's rules on their own (engine/upkeep/series)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from board_outbox.engine.upkeep.series import merge
from board_outbox.model.series import MINUTE, SeriesCounts, SeriesPoint
from board_outbox.surface.console.charts import (
    Chart,
    Line,
    compact,
    layout,
    nice_max,
    render,
    render_spark,
    sparkline,
)

SVG = "{http://www.w3.org/2000/svg}"
START = 1_800_000_000 - 1_800_000_000 % MINUTE
MINUTES = [START + i * MINUTE for i in range(12)]
HOSTILE = ["</title><script>alert(1)</script>", "a&b \"quoted\" 'single'", "]]><!--",
           "ctl\x00\x01\x1b\ud800", "x" * 300, "$where.{{ 7*7 }}"]


def _parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)


def _segments(d: str) -> list[list[tuple[float, float]]]:
    """The path's runs of points (a new run at each ``M``)."""
    runs: list[list[tuple[float, float]]] = []
    for cmd, x, y in re.findall(r"([ML])(-?[\d.]+),(-?[\d.]+)", d):
        if cmd == "M":
            runs.append([])
        runs[-1].append((float(x), float(y)))
    return runs


def _values_back(root: ET.Element, d: str) -> list[list[float]]:
    """The values a path draws, read back through the chart's own y axis."""
    rect = root.find(f"{SVG}rect")
    assert rect is not None
    top, bottom = float(rect.get("y", 0)), float(rect.get("y", 0)) + float(rect.get("height", 0))
    y_max = float(root.get("data-y-max", 0))
    # the axis says so too: its top label is the maximum
    labels = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "y-tick"]
    assert labels[-1] == compact(y_max) and labels[0] == "0"
    return [[(bottom - y) / (bottom - top) * y_max for _x, y in run] for run in _segments(d)]


def test_the_chart_parses_and_its_points_are_the_data() -> None:
    done = [3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610]
    dead = [0, 0, 1, 0, 0, 2, 0, 0, 0, 0, 0, 1]
    root = _parse(render(Chart(title="throughput", unit="per minute", minutes=MINUTES,
                               lines=[Line("done", done), Line("dead", dead)])))
    assert root.tag == f"{SVG}svg" and root.get("role") == "img"
    assert root.findtext(f"{SVG}title") == "throughput"
    assert root.get("data-y-max") == "1000"  # 610 rounds up to 1, 2, 5 x 10^k
    paths = {p.get("data-label"): p.get("d", "") for p in root.iter(f"{SVG}path")}
    for label, data in (("done", done), ("dead", dead)):
        [run] = _values_back(root, paths[label])
        assert run == pytest.approx(data, abs=1000 / 120 * 0.06)  # 0.1 px rounding
    xs = [x for x, _y in _segments(paths["done"])[0]]
    assert xs == sorted(xs) and len(set(xs)) == len(MINUTES)  # one point a minute, in order
    ticks = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "x-tick"]
    assert ticks[0] == "08:00" and len(ticks) <= 6  # START is 08:00 UTC; not crowded


def test_a_minute_without_a_figure_is_a_gap_not_a_zero() -> None:
    lag: list[int | None] = [4, 4, None, None, 7, 9, None, 2, None, None, None, 5]
    root = _parse(render(Chart(title="lag", unit="events behind", minutes=MINUTES,
                               lines=[Line("t", lag)])))
    [path] = root.iter(f"{SVG}path")
    runs = _values_back(root, path.get("d", ""))
    assert [[round(v) for v in run] for run in runs] == [[4, 4], [7, 9], [2], [5]]
    assert path.get("d", "").count("l0,0") == 2  # a lone point is drawn (a dot), not dropped


@pytest.mark.parametrize("label", HOSTILE)
def test_hostile_labels_are_text_and_the_svg_still_parses(label: str) -> None:
    svg = render(Chart(title=f"lag of {label}", unit=label, minutes=MINUTES,
                       lines=[Line(label, list(range(12)))]))
    root = _parse(svg)  # control characters replaced: XML could not carry them
    assert not list(root.iter("script")) and not list(root.iter(f"{SVG}script"))
    assert "<script" not in svg and "{{" not in svg.replace("{{ 7*7 }}", "")
    expected = re.sub("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff]", "\ufffd", label)
    assert root.findtext(f"{SVG}title") == f"lag of {expected}"
    [path] = root.iter(f"{SVG}path")
    assert path.get("data-label") == expected
    legend = next(g for g in root.iter(f"{SVG}g") if g.get("class") == "legend")
    assert legend.findtext(f"{SVG}title") == expected
    shown = legend.findtext(f"{SVG}text") or ""
    assert len(shown) <= 25 and expected.startswith(shown.rstrip("…"))


def test_the_same_chart_is_the_same_bytes() -> None:
    def chart() -> Chart:
        return Chart(title="t", unit="u", minutes=MINUTES,
                     lines=[Line(f"l{i}", [i * j for j in range(12)]) for i in range(9)])

    assert render(chart()) == render(chart())
    # nine lines: the legend wraps into rows above the plot, the ninth line reuses a colour
    lay = layout(chart())
    assert len({p.legend for p in lay.paths}) == 9 and lay.top > 22 + 16


def test_empty_and_flat_charts_still_draw() -> None:
    root = _parse(render(Chart(title="none", unit="u", minutes=MINUTES,
                               lines=[Line("x", [None] * 12)])))
    [path] = root.iter(f"{SVG}path")
    assert path.get("d") == "" and root.get("data-y-max") == "1"
    root = _parse(render(Chart(title="one", unit="u", minutes=MINUTES[:1],
                               lines=[Line("x", [0])])))
    assert root.get("data-y-max") == "1"
    with pytest.raises(ValueError, match="values for 12 minutes"):
        layout(Chart(title="bad", unit="u", minutes=MINUTES, lines=[Line("x", [1])]))


def test_sparkline() -> None:
    assert sparkline("nothing", [None, None]) is None and render_spark(None) == ""
    spark = sparkline("t <b>", [None, 2, 4, None, 1])
    root = _parse(render_spark(spark))
    assert root.findtext(f"{SVG}title") == "t <b>"
    [path] = root.iter(f"{SVG}path")
    assert [len(run) for run in _segments(path.get("d", ""))] == [2, 1]
    circle = root.find(f"{SVG}circle")
    assert circle is not None and spark is not None and spark.dot is not None
    assert float(circle.get("cx", 0)) == spark.dot[0]  # the newest value is marked


@pytest.mark.parametrize(("value", "nice"), [(0, 1), (1, 1), (1.5, 2), (3, 5), (7, 10),
                                             (10, 10), (11, 20), (610, 1000), (12_345, 20_000)])
def test_nice_max(value: float, nice: int) -> None:
    assert nice_max(value) == nice


@pytest.mark.parametrize(("n", "text"), [(0, "0"), (0.5, "0.5"), (950, "950"), (1000, "1k"), (1200, "1.2k"),
                                         (35_000, "35k"), (4_500_000, "4.5M"), (2e9, "2G")])
def test_compact(n: float, text: str) -> None:
    assert compact(n) == text


# --- the merge's rules (engine/upkeep/series.merge), without a store --------------------------------


def _p(minute: int, replica: str, counts: tuple[int, int, int], base: tuple[int, int, int],
       lag: tuple[tuple[str, int], ...] = ()) -> SeriesPoint:
    c, b = (SeriesCounts(materialized=v[0], done=v[1], dead=v[2]) for v in (counts, base))
    return SeriesPoint(minute=minute, replica=replica, counts=c, base=b, lag=lag,
                       listed=len(lag), behind=len(lag), lag_total=sum(n for _t, n in lag))


def test_merge_takes_each_document_past_its_base_and_past_the_previous_one() -> None:
    points = [
        _p(START, "r", (10, 10, 0), (0, 0, 0)),
        # the next flush was told the previous failed although it landed: its base is older
        _p(START + MINUTE, "r", (15, 14, 1), (0, 0, 0)),
        # a restart under the same replica id: counts below the previous document's
        _p(START + 2 * MINUTE, "r", (3, 2, 0), (0, 0, 0)),
        _p(START + 3 * MINUTE, "r", (5, 5, 0), (3, 2, 0)),
    ]
    got = merge(reversed(points))  # any order
    assert [(f.counts.materialized, f.counts.done, f.counts.dead) for f in got.values()] == [
        (10, 10, 0), (5, 4, 1), (3, 2, 0), (2, 3, 0)]


def test_merge_sums_replicas_and_keeps_each_tenants_largest_lag() -> None:
    got = merge([_p(START, "a", (5, 4, 1), (0, 0, 0), (("t1", 9), ("t2", 1))),
                 _p(START, "b", (2, 2, 0), (0, 0, 0), (("t1", 3), ("t3", 4)))])
    [fig] = got.values()
    assert (fig.counts.materialized, fig.counts.done, fig.counts.dead) == (7, 6, 1)
    assert fig.lag == {"t1": 9, "t2": 1, "t3": 4} and fig.replicas == 2
    assert (fig.lag_total, fig.behind) == (17, 4)
