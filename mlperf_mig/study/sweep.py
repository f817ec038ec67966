"""Sweeps: several MIG layouts one after the other, the table of all of them and the chart.

The chart is the seed study's figure: one bar per layout with the total throughput, stacked by
instance. It is drawn with matplotlib's object API on an Agg canvas (no pyplot, so a notebook's
backend is left alone) and saved as PNG and SVG. matplotlib is optional: without it the sweep
still runs and says that the chart was not drawn.

sweep.json names its layouts' folders and chart files relative to the sweep's folder, so a sweep
can be copied or moved and resumed or reported where it is; read back, every field is checked
(folders inside the sweep, no symlink on the way, profiles plain names, capacities finite
positive numbers) and a wrong one is refused with one line naming the file and the field.
"""

from __future__ import annotations

import base64
import logging
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO

import attrs

from mlperf_mig._io import (
    atomic_write_json,
    claim_folder,
    finite_number,
    inside,
    read_small_text,
    safe_name,
)
from mlperf_mig._report import Report
from mlperf_mig.errors import OutputDirError, SettingsError
from mlperf_mig.placement.deployment import ScenarioSpec
from mlperf_mig.runner.execute import execute
from mlperf_mig.runner.options import RunOptions, check_scenario
from mlperf_mig.runner.plan import RunPlan, default_outdir, make_plan
from mlperf_mig.runner.results import (
    BY_DESIGN_LABEL,
    EMULATED_LABEL,
    PER_GPU_COLUMN,
    RESULTS_FILE,
    SUM_LABEL,
    UNIFIED_LABEL,
    LayoutResult,
    RunResult,
)
from mlperf_mig.runner.stats import CHANGE_NOTE, FEW_REPEATS_NOTE
from mlperf_mig.study.capacity_cache import plan_capacities, with_cached_capacity
from mlperf_mig.study.chart import PLOT_INSTALL, chart_bar, charted_rate, save_chart
from mlperf_mig.study.overall import OverallProgress, rounds_of
from mlperf_mig.study.repeats import (
    FOLDER_KINDS,
    REPEATS_FILE,
    REUSED_COLUMN,
    SWEEP_FILE,
    IndexFile,
    RepeatedRun,
    check_study_folders,
    refuse_other_kinds,
    relative_to,
    resumable,
    run_study,
    study_plans,
)
from mlperf_mig.study.report_html import write_report
from mlperf_mig.study.tokens import (
    TOKEN_LATENCIES,
    TOKENS_PER_J,
    TOKENS_PER_S,
    generates_tokens,
    run_token_values,
)

log = logging.getLogger(__name__)
CHART_SVG_LIMIT = 4_000_000  # bytes of the chart shown inline in a notebook
SINGLE_RUN_CHANGE_NOTE = (
    "vs MIG scenario 1 compares one run of each layout: the noise it rests on is not measured (a "
    "short run on a busy machine moves by tens of percent), so no change is called significant; "
    "--repeats 3 measures it and gives intervals"
)
_COLUMNS = (
    "MIG scenario",
    "layout",
    "partitioning",
    "instances",
    "total",
    "unit",
    "all valid",
    "vs MIG scenario 1",
)
_STUDY_COLUMNS = (
    "MIG scenario",
    "layout",
    "partitioning",
    "instances",
    "repeats",
    "total",
    "min-max",
    "unit",
    "all valid",
    "vs MIG scenario 1",
)


# a generative workload's columns: the layout's tokens/s and its worst p99 TTFT and TPOT
SWEEP_TOKEN_COLUMNS = (TOKENS_PER_S, *TOKEN_LATENCIES)
TOKENS_NOTE = (
    "tokens/s: the layout's total (Offline: generated; else completed tokens per second); TTFT "
    "and TPOT p99 ms: the worst instance's (unified: the one LoadGen's); tokens/J: total tokens/s "
    "/ mean power over the common timed window"
)


def layout_folder(scenario: ScenarioSpec) -> str:
    """`scenario-7` for a study layout, `layout-3x2g.20gb-1g.10gb` for anything else."""
    if isinstance(scenario, int):
        return f"scenario-{scenario}"
    text = scenario if isinstance(scenario, str) else "+".join(scenario)
    return "layout-" + re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-")


