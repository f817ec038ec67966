"""The seed study's figure: total throughput per MIG layout, stacked by instance (tokens/s for
a workload that generates tokens: `ChartedRate`).

Drawn with matplotlib's object API on an Agg canvas (no pyplot, so a notebook's backend is left
alone). A repeated layout's bar stacks its instances' means and carries the 95% interval of its
mean total as an error bar (from 3 repeats; with 2, the min-max range of the totals, see
runner/stats.py). The value axis follows the bars: it ends a little above the tallest bar, and
an error bar reaching far beyond is cut at the axis and says so with its end's value. A run and
a repeated run are both a `LayoutResult` (runner/results.py) and are drawn the same way from its
totals and means: a lone run's bar is a mean of one value, with no error bar.

Every text of a figure (profiles, layouts, GPU and benchmark names read back from results.json)
is drawn literally: mathtext and TeX are off while a figure is made, so a label such as `$x^$`
is those four characters, not a parse error.
"""

from __future__ import annotations

import contextlib
import io
import math
import textwrap
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import attrs

from mlperf_mig._io import atomic_write_bytes
from mlperf_mig.runner.results import (
    SUM_LABEL,
    UNIFIED_LABEL,
    InstanceRun,
    LayoutResult,
    RunResult,
)
from mlperf_mig.runner.stats import Change, Summary, relative_change, summarize
from mlperf_mig.study.tokens import (
    TOKENS_PER_S,
    generates_tokens,
    gpu_tokens_per_s,
    instance_tokens_per_s,
)

if TYPE_CHECKING:  # matplotlib (the plot extra) is imported where a chart is drawn
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

CHART_NAME = "throughput"
PLOT_INSTALL = "pip install -e '.[plot]'"  # matplotlib, as docs/studies.md says to install it
ERROR_BAR_NOTE = "error bars: 95% confidence interval of the mean total (Student's t)"
RANGE_BAR_NOTE = (
    "error bars of layouts with 2 repeats: min-max of the totals (too few for an interval)"
)
# The value axis ends this far above the tallest bar; an error bar may stretch it up to
# AXIS_MAX_OVER_BARS times the tallest bar, and is cut there (its end written as a number).
AXIS_HEADROOM = 1.1
AXIS_MAX_OVER_BARS = 1.6
LABEL_LINE = 0.06  # room above the axis's end per line of the labels over the bars


_Stat = TypeVar("_Stat", Summary | None, Change | None)


def measured_value(layout: LayoutResult, value: _Stat) -> _Stat:
    """`value` without its 95% interval when a run of `layout` reused a calibrated target: a
    Server run's throughput is its target, so repeats that share one are one number repeated
    (a zero-width interval that measures nothing); the range is shown instead."""
    if value is None or not layout.reused_targets():
        return value
    return attrs.evolve(value, low=None, high=None)


