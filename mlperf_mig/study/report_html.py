"""One self-contained HTML report of a run, a repeated run or a sweep.

A single file: the figures are inline SVG (drawn with matplotlib; no scripts, no fonts, no
network access needed to view it), then the table of layouts, each layout's per-instance table
(with interference when isolation was run), the advisor's ranking and its validation when the
runs hold single-profile layouts, and every label (emulated, synthetic, summed, quick preset)
next to the numbers it qualifies; a note that several layouts share is shown once, above their
tables, naming the layouts it applies to. Figure 1 is the study's: total throughput per layout
stacked by instance, with error bars for repeated layouts; figure 2 is each layout's total over
layout 1's as a ratio on a log axis, with its 95% interval (its min-max range below 3 repeats).
For a workload that generates tokens both chart tokens/s (study/chart.py `ChartedRate`).

The file is written only where nothing is lost: never onto a file the report reads (a run's
results.json, repeats.json, sweep.json, or any other file of the folders reported, compared by
inode, so a hard link counts too), never onto what is not a regular file (a folder, a device
such as /dev/null, a FIFO, a socket, a symbolic link), never into a folder that does not exist
unless asked (`mkdir=True`, `--html-mkdir`); an earlier regular file is replaced atomically and
the caller is told. Earlier HTML reports inside the folders are the one kind of their files that
may be replaced.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import html
import logging
import os
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from mlperf_mig import registry
from mlperf_mig._io import atomic_write_text
from mlperf_mig._report import printable_lines
from mlperf_mig._table import html_table
from mlperf_mig.errors import MlperfMigError, OutputDirError
from mlperf_mig.runner.results import LayoutResult, RunResult
from mlperf_mig.study.advisor import Advice, advise_from, measurements_from
from mlperf_mig.study.chart import (
    PLOT_INSTALL,
    Bar,
    ChartedRate,
    chart_bar,
    charted_rate,
    draw_bars,
    figure_svg,
    gpu_bars,
)
from mlperf_mig.study.tokens import TOKENS_PER_J, generates_tokens
from mlperf_mig.telemetry.figure import draw_timeseries, series_for_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

log = logging.getLogger(__name__)

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:.5em 0;font-size:90%}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f0f0f0} td:first-child,th:first-child{text-align:left}
.label{background:#fff4d6;border-left:4px solid #e0a800;padding:4px 8px;margin:4px 0;font-size:90%}
pre{background:#f6f6f6;padding:8px;overflow:auto} svg{max-width:100%;height:auto}
"""


NO_TOKEN_BASELINE = (
    "Figure 2 (change against MIG scenario 1) not drawn: these layouts are compared in tokens/s, "
    "and MIG scenario 1's tokens/s are not among the runs reported (a run records its scenario "
    "1's samples/s only); report a sweep that includes scenario 1"
)


class Reported(Protocol):
    """What the HTML report reads of what it reports: a layout result (RunResult, RepeatedRun)
    or a sweep (study/sweep.py's SweepResult, which imports this module)."""

    @property
    def outdir(self) -> str: ...

    @property
    def layouts(self) -> tuple[LayoutResult, ...]: ...

    def title(self) -> str: ...

    def columns(self) -> Sequence[str]: ...

    def rows(self) -> Sequence[Mapping[str, Any]]: ...

    def notes(self) -> list[str]: ...


def _layouts(report: Reported) -> list[LayoutResult]:
    """One entry per layout: a sweep's layouts, or the layout result itself."""
    return list(report.layouts)


def _is_one_layout(report: Reported) -> bool:
    """Whether `report` is a layout result itself (no table of layouts above its sections)."""
    return len(report.layouts) == 1 and report.layouts[0] is report


def _labels(lines: Sequence[str]) -> str:
    return "".join(f'<div class="label">{html.escape(line)}</div>' for line in lines)


def _layout_name(layout: LayoutResult) -> str:
    return f"S{layout.scenario}" if layout.scenario else layout.layout