@attrs.frozen(kw_only=True)
class SweepResult(Report):
    """The runs of a sweep, the table of all layouts and the chart files. With repeats or
    isolation, `studies` holds one RepeatedRun per layout and `runs` every repeat of them all."""

    text_note_prefix = "note: "

    runs: tuple[RunResult, ...] = attrs.field(converter=tuple[RunResult, ...])
    outdir: str
    studies: tuple[RepeatedRun, ...] = attrs.field(default=(), converter=tuple[RepeatedRun, ...])
    # Server sweeps: profile -> cached Server capacity (QPS) of `mlperf-mig capacity`
    capacities: dict[str, float] = attrs.field(factory=dict)
    resumed: tuple[str, ...] = attrs.field(default=(), converter=tuple[str, ...])
    chart_png: str | None = None
    chart_svg: str | None = None
    chart_note: str | None = None

    @property
    def ok(self) -> bool:
        return all(run.ok for run in self.runs) and all(study.ok for study in self.studies)

    @property
    def layouts(self) -> tuple[LayoutResult, ...]:
        """One entry per layout: its study when repeated, else its run."""
        return self.studies or self.runs

    def capacity_of(self, layout: LayoutResult) -> float | None:
        """The layout's Server capacity: the sum of its instances' (None: one is not known)."""
        values = [self.capacities.get(i.profile) for i in layout.first.instances]
        known = [v for v in values if v is not None]
        return sum(known) if values and len(known) == len(values) else None

    def rows(self) -> list[dict[str, Any]]:
        rows = [
            layout.summary_row() | ({} if self.studies else run_token_values(layout.first))
            for layout in self.layouts
        ]
        if self.capacities:
            for row, layout in zip(rows, self.layouts):
                row["capacity QPS (sum)"] = self.capacity_of(layout)
        return rows

    def columns(self) -> tuple[str, ...]:
        columns: tuple[str, ...] = _STUDY_COLUMNS if self.studies else _COLUMNS
        if any(run.multi_gpu for run in self.runs):  # each GPU's subtotal
            columns = (*columns, PER_GPU_COLUMN)
        rows = self.rows()
        tokens = [c for c in SWEEP_TOKEN_COLUMNS if any(r.get(c) is not None for r in rows)]
        at = columns.index("unit") + 1
        columns = (*columns[:at], *tokens, *columns[at:])
        if any(run.samples_per_joule is not None for run in self.runs):  # telemetry measured energy
            columns = (*columns, "samples/J")
        if any(run.tokens_per_joule is not None for run in self.runs):
            columns = (*columns, TOKENS_PER_J)
        if any(study.reused_targets() for study in self.studies):
            columns = (*columns, REUSED_COLUMN)
        return (*columns, "capacity QPS (sum)") if self.capacities else columns

    def notes(self) -> list[str]:
        notes = []
        if any(run.mode == "independent" for run in self.runs):
            notes.append(f"totals of independent runs: {SUM_LABEL}")
        if any(run.mode == "unified" for run in self.runs):
            notes.append(f"unified totals: {UNIFIED_LABEL}")
        if any(run.emulated for run in self.runs):
            notes.append(EMULATED_LABEL)
        if any(run.invalid_by_design for run in self.runs):
            notes.append(BY_DESIGN_LABEL)
        labels = sorted(
            {
                run.telemetry.energy_label
                for run in self.runs
                if run.telemetry is not None and run.samples_per_joule is not None
            }
        )
        if labels:
            notes.append(
                f"samples/J: total throughput / mean power over the common timed window ({'; '.join(labels)})"
            )
        if any(generates_tokens(run) for run in self.runs):
            notes.append(TOKENS_NOTE)
        if self.studies:
            notes.append(self.studies[0].interval_note())
            notes.append(f"vs MIG scenario 1: the mean total over scenario 1's; {CHANGE_NOTE}")
            if any(study.isolation for study in self.studies):
                notes.append("isolation: see each layout's report (mlperf-mig report LAYOUT_DIR)")
            if any(study.few_repeats() for study in self.studies):
                notes.append(FEW_REPEATS_NOTE)
            reused = [note for study in self.studies if (note := study.reuse_note())]
            if reused:
                notes.append(
                    f"{REUSED_COLUMN}: instance runs whose target an earlier run calibrated; no "
                    "interval is computed over them (see each layout's report)"
                )
        elif any(run.change_vs_baseline is not None for run in self.runs):
            notes.append(SINGLE_RUN_CHANGE_NOTE)
        if self.capacities:
            known = ", ".join(f"{p} {q:,.1f}" for p, q in sorted(self.capacities.items()))
            notes.append(
                f"capacity QPS (sum): the instances' cached Server capacities added up ({known}); "
                "a shared inference service's measure; '-' where a profile has none (mlperf-mig capacity)"
            )
        if self.resumed:
            notes.append(f"resumed from disk: {', '.join(self.resumed)}")
        if self.chart_png:
            notes.append(f"chart: {self.chart_png} and {self.chart_svg}")
        elif self.chart_note:
            notes.append(self.chart_note)
        return notes

    def title(self) -> str:
        if not self.runs:
            return "empty sweep"
        first = self.runs[0]
        where = f"{first.gpu} [emulated]" if first.emulated else first.gpu
        return (
            f"sweep: {first.benchmark} {first.loadgen_scenario} (LoadGen scenario) on {where}, "
            f"{first.mode} mode, backend {first.backend}"
        )

    def _html_extra(self) -> str:
        """The chart inline (the SVG as an image: a file read back runs no script), or ''."""
        if not self.chart_svg:
            return ""
        try:
            svg = read_small_text(Path(self.chart_svg), limit=CHART_SVG_LIMIT)
        except SettingsError as exc:
            log.warning("the sweep's chart %s is not shown: %s", self.chart_svg, exc)
            return ""
        data = base64.b64encode(svg.encode("utf-8")).decode("ascii")
        return f"<img alt='throughput per layout' src='data:image/svg+xml;base64,{data}'>"

    def to_html(self, path: str | os.PathLike[str] | None = None) -> str:
        """One self-contained HTML report of the sweep (written to `path` when given)."""
        return write_report(self, path)

    def to_dict(self) -> dict[str, Any]:
        """sweep.json: every folder and file relative to the sweep's folder (a copy names no
        path of the original)."""

        def relative(path: str | None, what: str) -> str | None:
            return None if path is None else relative_to(self.outdir, path, what)

        return {
            "runs": [relative_to(self.outdir, run.outdir, "the layout's run") for run in self.runs],
            "studies": [
                relative_to(self.outdir, study.outdir, "the layout's study")
                for study in self.studies
            ],
            "capacities": dict(self.capacities),
            "resumed": list(self.resumed),
            "chart_png": relative(self.chart_png, "the chart"),
            "chart_svg": relative(self.chart_svg, "the chart"),
            "chart_note": self.chart_note,
        }

    def save(self) -> Path:
        return atomic_write_json(Path(self.outdir) / SWEEP_FILE, self.to_dict())

    @classmethod
    def load(cls, folder: str | os.PathLike[str]) -> SweepResult:
        """Read a sweep folder: sweep.json and the results.json of every layout in it, each
        field checked (see the module's docstring); `outdir` is the folder it was read from."""
        path = Path(folder)
        index = IndexFile.read(path, SWEEP_FILE, "mlperf-mig sweep")
        subfolders = index.folders("runs")
        study_folders = index.folders("studies", required=False)
        capacities = _capacities(index)
        resumed = index.strings("resumed")
        charts = {}
        for field in ("chart_png", "chart_svg"):
            name = index.text(field)
            charts[field] = None if name is None else str(index.inside(field, name))
        chart_note = index.text("chart_note")
        return cls(
            runs=[index.run("runs", sub) for sub in subfolders],
            studies=[RepeatedRun.load(sub) for sub in study_folders],
            capacities=capacities,
            outdir=str(path),
            resumed=resumed,
            chart_note=chart_note,
            **charts,
        )


