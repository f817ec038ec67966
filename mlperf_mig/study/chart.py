"""The seed study's figure: total throughput per MIG layout, stacked by instance.

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
from typing import TYPE_CHECKING

import attrs

from mlperf_mig._io import atomic_write_bytes
from mlperf_mig.runner.results import SUM_LABEL, UNIFIED_LABEL, LayoutResult, RunResult

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


def _stack_values(run: RunResult) -> list[tuple[str, float]]:
    """(profile, throughput) of each instance: measured (independent) or served share (unified)."""
    if run.mode == "unified":
        total = run.total_throughput or 0.0
        served = sum(i.dispatched_samples or 0 for i in run.instances) or 1
        return [(i.profile, total * (i.dispatched_samples or 0) / served) for i in run.instances]
    return [(i.profile, i.throughput or 0.0) for i in run.instances]


def _bar_label(layout: LayoutResult) -> str:
    head = f"S{layout.scenario}" if layout.scenario is not None else "layout"
    return f"{head}\n" + layout.layout.replace("+", "+\n")


def _mean_stack(layout: LayoutResult, total: float) -> list[tuple[str, float]]:
    """(profile, mean throughput over the runs) of each instance; in unified mode the
    instances' shares of the mean total (one LoadGen result, shared by samples served)."""
    if layout.first.mode == "unified":
        shares = _stack_values(layout.first)
        if len(layout.runs) == 1:  # its own shares: rescaling by its own total adds rounding
            return shares
        whole = sum(v for _, v in shares) or 1.0
        return [(p, total * v / whole) for p, v in shares]
    return [
        (instance.profile, sum(values) / len(values) if values else 0.0)
        for index, instance in enumerate(layout.first.instances)
        for values in [layout.instance_values(index, "throughput")]
    ]


def chart_bar(layout: LayoutResult) -> Bar | None:
    """The bar of a layout: its instances' means stacked, the total's interval (or range) over
    its runs as the error bar (none for one run); None when nothing was measured."""
    total = layout.total
    if total is None:
        return None
    change = layout.change
    text = None if change is None else change.text().replace(" [", "\n[").replace("] ", "]\n")
    if text is not None:
        text = text.replace(" (range", "\n(range")
    return Bar(
        _bar_label(layout),
        _mean_stack(layout, total.mean),
        total.mean,
        total.error_bar(),
        text,
        total.shows_interval,
    )


def gpu_bars(layout: LayoutResult) -> list[Bar]:
    """A whole system's bars: one per GPU, its instances' means stacked, its subtotal on top
    with its interval over the runs; [] for a layout on one GPU."""
    first = layout.first
    if not first.multi_gpu:
        return []
    whole = chart_bar(layout)
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
        subtotal = layout.gpu_subtotals(position)
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


def save_chart(bars: Sequence[Bar], first: RunResult, folder: Path) -> tuple[Path, Path]:
    """Draw the stacked bar chart into folder/throughput.{png,svg}, each written atomically
    (a reader sees the old chart or the whole new one; modes follow the umask)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    with _literal_text():
        figure = Figure(figsize=(max(6.0, 1.3 * len(bars) + 2.0), 5.0), layout="constrained")
        FigureCanvasAgg(figure)
        draw_bars(figure.add_subplot(), bars, first)
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


def draw_bars(axes: Axes, bars: Sequence[Bar], first: RunResult) -> None:
    """The seed study's figure on `axes`: totals per layout stacked by instance, error bars."""
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
    axes.set_ylabel(first.throughput_unit, fontsize=9)
    emulated = " [emulated on CPU]" if first.emulated else ""
    axes.set_title(
        f"{first.benchmark} {first.loadgen_scenario}: total throughput per MIG layout, "
        f"stacked by instance\n({first.gpu}{emulated})",
        fontsize=10,
    )
    axes.tick_params(axis="y", labelsize=9)
    axes.legend(title="MIG profile", fontsize=8, title_fontsize=9)
