"""The notebook API: `run`, `plan`, `sweep` and `aggregate` (exported as `mlperf_mig.*`).

`run`, `plan` and `sweep` list every option with its type as a keyword parameter, so that help(),
a notebook's tab completion and a type checker see them (a generated `**options` signature is
invisible to the last two, which read the source). Each option is declared once, in RunOptions
(runner/options.py): their docstrings' option lists are made from the declarations, a test checks
their parameters against them, and each call builds one `RunOptions`, which checks every option
once. This module is the public face over runner/ (one layout), study/ (repeats and sweeps) and
cluster/ (Ray sessions): the only place that imports all three.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, TextIO, TypeVar

from mlperf_mig._io import check_output_path, claim_folder
from mlperf_mig.cluster.handover import cluster_run
from mlperf_mig.errors import SettingsError
from mlperf_mig.placement.deployment import ScenarioSpec
from mlperf_mig.runner.options import (
    RUN_OPTIONS,
    RunOptions,
    check_flag,
    check_outdir,
    check_progress,
    options_doc,
    run_options,
)
from mlperf_mig.runner.plan import RunPlan, make_plan
from mlperf_mig.runner.results import RESULTS_FILE, LayoutResult, RunResult
from mlperf_mig.runner.supervisor import stop_signals
from mlperf_mig.study.api import advise as study_advise
from mlperf_mig.study.capacity import capacity as study_capacity
from mlperf_mig.study.capacity_cache import with_cached_capacity
from mlperf_mig.study.measure import Measure
from mlperf_mig.study.repeats import REPEATS_FILE, SWEEP_FILE, refuse_other_kinds

if TYPE_CHECKING:
    from mlperf_mig.registry.nvml_state import NvmlModule
    from mlperf_mig.study.repeats import RepeatedRun
    from mlperf_mig.study.sweep import SweepResult

PathArg = str | os.PathLike[str]
_R = TypeVar("_R")


def plan(
    scenario: ScenarioSpec = 7,
    benchmark: str = "resnet50",
    loadgen_scenario: str = "Offline",
    backend: str = "auto",
    preset: str = "quick",
    mode: str = "independent",
    gpu: str | None = None,
    outdir: PathArg | None = None,
    *,
    variant: str = "full",
    precision: str | None = None,
    shared: bool = False,
    emulate: bool = False,
    accuracy: bool = True,
    compliance: bool = False,
    telemetry: bool = True,
    settings: Mapping[str, float] | None = None,
    user_conf: PathArg | None = None,
    dataset: PathArg | None = None,
    vocab: PathArg | None = None,
    sample_count: int | None = None,
    batch_size: int | None = None,
    model_path: PathArg | None = None,
    cache_dir: PathArg | None = None,
    timeout_s: float | None = None,
    worker_entry: str | None = None,
    nvml_source: NvmlModule | None = None,
    cpus: Sequence[int] | None = None,
    cluster: str | None = None,
    gpu_group: Sequence[str] | str | None = None,
    gpus: Sequence[int] | str | None = None,
    layouts: Mapping[int, ScenarioSpec] | None = None,
    gpu_count: int | None = None,
    repeats: int = 1,
    isolation: bool = False,
) -> RunPlan:
    """What `run` would do with the same arguments: instances, profiles, devices, engines,
    settings and the output folder. Starts nothing and writes nothing. With repeats or
    isolation this is the plan of the layout, which each repeat (in `outdir`/repeat-<k>) and
    each alone run (one instance of it) follows. A Server target taken from the capacity cache
    is shown as such.
    """
    options = run_options(locals())
    with cluster_run(options.cluster):  # placing on a cluster reads its nodes' inventories
        return with_cached_capacity(options, make_plan(options))[1]


def run(
    scenario: ScenarioSpec = 7,
    benchmark: str = "resnet50",
    loadgen_scenario: str = "Offline",
    backend: str = "auto",
    preset: str = "quick",
    mode: str = "independent",
    gpu: str | None = None,
    outdir: PathArg | None = None,
    *,
    variant: str = "full",
    precision: str | None = None,
    shared: bool = False,
    emulate: bool = False,
    accuracy: bool = True,
    compliance: bool = False,
    telemetry: bool = True,
    settings: Mapping[str, float] | None = None,
    user_conf: PathArg | None = None,
    dataset: PathArg | None = None,
    vocab: PathArg | None = None,
    sample_count: int | None = None,
    batch_size: int | None = None,
    model_path: PathArg | None = None,
    cache_dir: PathArg | None = None,
    timeout_s: float | None = None,
    worker_entry: str | None = None,
    nvml_source: NvmlModule | None = None,
    cpus: Sequence[int] | None = None,
    cluster: str | None = None,
    gpu_group: Sequence[str] | str | None = None,
    gpus: Sequence[int] | str | None = None,
    layouts: Mapping[int, ScenarioSpec] | None = None,
    gpu_count: int | None = None,
    repeats: int = 1,
    isolation: bool = False,
    progress: bool | TextIO = True,
    baseline: RunResult | PathArg | None = None,
) -> LayoutResult:
    """Run MLPerf `benchmark` on every instance of a MIG layout at once and return its layout
    result: the RunResult of the run, or with repeats or isolation a RepeatedRun of them.

    Works from notebooks; the workers are fresh processes from multiprocessing's fork server,
    which imports the main module as 'spawn' does, so a plain script must call it under
    `if __name__ == "__main__":`. Ctrl-C,
    SIGTERM and SIGHUP stop the workers, write what finished and raise KeyboardInterrupt.

    progress:         live per-instance progress on stderr (or on the given stream), and an
                      overall bar over the repeats.
    baseline:         a scenario-1 RunResult or its folder; by default one is looked for next to
                      `outdir`.
    """
    from mlperf_mig.runner.execute import execute

    check_progress(progress)
    options = run_options(locals())
    if options.outdir is not None:  # before a cluster starts; checked again once planned
        keep = REPEATS_FILE if options.studied else RESULTS_FILE
        refuse_other_kinds(options.outdir, keep, "a study" if options.studied else "a single run")
    # one cluster session from planning to the last round, torn down on SIGTERM too
    with stop_signals(), cluster_run(options.cluster):
        the_plan = make_plan(options)
        options, the_plan = with_cached_capacity(options, the_plan)
        base = check_baseline(baseline, the_plan)
        if options.studied:
            return _study(the_plan, options, progress=progress, baseline=base)
        # a run into a study's or a sweep's folder would hide it from report and advise
        refuse_other_kinds(the_plan.outdir, RESULTS_FILE, "a single run")
        with stop_signals(), claim_folder(the_plan.outdir, refuse=RESULTS_FILE, what="a run"):
            refuse_other_kinds(the_plan.outdir, RESULTS_FILE, "a single run")
            return execute(the_plan, progress=progress, baseline=base)


def _study(
    the_plan: RunPlan, options: RunOptions, *, progress: bool | TextIO, baseline: RunResult | None
) -> RepeatedRun:
    """The repeats and alone runs of one layout under one overall progress bar."""
    from mlperf_mig.runner.execute import execute
    from mlperf_mig.study.overall import OverallProgress, rounds_of
    from mlperf_mig.study.repeats import find_study_baseline, run_study, study_plans

    jobs = study_plans(the_plan, options.repeats, options.isolation)
    bar = OverallProgress(
        sum(rounds_of(j) for _, j in jobs), progress=progress, description=the_plan.layout
    )
    try:
        with stop_signals():
            return run_study(
                the_plan,
                repeats=options.repeats,
                isolation=options.isolation,
                execute=lambda p: execute(p, progress=progress),
                bar=bar,
                baseline=baseline if baseline is not None else find_study_baseline(the_plan),
            )
    finally:
        bar.close()


def check_baseline(baseline: object, the_plan: RunPlan) -> RunResult | None:
    """The baseline run, read and compared with the plan before anything runs."""
    if baseline is None:
        return None
    if isinstance(baseline, (str, os.PathLike)):
        baseline = RunResult.load(baseline)
    if not isinstance(baseline, RunResult):
        raise SettingsError(
            f"baseline must be a RunResult, a run folder or None, got {type(baseline).__name__}"
        )
    if (baseline.benchmark, baseline.loadgen_scenario) != (
        the_plan.benchmark.name,
        the_plan.mlperf_scenario,
    ):
        raise SettingsError(
            f"baseline is {baseline.benchmark} {baseline.loadgen_scenario} but this run is "
            f"{the_plan.benchmark} {the_plan.mlperf_scenario} (LoadGen scenario); pass a baseline "
            "of the same"
        )
    return baseline


def sweep(
    scenarios: Iterable[ScenarioSpec] = range(1, 9),
    benchmark: str = "resnet50",
    loadgen_scenario: str = "Offline",
    outdir: PathArg | None = None,
    *,
    backend: str = "auto",
    preset: str = "quick",
    mode: str = "independent",
    gpu: str | None = None,
    variant: str = "full",
    precision: str | None = None,
    shared: bool = False,
    emulate: bool = False,
    accuracy: bool = True,
    compliance: bool = False,
    telemetry: bool = True,
    settings: Mapping[str, float] | None = None,
    user_conf: PathArg | None = None,
    dataset: PathArg | None = None,
    vocab: PathArg | None = None,
    sample_count: int | None = None,
    batch_size: int | None = None,
    model_path: PathArg | None = None,
    cache_dir: PathArg | None = None,
    timeout_s: float | None = None,
    worker_entry: str | None = None,
    nvml_source: NvmlModule | None = None,
    cpus: Sequence[int] | None = None,
    cluster: str | None = None,
    gpu_group: Sequence[str] | str | None = None,
    gpus: Sequence[int] | str | None = None,
    layouts: Mapping[int, ScenarioSpec] | None = None,
    gpu_count: int | None = None,
    repeats: int = 1,
    isolation: bool = False,
    resume: bool = True,
    chart: bool = True,
    progress: bool | TextIO = True,
) -> SweepResult:
    """Run every layout of `scenarios` and return a SweepResult with the table and the chart.

    Each layout runs in `<outdir>/scenario-<n>/` (or `layout-<spec>/`); with `resume` a layout
    (or, with repeats, a repeat) whose results.json is there with the same settings is not run
    again. Every layout is resolved, and duplicates refused, before the first one runs. With
    `repeats` > 1 or `isolation` each layout is a study as in `run` (repeat-<k>/ and
    alone-<profile>/ folders) and the table shows means with 95% intervals; the chart draws
    error bars. One overall progress bar covers every run. The other arguments are those of `run`.
    """
    from mlperf_mig.study.sweep import run_sweep

    values = {k: v for k, v in locals().items() if k not in ("scenarios", "outdir")}
    check_flag("resume", resume)
    check_flag("chart", chart)
    check_progress(progress)
    check_outdir("outdir", outdir)
    if outdir is not None:
        refuse_other_kinds(outdir, SWEEP_FILE, "a sweep")  # before a cluster starts
    with stop_signals(), cluster_run(values["cluster"]):
        return run_sweep(
            scenarios,
            run_options(values),
            outdir=outdir,
            resume=resume,
            chart=chart,
            progress=progress,
        )


def aggregate(folders: Sequence[PathArg], outdir: PathArg | None = None) -> RunResult:
    """Combine run folders from several hosts (one instance per VM, as in the seed study) into
    one RunResult; written to `outdir`/results.json when given. An `outdir` that already holds a
    run is refused, as `run` does."""
    from pathlib import Path

    from mlperf_mig.runner.combine import combine_runs

    if outdir is None:
        return combine_runs([RunResult.load(f) for f in folders])
    check_output_path("aggregate --outdir", os.fspath(outdir))
    if any(Path(outdir).resolve() == Path(f).resolve() for f in folders):
        raise SettingsError(
            f"aggregate --outdir {str(outdir)!r} is one of the run folders; its results.json would "
            "be overwritten; pass a new folder"
        )
    runs = [RunResult.load(f) for f in folders]
    refuse_other_kinds(outdir, RESULTS_FILE, "an aggregated run")
    with claim_folder(outdir, refuse=RESULTS_FILE, what="a run"):
        refuse_other_kinds(outdir, RESULTS_FILE, "an aggregated run")
        return combine_runs(runs, outdir=outdir)


plan.__doc__ = f"{plan.__doc__}{options_doc(RUN_OPTIONS)}\n"
run.__doc__ = f"{run.__doc__}{options_doc(RUN_OPTIONS)}\n"
sweep.__doc__ = f"{sweep.__doc__}{options_doc(RUN_OPTIONS, skip=('scenario', 'outdir'))}\n"


def _measure() -> Measure:
    """The public run, plan and sweep as study/ calls them, looked up when called (so that one
    replaced in this module, as the tests do, is the one study/ gets)."""
    return Measure(
        run=lambda *args, **kwargs: run(*args, **kwargs),
        plan=lambda *args, **kwargs: plan(*args, **kwargs),
        sweep=lambda *args, **kwargs: sweep(*args, **kwargs),
    )


def _measuring(study_function: Callable[..., _R]) -> Callable[..., _R]:
    """`study_function` with this module's run, plan and sweep handed in as its `measure`: the
    public form of a study that measures (its signature and docstring, less `measure`)."""

    @functools.wraps(study_function)
    def public(*args: object, **kwargs: object) -> _R:
        return study_function(*args, measure=_measure(), **kwargs)

    signature = inspect.signature(study_function)
    kept = [p for p in signature.parameters.values() if p.name != "measure"]
    public.__signature__ = signature.replace(parameters=kept)  # type: ignore[attr-defined]  # read by inspect and help()
    return public


capacity = _measuring(study_capacity)
advise = _measuring(study_advise)