@attrs.frozen
class ChartedRate:
    """What figures 1 and 2 chart of each run: the total tokens/s of a workload that generates
    tokens (llama3.1-8b), else the total throughput (samples/s, scheduled samples/s).

    The throughput's totals, changes and subtotals are the layout result's own; the tokens/s
    ones are computed the same way from `RunResult.tokens_per_second`, and their change is
    against `baseline`, the tokens/s of the report's own MIG scenario 1 (a run records the
    throughput of its scenario 1, not its tokens/s).
    """

    unit: str
    tokens: bool = False
    baseline: tuple[float, ...] = ()

    @property
    def what(self) -> str:
        """The charted quantity in words: 'tokens/s' or 'throughput'."""
        return TOKENS_PER_S if self.tokens else "throughput"

    def run_total(self, run: RunResult) -> float | None:
        return run.tokens_per_second if self.tokens else run.total_throughput

    def instance_value(self, run: RunResult, instance: InstanceRun) -> float | None:
        return instance_tokens_per_s(run, instance) if self.tokens else instance.throughput

    def total(self, layout: LayoutResult) -> Summary | None:
        """The layout's total over its runs (a single value for one run)."""
        if not self.tokens:
            return layout.total
        return measured_value(layout, summarize(self._totals(layout)))

    def change(self, layout: LayoutResult) -> Change | None:
        """The layout's total against MIG scenario 1's, with its interval from 3 runs."""
        if not self.tokens:
            return layout.change
        if layout.scenario == 1 or not self.baseline:
            return None
        return measured_value(layout, relative_change(self._totals(layout), self.baseline))

    def instance_values(self, layout: LayoutResult, index: int) -> list[float]:
        """Instance `index`'s value over the layout's runs."""
        if not self.tokens:
            return layout.instance_values(index, "throughput")
        values = [
            self.instance_value(r, r.instances[index])
            for r in layout.runs
            if index < len(r.instances)
        ]
        return [v for v in values if v is not None]

    def gpu_subtotal(self, layout: LayoutResult, position: int) -> Summary | None:
        """The subtotal of the layout's `position`-th GPU over the runs that finished."""
        if not self.tokens:
            return layout.gpu_subtotals(position)
        values = [gpu_tokens_per_s(r, position) for r in layout.runs if r.ok]
        return measured_value(layout, summarize([v for v in values if v is not None]))

    def _totals(self, layout: LayoutResult) -> list[float]:
        return [v for v in map(self.run_total, layout.runs) if v is not None]


def charted_rate(layouts: Sequence[LayoutResult]) -> ChartedRate:
    """Tokens/s where a run of `layouts` measured tokens (the baseline: the tokens/s of the
    first finished MIG scenario 1 among them), else the first run's throughput unit."""
    if not any(generates_tokens(r) for layout in layouts for r in layout.runs):
        # no layout at all draws no bar: its unit is never shown
        return ChartedRate(unit=layouts[0].first.throughput_unit if layouts else "samples/s")
    base = next((layout for layout in layouts if layout.scenario == 1 and layout.ok), None)
    baseline = () if base is None else tuple(t for r in base.runs if (t := r.tokens_per_second))
    return ChartedRate(unit=TOKENS_PER_S, tokens=True, baseline=baseline)


@attrs.frozen
class Bar:
    """One bar of the chart: the layout's instances stacked, its total and error bar."""

    label: str
    stack: list[tuple[str, float]]
    total: float
    error: tuple[float, float] | None  # (below, above) the total: interval or range; None: one run
    change: str | None
    interval: bool = False  # the error bar is a 95% interval (not a min-max range)

    @property
    def top(self) -> float:
        """The highest value the bar and its error bar reach."""
        return self.total + (self.error[1] if self.error is not None else 0.0)


def _stack_values(run: RunResult, rate: ChartedRate) -> list[tuple[str, float]]:
    """(profile, value) of each instance: measured (independent) or its share of the total by
    the samples it served (unified)."""
    if run.mode == "unified":
        total = rate.run_total(run) or 0.0
        served = sum(i.dispatched_samples or 0 for i in run.instances) or 1
        return [(i.profile, total * (i.dispatched_samples or 0) / served) for i in run.instances]
    return [(i.profile, rate.instance_value(run, i) or 0.0) for i in run.instances]


def _bar_label(layout: LayoutResult) -> str:
    head = f"S{layout.scenario}" if layout.scenario is not None else "layout"
    return f"{head}\n" + layout.layout.replace("+", "+\n")


def _mean_stack(layout: LayoutResult, total: float, rate: ChartedRate) -> list[tuple[str, float]]:
    """(profile, mean value over the runs) of each instance; in unified mode the instances'
    shares of the mean total (one LoadGen result, shared by samples served)."""
    if layout.first.mode == "unified":
        shares = _stack_values(layout.first, rate)
        if len(layout.runs) == 1:  # its own shares: rescaling by its own total adds rounding
            return shares
        whole = sum(v for _, v in shares) or 1.0
        return [(p, total * v / whole) for p, v in shares]
    return [
        (instance.profile, sum(values) / len(values) if values else 0.0)
        for index, instance in enumerate(layout.first.instances)
        for values in [rate.instance_values(layout, index)]
    ]