def change_points(
    layouts: Sequence[LayoutResult], rate: ChartedRate | None = None
) -> list[tuple[str, float, tuple[float, float] | None, bool]]:
    """(layout, ratio to layout 1, (low, high) ratios of its error bar or None, whether that
    bar is the 95% interval rather than the min-max range) of every layout with a change;
    `rate`: what is compared (`charted_rate`; None: the layouts' throughput)."""
    points = []
    for layout in layouts:
        change = layout.change if rate is None else rate.change(layout)
        if change is None or change.ratio <= 0:  # a log axis holds no zero
            continue
        bar = None
        if change.shows_interval:
            assert change.low is not None and change.high is not None
            bar = (1 + change.low, 1 + change.high)
        elif (
            change.range_low is not None
            and change.range_high is not None
            and max(change.sizes) >= 2
        ):
            bar = (1 + change.range_low, 1 + change.range_high)
        points.append((_layout_name(layout), change.ratio, bar, change.shows_interval))
    return points


def _change_figure(layouts: Sequence[LayoutResult], rate: ChartedRate) -> str | None:
    """Figure 2: each layout's total over layout 1's, a ratio on a log axis, with its interval
    (or range) as an error bar (None without any layout to compare)."""
    points = change_points(layouts, rate)
    if not points:
        return None

    def draw(figure: Figure) -> None:
        axes = figure.add_subplot()
        xs = range(len(points))
        ratios = [p[1] for p in points]
        axes.bar(
            xs,
            [r - 1 for r in ratios],
            bottom=1,
            color=["#55A868" if r >= 1 else "#C44E52" for r in ratios],
        )
        ends = [*ratios]
        for x, (_, ratio, bar, _interval) in zip(xs, points):
            if bar is not None and bar[0] > 0:
                axes.errorbar(
                    x,
                    ratio,
                    yerr=[[ratio - bar[0]], [bar[1] - ratio]],
                    color="black",
                    capsize=4,
                    linewidth=1,
                )
                ends += list(bar)
        axes.set_yscale("log")
        low, high = min([*ends, 1.0]), max([*ends, 1.0])
        axes.set_ylim(low / 1.15, high * 1.15)  # the axis follows the bars and their error bars
        axes.axhline(1, color="#555555", linewidth=0.8)
        axes.set_xticks(list(xs), [p[0] for p in points], fontsize=9)
        axes.tick_params(axis="y", labelsize=9)
        what = "tokens/s" if rate.tokens else "total"
        axes.set_ylabel(f"{what} / MIG scenario 1's {what} (log scale)", fontsize=9)
        kinds = {
            "95% interval (log scale, Welch)" if p[3] else "min-max range (under 3 repeats)"
            for p in points
            if p[2]
        }
        axes.set_title(
            "ratio to layout 1" + (f"; error bars: {', '.join(sorted(kinds))}" if kinds else ""),
            fontsize=10,
        )

    return figure_svg(draw, max(6.0, 0.9 * len(points) + 2.0))


def _figures(layouts: Sequence[LayoutResult]) -> str:
    rate = charted_rate(layouts)
    bars = [bar for bar in (chart_bar(layout, rate) for layout in layouts) if bar is not None]
    if not bars:
        return f"<p>No layout produced a {html.escape(rate.what)}: no figures.</p>"
    try:
        first = layouts[0].first
        one = figure_svg(
            lambda f: draw_bars(f.add_subplot(), bars, first, rate),
            max(6.0, 1.3 * len(bars) + 2.0),
        )
        two = _change_figure(layouts, rate)
    except ImportError:
        return (
            f"<p>Figures not drawn: matplotlib is not installed ({html.escape(PLOT_INSTALL)}).</p>"
        )
    what = html.escape(rate.what)
    parts = [f"<h2>Figure 1: total {what} per layout, stacked by instance</h2>{one}"]
    parts += _gpu_figures(layouts, rate)
    if two is not None:
        unit = f" ({what})" if rate.tokens else ""
        parts.append(f"<h2>Figure 2: change against MIG scenario 1{unit}</h2>{two}")
    elif rate.tokens and any(layout.change is not None for layout in layouts):
        parts.append(f"<p>{html.escape(NO_TOKEN_BASELINE)}</p>")
    energy = _energy_figure(layouts)
    if energy is not None:
        what = _work_per_joule(layouts)[0]
        parts.append(f"<h2>Figure 3: {what} per joule per layout</h2>{energy}")
    return "".join(parts) + _timeseries_figures(layouts)


