"""What the chart and the HTML report show of statistics: axes that follow the bars, error bars
that are intervals from 3 repeats and ranges below, ratios on a log axis, shared notes once."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from mlperf_mig.runner.stats import relative_change, summarize
from mlperf_mig.study.chart import (
    AXIS_MAX_OVER_BARS,
    RANGE_BAR_NOTE,
    Bar,
    ChartedRate,
    axis_top,
    chart_note,
    draw_bars,
)
from mlperf_mig.study.report_html import change_points, shared_notes

FIRST = SimpleNamespace(
    mode="independent", throughput_unit="samples/s", emulated=True, benchmark="resnet50",
    loadgen_scenario="Offline", gpu="A100-SXM4-80GB",
)  # fmt: skip


def _bar(label: str, total: float, error: tuple[float, float] | None, interval: bool = True) -> Bar:
    return Bar(label, [("1g.10gb", total)], total, error, None, interval)


def _drawn_ylim(bars: list[Bar]) -> tuple[float, float]:
    from matplotlib.figure import Figure

    axes = Figure().add_subplot()
    draw_bars(axes, bars, FIRST, ChartedRate(unit=FIRST.throughput_unit))
    return axes.get_ylim()


def test_axis_ends_just_above_the_tallest_bar() -> None:
    """Bars of 1,000 and 2,113 with small error bars: the axis ends within 1.5x the tallest."""
    bars = [_bar("a", 1000.0, (20.0, 20.0)), _bar("b", 2113.0, (30.0, 30.0))]
    low, high = _drawn_ylim(bars)
    assert low == 0 and 2143 < high <= 2113 * 1.5


def test_a_huge_error_bar_is_cut_at_the_axis() -> None:
    """An error bar to 16,000 over a bar of 2,113 no longer stretches the axis past 2x the
    tallest bar (the old chart ran to 16,000)."""
    bars = [_bar("a", 1000.0, None), _bar("b", 2113.0, (1000.0, 13887.0))]
    assert axis_top(bars) == pytest.approx(2113 * AXIS_MAX_OVER_BARS)
    _, high = _drawn_ylim(bars)
    assert high <= 2 * 2113


def test_two_repeats_draw_their_range_and_the_note_says_so() -> None:
    """A layout of 2 repeats: its error bar is min-max, and the chart's note says why."""
    total = summarize([900.0, 1100.0])
    bar = _bar("a", total.mean, total.error_bar(), total.shows_interval)
    assert bar.error == (100.0, 100.0) and not bar.interval
    assert RANGE_BAR_NOTE in chart_note([bar], FIRST)


def _study(scenario: int, values: list[float], reference: list[float]) -> SimpleNamespace:
    return SimpleNamespace(
        alone={}, scenario=scenario, layout="x", change=relative_change(values, reference)
    )


def test_change_points_are_ratios_with_interval_or_range() -> None:
    """Figure 2's points: the ratio, its 95% interval from 3 repeats, its range with 2; none
    reaches zero or below."""
    points = change_points(
        [_study(2, [5.0, 95.0], [100.0, 101.0]), _study(3, [2.0, 10.0, 18.0], [100.0, 101.0, 99.0])]
    )
    (name2, _ratio2, bar2, interval2), (name3, ratio3, bar3, interval3) = points
    assert (name2, interval2) == ("S2", False) and bar2 == pytest.approx((5 / 101, 95 / 100))
    assert name3 == "S3" and interval3 and 0 < bar3[0] < ratio3 < bar3[1]


def test_notes_of_every_layout_are_said_once() -> None:
    """A note of all layouts is shown once plainly, one of two of three once naming them, the
    rest stay with their layout, and notes the page showed already are not repeated."""
    shared, own = shared_notes(
        ["S1", "S2", "S3"],
        [
            ["emulated", "both", "only S1"],
            ["emulated", "both", "sweep note"],
            ["emulated", "only S3"],
        ],
        shown=["sweep note"],
    )
    assert shared == ["emulated", "both (layouts S1, S2)"]
    assert own == [["only S1"], [], ["only S3"]]


def test_a_single_layout_keeps_its_notes() -> None:
    """With one layout nothing is shared: its notes stay under its table."""
    shared, own = shared_notes(["S1"], [["emulated", "x"]])
    assert shared == [] and own == [["emulated", "x"]]


@pytest.mark.parametrize("total", [float("nan"), 1e308])
def test_an_absurd_total_read_back_still_draws(total: float) -> None:
    """A NaN or near-overflow total from a results.json does not break the axis (it was
    'Axis limits cannot be NaN or Inf')."""
    low, high = _drawn_ylim([_bar("a", 1000.0, None), _bar("b", total, (1.0, 1.0))])
    assert low == 0 and high > 0


def test_no_layout_charts_throughput_and_draws_nothing() -> None:
    """An empty set of layouts (a sweep where none ran) is charted in throughput, with no bar."""
    from mlperf_mig.study.chart import charted_rate

    rate = charted_rate([])
    assert not rate.tokens and rate.what == "throughput"