def _capacities(index: IndexFile) -> dict[str, float]:
    """sweep.json's capacities: plain profile names, finite positive QPS."""
    capacities = {}
    for profile, qps in index.mapping("capacities").items():
        name = safe_name(profile, "the profile of a capacity", index.path)
        if not finite_number(qps) or qps <= 0:
            raise index.wrong(
                f"capacities[{profile!r}]", qps, "a finite positive number of queries per second"
            )
        capacities[name] = float(qps)
    return capacities


def load_report(folder: str | os.PathLike[str]) -> LayoutResult | SweepResult:
    """A run folder (results.json), a repeated run's folder (repeats.json) or a sweep folder
    (sweep.json), each run checked to be one that can be reported (instances, numeric
    throughputs). A folder that holds more than one of them is refused: which one it is
    cannot be told."""
    path = Path(folder)
    present = [
        name for name in FOLDER_KINDS if (path / name).exists() or (path / name).is_symlink()
    ]
    if len(present) > 1:
        kinds = " and ".join(f"{FOLDER_KINDS[n]} ({n})" for n in present)
        raise OutputDirError(
            f"{str(path)!r} holds {kinds}; one was written into the other's folder, so which one "
            "to report cannot be told: move the files of the one you do not want into another folder"
        )
    if (path / RESULTS_FILE).exists():
        run = RunResult.load(inside(path, RESULTS_FILE, "the run's results"))
        return _reportable(attrs.evolve(run, outdir=str(path)), path)
    if (path / REPEATS_FILE).exists():
        study = RepeatedRun.load(path)
        for run in [*study.runs, *(r for runs in study.alone.values() for r in runs)]:
            _reportable(run, Path(run.outdir))
        return study
    if (path / SWEEP_FILE).exists():
        sweep = SweepResult.load(path)
        for run in sweep.runs:
            _reportable(run, Path(run.outdir))
        return sweep
    raise OutputDirError(
        f"{str(path)!r} holds none of {RESULTS_FILE}, {REPEATS_FILE} or {SWEEP_FILE}; pass a "
        "folder written by mlperf-mig run or sweep"
    )