def _bars_drawer(
    bars: Sequence[Bar], first: RunResult, rate: ChartedRate
) -> Callable[[Figure], None]:
    """What draws `bars` on a figure's one pair of axes."""

    def draw(figure: Figure) -> None:
        draw_bars(figure.add_subplot(), bars, first, rate)

    return draw


def _gpu_figures(layouts: Sequence[LayoutResult], rate: ChartedRate) -> list[str]:
    """Each whole system's throughput (or tokens/s) per GPU, stacked by instance (one figure
    per layout)."""
    figures = []
    for layout in layouts:
        bars = gpu_bars(layout, rate)
        if bars:
            first = layout.first
            svg = figure_svg(_bars_drawer(bars, first, rate), max(6.0, 1.1 * len(bars) + 2.0))
            figures.append(
                f"<h2>Per GPU: {html.escape(_layout_name(layout))}, stacked by instance</h2>{svg}"
            )
    return figures


def _work_per_joule(layouts: Sequence[LayoutResult]) -> tuple[str, str]:
    """('tokens', 'tokens/J') for a workload that generates tokens, else ('samples',
    'samples/J'): what Figure 3 counts per joule."""
    if any(generates_tokens(r) for layout in layouts for r in layout.runs):
        return "tokens", TOKENS_PER_J
    return "samples", "samples/J"


def _per_joule(layout: LayoutResult, tokens: bool) -> tuple[float, str] | None:
    """A layout's samples (or `tokens`) per joule, the mean over its repeats, and the energy it
    rests on."""
    runs = layout.runs
    found = [r.tokens_per_joule if tokens else r.samples_per_joule for r in runs]
    values = [v for v in found if v is not None]
    telemetry = runs[0].telemetry
    if not values or telemetry is None:
        return None
    return sum(values) / len(values), telemetry.energy_label


def _energy_figure(layouts: Sequence[LayoutResult]) -> str | None:
    """Samples (or tokens) per joule of every layout that measured energy (None when none did)."""
    what, label = _work_per_joule(layouts)
    points = [
        (_layout_name(layout), found)
        for layout in layouts
        if (found := _per_joule(layout, what == "tokens")) is not None
    ]
    if not points:
        return None
    rate = "total tokens/s" if what == "tokens" else "throughput"

    def draw(figure: Figure) -> None:
        axes = figure.add_subplot()
        axes.bar(range(len(points)), [p[1][0] for p in points], color="#4C72B0")
        axes.set_xticks(range(len(points)), [p[0] for p in points], fontsize=9)
        axes.set_ylabel(f"{what} per joule", fontsize=9)
        labels = sorted({p[1][1] for p in points})
        axes.set_title(
            f"{label}: {rate} / mean power over the timed window ({'; '.join(labels)})",
            fontsize=9,
        )

    return figure_svg(draw, max(6.0, 0.9 * len(points) + 2.0))


def _timeseries_figures(layouts: Sequence[LayoutResult]) -> str:
    """Per run (a repeated layout's first repeat): activity per instance and power over time,
    from its telemetry.csv, read back as untrusted input."""
    parts = []
    for layout in layouts:
        run = layout.first
        if run.telemetry is None or run.telemetry.csv is None:
            continue
        title = f"<h2>Time series of {html.escape(_layout_name(layout))}: {html.escape(run.layout)}</h2>"
        try:
            data = series_for_figure(run.outdir, run.telemetry)
        except MlperfMigError as exc:
            parts.append(f"{title}<p>Not drawn: {html.escape(str(exc))}</p>")
            continue
        parts.append(title + figure_svg(functools.partial(draw_timeseries, data=data), 9.0))
    return "".join(parts)


def _layout_parts(layout: LayoutResult) -> tuple[str, str, list[str]]:
    """(title, per-instance table, notes) of one layout's section; a note reads as the sweep's
    notes do (no "note: " in front), so that one said there is not said again."""
    table = html_table(layout.rows(), layout.columns())
    return layout.title(), table, [line.removeprefix("note: ") for line in layout.notes()]