def chart_bar(layout: LayoutResult, rate: ChartedRate | None = None) -> Bar | None:
    """The bar of a layout: its instances' means stacked, the total's interval (or range) over
    its runs as the error bar (none for one run); None when nothing was measured. `rate`: what
    is charted (by default the layout's own, `charted_rate`)."""
    rate = charted_rate([layout]) if rate is None else rate
    total = rate.total(layout)
    if total is None:
        return None
    change = rate.change(layout)
    text = None if change is None else change.text().replace(" [", "\n[").replace("] ", "]\n")
    if text is not None:
        text = text.replace(" (range", "\n(range")
    return Bar(
        _bar_label(layout),
        _mean_stack(layout, total.mean, rate),
        total.mean,
        total.error_bar(),
        text,
        total.shows_interval,
    )


def gpu_bars(layout: LayoutResult, rate: ChartedRate | None = None) -> list[Bar]:
    """A whole system's bars: one per GPU, its instances' means stacked, its subtotal on top
    with its interval over the runs; [] for a layout on one GPU."""
    first = layout.first
    if not first.multi_gpu:
        return []
    rate = charted_rate([layout]) if rate is None else rate
    whole = chart_bar(layout, rate)
    values = (
        dict(zip((i.name for i in first.instances), (v for _, v in whole.stack))) if whole else {}
    )
    profile = {i.name: i.profile for i in first.instances}
    nodes = list(dict.fromkeys(g.node for g in first.gpus))
    bars = []
    for position, gpu in enumerate(first.gpu_rows()):
        stack = [(profile[n], values.get(n, 0.0)) for n in gpu.instances if n in profile]
        where = f"n{nodes.index(gpu.node)} " if len(nodes) > 1 else ""
        label = f"{where}GPU {gpu.index}\n" + gpu.layout.replace("+", "+\n")
        subtotal = rate.gpu_subtotal(layout, position)
        if subtotal is not None:
            bars.append(
                Bar(
                    label, stack, subtotal.mean, subtotal.error_bar(), None, subtotal.shows_interval
                )
            )
    return bars


def axis_top(bars: Sequence[Bar]) -> float:
    """Where the value axis ends: above the tallest bar and its error bar, but not beyond
    AXIS_MAX_OVER_BARS times the tallest bar (a wider error bar is cut there)."""
    finite = [bar for bar in bars if math.isfinite(bar.total)]  # a NaN read back draws no bar
    tallest = max((bar.total for bar in finite), default=0.0)
    if tallest <= 0:
        return 1.0
    reach = max((bar.top for bar in finite if math.isfinite(bar.top)), default=tallest)
    return min(reach * AXIS_HEADROOM, tallest * AXIS_MAX_OVER_BARS)


def chart_note(bars: Sequence[Bar], first: RunResult) -> str:
    """The line under the chart: what the totals are and what its error bars show."""
    note = SUM_LABEL if first.mode == "independent" else UNIFIED_LABEL
    if any(bar.error is not None and bar.interval for bar in bars):
        note += f"; {ERROR_BAR_NOTE}"
    if any(bar.error is not None and not bar.interval for bar in bars):
        note += f"; {RANGE_BAR_NOTE}"
    return note


@contextlib.contextmanager
def _literal_text() -> Iterator[None]:
    """Matplotlib settings under which every Text made (and drawn) is shown as given: no
    mathtext between '$' signs, no TeX."""
    import matplotlib

    with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
        yield