def _reportable(run: RunResult, folder: Path) -> RunResult:
    """Refuse a results.json that would be reported wrongly: no instances, or a throughput that
    is not a number (a hand-edited or foreign file)."""
    where = str(folder / RESULTS_FILE)
    if not run.instances:
        raise OutputDirError(
            f"{where!r} lists no instances; pass a run folder written by mlperf-mig run"
        )
    results = [run.layout_result, *(i.performance for i in run.instances)]
    for result in results:
        value = None if result is None else result.throughput
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise OutputDirError(
                f"{where!r} holds the throughput {value!r}, not a number; pass a run folder "
                "written by mlperf-mig run"
            )
    return run


# --- chart -------------------------------------------------------------------------------------------
def _chart(result: SweepResult, folder: Path) -> tuple[str | None, str | None, str | None]:
    rate = charted_rate(result.layouts)
    bars = [bar for bar in (chart_bar(layout, rate) for layout in result.layouts) if bar]
    if not bars:
        return None, None, f"no layout produced a {rate.what}: no chart"
    try:
        png, svg = save_chart(bars, result.runs[0], folder, rate)
    except ImportError:
        note = f"chart not drawn: matplotlib is not installed ({PLOT_INSTALL})"
        log.warning(note)
        return None, None, note
    return str(png), str(svg), None


# --- the sweep ---------------------------------------------------------------------------------------
def _with_baseline(runs: list[RunResult]) -> list[RunResult]:
    """Every run gets the change against the sweep's own scenario 1, when it has one."""
    base = next((r for r in runs if r.scenario == 1 and r.ok), None)
    if base is None or base.total_throughput is None:
        return runs
    updated = []
    for run in runs:
        run = attrs.evolve(
            run, baseline_throughput=base.total_throughput, baseline_source=base.outdir
        )
        run.save()
        updated.append(run)
    return updated


def _studies_with_baseline(studies: list[RepeatedRun]) -> list[RepeatedRun]:
    """Every study gets the totals of the sweep's own scenario 1, when it has one."""
    base = next((s for s in studies if s.scenario == 1 and s.ok), None)
    if base is None:
        return studies
    updated = [study.with_baseline(base) for study in studies]
    for study in updated:
        study.save()
    return updated