def shared_notes(
    names: Sequence[str], notes: Sequence[Sequence[str]], shown: Iterable[str] = ()
) -> tuple[list[str], list[list[str]]]:
    """Notes said once: those of two or more layouts (named, unless all share it) and the rest
    of each layout's own. `shown` are notes the page already showed (dropped everywhere)."""
    already = set(shown)
    holders: dict[str, list[str]] = {}
    for name, lines in zip(names, notes, strict=True):
        for line in dict.fromkeys(lines):
            holders.setdefault(line, []).append(name)
    shared = []
    for line, who in holders.items():
        if line in already or len(who) < 2:
            continue
        shared.append(line if len(who) == len(names) else f"{line} (layouts {', '.join(who)})")
    own = [
        [line for line in lines if line not in already and len(holders[line]) < 2]
        for lines in notes
    ]
    return shared, own


def _layout_sections(layouts: Sequence[LayoutResult], shown: Iterable[str] = ()) -> str:
    parts = [_layout_parts(layout) for layout in layouts]
    shared, own = shared_notes(
        [_layout_name(layout) for layout in layouts], [p[2] for p in parts], shown
    )
    head = f"<p>Notes for the layouts below:</p>{_labels(shared)}" if shared else ""
    return head + "".join(
        f"<h3>{html.escape(title)}</h3>{table}{_labels(notes)}"
        for (title, table, _), notes in zip(parts, own)
    )


def _advisor_section(layouts: Sequence[LayoutResult], advice: Advice | None) -> str:
    if advice is None:
        try:
            gpu = registry.default_catalog().get(layouts[0].first.gpu)
            advice = advise_from(measurements_from(layouts, gpu.compute_slices))
        except MlperfMigError as exc:
            return f"<h2>Advisor</h2><p>No advice from these runs: {html.escape(str(exc))}</p>"
    validation = (
        html_table(advice.validation_rows(), advice.VALIDATION_COLUMNS)
        if advice.validation
        else "<p>No multi-instance layout to validate against.</p>"
    )
    return (
        f"<h2>Advisor: every valid layout, ranked</h2><p>{html.escape(advice.title())}</p>"
        f"{html_table(advice.rows(), advice.columns())}{_labels(advice.notes())}"
        f"<h3>Validation: multi-instance layouts predicted from the single-profile layouts</h3>{validation}"
        f"<h3>mig-parted config of the winner</h3><pre>{html.escape(advice.mig_parted)}</pre>"
    )


def report_html(report: Reported, *, advice: Advice | None = None) -> str:
    """The HTML text of the report of a layout result (RunResult, RepeatedRun) or a sweep."""
    layouts = _layouts(report)
    title = report.title()
    stamp = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    parts = [
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
        f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>",
        f"<p>mlperf-mig report, written {stamp}, from {html.escape(str(report.outdir))}</p>",
        _figures(layouts),
    ]
    shown: list[str] = []
    if not _is_one_layout(report):
        shown = report.notes()
        parts.append(f"<h2>Layouts</h2>{html_table(report.rows(), report.columns())}")
        parts.append(_labels(shown))
    parts.append("<h2>Per-instance results and isolation</h2>")
    parts.append(_layout_sections(layouts, shown))
    parts.append(_advisor_section(layouts, advice))
    parts.append("</body></html>\n")
    # every string read back (a device, an error, a note, a GPU name, also those matplotlib put
    # into the SVG) reaches the page with its control characters escaped (_text.printable)
    return printable_lines("".join(parts))


@attrs.frozen
class HtmlWritten:
    """Where the report was written, whether it replaced an earlier regular file, its text."""

    path: Path
    replaced: bool
    text: str = attrs.field(default="", repr=False)


_HTML_SUFFIXES = (".html", ".htm")
_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
)