def figure_svg(draw: Callable[[Figure], None], width: float) -> str:
    """An SVG document of one figure drawn by `draw(figure)` (for embedding in HTML)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    with _literal_text():
        figure = Figure(figsize=(width, 5.0), layout="constrained")
        FigureCanvasAgg(figure)
        draw(figure)
        buffer = io.StringIO()
        figure.savefig(buffer, format="svg")
    text = buffer.getvalue()
    return text[text.index("<svg") :]  # inline in HTML: no XML prolog or DOCTYPE


def save_chart(
    bars: Sequence[Bar], first: RunResult, folder: Path, rate: ChartedRate | None = None
) -> tuple[Path, Path]:
    """Draw the stacked bar chart into folder/throughput.{png,svg}, each written atomically
    (a reader sees the old chart or the whole new one; modes follow the umask). `rate`: what
    the bars chart (by default `first`'s, `charted_rate`)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    with _literal_text():
        figure = Figure(figsize=(max(6.0, 1.3 * len(bars) + 2.0), 5.0), layout="constrained")
        FigureCanvasAgg(figure)
        draw_bars(
            figure.add_subplot(), bars, first, charted_rate([first]) if rate is None else rate
        )
        # under the axes, wrapped to the figure's width (about 15 characters an inch at 8 pt)
        width = int(figure.get_figwidth() * 15)
        figure.supxlabel(textwrap.fill(chart_note(bars, first), width), fontsize=8, color="#555555")
        png, svg = io.BytesIO(), io.BytesIO()
        figure.savefig(png, format="png", dpi=120)
        figure.savefig(svg, format="svg")
    return (
        atomic_write_bytes(folder / f"{CHART_NAME}.png", png.getvalue()),
        atomic_write_bytes(folder / f"{CHART_NAME}.svg", svg.getvalue()),
    )


def draw_bars(axes: Axes, bars: Sequence[Bar], first: RunResult, rate: ChartedRate) -> None:
    """The seed study's figure on `axes`: totals per layout stacked by instance, error bars;
    `rate` is what the bars chart (it names the value axis and the title)."""
    palette = [
        "#4C72B0",
        "#DD8452",
        "#55A868",
        "#C44E52",
        "#8172B3",
        "#937860",
        "#DA8BC3",
        "#8C8C8C",
    ]
    profiles = sorted({p for bar in bars for p, _ in bar.stack})
    colour = {p: palette[k % len(palette)] for k, p in enumerate(profiles)}
    labelled: set[str] = set()
    limit = axis_top(bars)
    lines = 1
    for x, bar in enumerate(bars):
        bottom = 0.0
        for profile, value in bar.stack:
            label = profile if profile not in labelled else None
            labelled.add(profile)
            axes.bar(x, value, bottom=bottom, color=colour[profile], edgecolor="white", label=label)
            bottom += value
        top = bar.total
        text = f"{bar.total:,.0f}"
        if bar.error is not None:
            below, above = bar.error
            cut = bar.total + above > limit
            above_drawn = limit - bar.total if cut else above
            axes.errorbar(
                x, bar.total, yerr=[[min(below, bar.total)], [above_drawn]],
                color="black", capsize=0 if cut else 4, linewidth=1,
            )  # fmt: skip
            top += above_drawn
            if cut:  # the bar's end is off the axis: say where it is
                text = f"error bar to {bar.total + above:,.0f}\n{text}"
        text += f"\n{bar.change}" if bar.change else ""
        lines = max(lines, text.count("\n") + 1)
        axes.annotate(text, (x, min(top, limit)), ha="center", va="bottom", fontsize=8)
    axes.set_xticks(range(len(bars)), [bar.label for bar in bars], fontsize=9)
    # the axis follows the bars (room above for the labels); below zero nothing can be
    top = limit * (1 + LABEL_LINE * lines)
    if math.isfinite(top):
        axes.set_ylim(0, top)
    else:  # totals near the float's limit: matplotlib's own scale
        axes.set_ylim(bottom=0)
    axes.set_ylabel(rate.unit, fontsize=9)
    emulated = " [emulated on CPU]" if first.emulated else ""
    axes.set_title(
        f"{first.benchmark} {first.loadgen_scenario}: total {rate.what} per MIG layout, "
        f"stacked by instance\n({first.gpu}{emulated})",
        fontsize=10,
    )
    axes.tick_params(axis="y", labelsize=9)
    axes.legend(title="MIG profile", fontsize=8, title_fontsize=9)