def run_sweep(
    scenarios: Iterable[ScenarioSpec],
    options: RunOptions,
    *,
    outdir: str | os.PathLike[str] | None,
    resume: bool,
    chart: bool,
    progress: bool | TextIO,
) -> SweepResult:
    """See mlperf_mig.sweep: every layout is planned (and duplicates refused) before any runs."""
    folder = Path(outdir).absolute() if outdir is not None else default_outdir("sweep")
    plans = plan_sweep(scenarios, options, folder)
    check_sweep_folders(folder, plans, options)
    jobs = [
        job for plan in plans for _, job in study_plans(plan, options.repeats, options.isolation)
    ]
    bar = OverallProgress(sum(rounds_of(j) for j in jobs), progress=progress, description="sweep")
    try:
        with claim_folder(folder, refuse=None):
            refuse_other_kinds(folder, SWEEP_FILE, "a sweep")
            capacities = {
                p: q for plan in plans for p, q in plan_capacities(plan, options.cache_dir).items()
            }
            if options.studied:
                return _run_studies(
                    plans, options, folder, resume, chart, progress, bar, capacities
                )
            runs: list[RunResult] = []
            resumed: list[str] = []
            for plan in plans:
                sub = Path(plan.outdir)
                previous = resumable(sub, plan) if resume else None
                if previous is not None:
                    log.info("resuming %s from %s", plan.layout, sub)
                    resumed.append(sub.name)
                    runs.append(previous)
                    bar.skip(plan)
                    continue
                with claim_folder(sub, refuse=None):
                    runs.append(bar.run(plan.layout, plan, lambda p: execute(p, progress=progress)))
            runs = _with_baseline(runs)
            return _finish(
                SweepResult(runs=runs, outdir=str(folder), resumed=resumed, capacities=capacities),
                chart,
            )
    finally:
        bar.close()


def check_sweep_folders(folder: Path, plans: Sequence[RunPlan], options: RunOptions) -> None:
    """Before the first layout runs: the sweep's folder holds no single run or study, and each
    layout's folder is a plain folder inside it (no symlink) holding only its own kind."""
    refuse_other_kinds(folder, SWEEP_FILE, "a sweep")
    for plan in plans:
        sub = inside(folder, os.path.relpath(plan.outdir, folder), "a layout's folder")
        if options.studied:
            refuse_other_kinds(sub, REPEATS_FILE, "a layout's study")
            check_study_folders(sub, study_plans(plan, options.repeats, options.isolation))
        else:
            inside(sub, RESULTS_FILE, "a layout's results")
            refuse_other_kinds(sub, RESULTS_FILE, "a layout's run")


def _run_studies(
    plans: Sequence[RunPlan],
    options: RunOptions,
    folder: Path,
    resume: bool,
    chart: bool,
    progress: bool | TextIO,
    bar: OverallProgress,
    capacities: dict[str, float],
) -> SweepResult:
    studies = [
        run_study(
            plan,
            repeats=options.repeats,
            isolation=options.isolation,
            execute=lambda p: execute(p, progress=progress),
            bar=bar,
            resume=resume,
        )
        for plan in plans
    ]
    studies = _studies_with_baseline(studies)
    resumed = [f"{Path(s.outdir).name}/{sub}" for s in studies for sub in s.resumed]
    runs = [run for study in studies for run in study.runs]
    return _finish(
        SweepResult(
            runs=runs, studies=studies, outdir=str(folder), resumed=resumed, capacities=capacities
        ),
        chart,
    )


def _finish(result: SweepResult, chart: bool) -> SweepResult:
    """Draw the chart (when asked) and write sweep.json."""
    if chart:
        png, svg, note = _chart(result, Path(result.outdir))
        result = attrs.evolve(result, chart_png=png, chart_svg=svg, chart_note=note)
    result.save()
    return result


def plan_sweep(
    scenarios: Iterable[ScenarioSpec], options: RunOptions, folder: Path
) -> list[RunPlan]:
    """The plan of every layout of a sweep, in order; an empty list, a layout that does not
    resolve and a layout given twice are refused here, before the first one runs."""
    if isinstance(scenarios, (str, bytes)) or not isinstance(scenarios, Iterable):
        raise SettingsError(
            f"scenarios must be a list of MIG layouts (study numbers 1-8 or layout strings), got "
            f"{type(scenarios).__name__} {scenarios!r}"
        )
    specs = [check_scenario("scenarios item", s) for s in scenarios]
    if not specs:
        raise SettingsError(
            "scenarios is empty; pass study layouts such as range(1, 9) or [1, 6, 7]"
        )
    plans: list[RunPlan] = []
    seen: dict[str, ScenarioSpec] = {}
    for spec in specs:
        layout_options = attrs.evolve(
            options, scenario=spec, outdir=str(folder / layout_folder(spec))
        )
        _, plan = with_cached_capacity(layout_options, make_plan(layout_options))
        if plan.layout in seen:
            raise SettingsError(
                f"scenarios lists the MIG layout {plan.layout} twice ({seen[plan.layout]!r} and "
                f"{spec!r}); each layout runs once, drop the repeat"
            )
        seen[plan.layout] = spec
        plans.append(plan)
    return plans