def _report_folders(report: Reported, sources: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The folders a report was read from: `sources`, its own, each layout's, each run's
    (repeats and isolation runs included); those that exist, resolved, once each."""
    folders = [Path(source) for source in sources] + [Path(report.outdir)]
    for layout in _layouts(report):
        folders.append(Path(layout.outdir))
        folders += [Path(r.outdir) for r in [*layout.runs, *layout.alone_runs()]]
    return list(dict.fromkeys(folder.resolve() for folder in folders if folder.is_dir()))


def _read_files(folders: Iterable[Path]) -> set[tuple[int, int]]:
    """(device, inode) of every file below `folders` (no link followed) except earlier HTML
    reports: the results, indexes, logs and charts the report stands on."""
    found: set[tuple[int, int]] = set()
    for folder in folders:
        for root, _dirs, files in os.walk(folder, followlinks=False):
            for name in files:
                if name.lower().endswith(_HTML_SUFFIXES):
                    continue
                with contextlib.suppress(FileNotFoundError):  # removed meanwhile: not read
                    info = os.lstat(os.path.join(root, name))
                    if stat.S_ISREG(info.st_mode):
                        found.add((info.st_dev, info.st_ino))
    return found


def check_html_target(
    report: Reported,
    path: str | os.PathLike[str],
    *,
    sources: Iterable[str | os.PathLike[str]] = (),
    mkdir: bool = False,
) -> HtmlWritten:
    """Where the HTML report of `report` may go, or OutputDirError in one line saying why not.

    `sources`: folders the report was read from besides those its results name (the folder
    passed to `mlperf-mig report`). Nothing is written here; with `mkdir` the missing folders
    of `path` are left for the write to create.
    """
    text = os.fspath(path)
    if not text:
        raise OutputDirError(
            "the HTML report's file name is empty; pass a file name such as report.html"
        )
    target = Path(text)
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise OutputDirError(
            f"cannot write the HTML report to {text!r}: {exc.strerror or exc}; pass another file name"
        ) from None
    if info is None:
        _check_folder(target, text, mkdir)
    elif stat.S_ISLNK(info.st_mode):
        raise OutputDirError(
            f"{text!r} is a symbolic link; the HTML report is not written through links (nor "
            "over them): pass the path of a regular file or a new name"
        )
    elif not stat.S_ISREG(info.st_mode):
        kind = next((what for test, what in _KINDS if test(info.st_mode)), "not a regular file")
        hint = f", e.g. {os.path.join(text, 'report.html')!r}" if kind == "a folder" else ""
        raise OutputDirError(
            f"{text!r} is {kind}; the HTML report is written only to a regular file or a new "
            f"name: pass a file name{hint}"
        )
    folders = _report_folders(report, sources)
    if info is not None and (info.st_dev, info.st_ino) in _read_files(folders):
        raise OutputDirError(
            f"{text!r} is one of the files this report reads (its results, indexes, logs or "
            "charts); writing the HTML there would destroy them: pass a new file name such as "
            "report.html"
        )
    parent = target.parent.resolve() if target.parent.is_dir() else None
    inside = parent is not None and any(parent == f or f in parent.parents for f in folders)
    if inside and not target.name.lower().endswith(_HTML_SUFFIXES):
        raise OutputDirError(
            f"{text!r} is inside a folder this report reads, where only files named *.html are "
            "written (any other name could be taken for the run's own files): name it "
            "report.html or write it elsewhere"
        )
    return HtmlWritten(target, replaced=info is not None)


def _check_folder(target: Path, text: str, mkdir: bool) -> None:
    folder = target.parent
    if folder.is_dir():
        return
    if os.path.lexists(folder):
        raise OutputDirError(
            f"{str(folder)!r} (the folder of the HTML report {text!r}) is not a folder; pass a "
            "file name in an existing folder"
        )
    if not mkdir:
        raise OutputDirError(
            f"the folder {str(folder)!r} of the HTML report {text!r} does not exist; create it "
            "first, or pass --html-mkdir (mkdir=True) to create it"
        )


def write_html(
    report: Reported,
    path: str | os.PathLike[str],
    *,
    advice: Advice | None = None,
    sources: Iterable[str | os.PathLike[str]] = (),
    mkdir: bool = False,
) -> HtmlWritten:
    """Check `path` (`check_html_target`), then write the report there atomically (readers see
    the old file or the whole new one; the mode follows the umask)."""
    written = check_html_target(report, path, sources=sources, mkdir=mkdir)
    text = report_html(report, advice=advice)
    atomic_write_text(written.path, text)
    log.info("HTML report written to %s", written.path)
    return attrs.evolve(written, text=text)


def write_report(
    report: Reported, path: str | os.PathLike[str] | None = None, *, advice: Advice | None = None
) -> str:
    """`report_html(report)`, written to `path` when given by `write_html`'s rules (a replaced
    file is logged as a warning); returns the text."""
    if path is None:
        return report_html(report, advice=advice)
    written = write_html(report, path, advice=advice)
    if written.replaced:
        log.warning("replaced %s with the HTML report", written.path)
    return written.text
