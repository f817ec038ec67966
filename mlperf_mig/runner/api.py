"""The notebook API: `run`, `plan`, `sweep` and `aggregate` (exported as `mlperf_mig.*`).

`plan` is plan.make_plan: the same arguments as `run`, resolved without running anything.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO

from mlperf_mig.errors import OutputDirError, SettingsError
from mlperf_mig.runner.placement import ScenarioSpec
from mlperf_mig.runner.plan import make_plan as plan
from mlperf_mig.runner.results import RESULTS_FILE, RunResult


def run(
    scenario: ScenarioSpec = 7,
    benchmark: str = "resnet50",
    loadgen_scenario: str = "Offline",
    backend: str = "auto",
    preset: str = "quick",
    mode: str = "independent",
    gpu: str | None = None,
    outdir: str | os.PathLike[str] | None = None,
    *,
    progress: bool | TextIO = True,
    baseline: RunResult | str | os.PathLike[str] | None = None,
    **options: Any,
) -> RunResult:
    """Run MLPerf `benchmark` on every instance of a MIG layout at once and return the RunResult.

    Works from notebooks; the workers are spawned processes, so a plain script must call it
    under `if __name__ == "__main__":` (Python's rule for the 'spawn' start method).

    scenario:         the seed study's MIG layout 1-8, a layout string ("3x2g.20gb+1g.10gb"), a
                      list of profile names, or a system ID. Not the LoadGen scenario:
    loadgen_scenario: Offline, Server, SingleStream or MultiStream.
    backend:          "auto" (TensorRT with a GPU, else ONNX Runtime), "tensorrt", "onnxruntime",
                      "null" (no model: measures the harness).
    preset:           "quick" (short, measured targets) or "submission" (official rules).
    mode:             "independent" (one LoadGen per instance; the sum is an engineering metric)
                      or "unified" (one LoadGen dispatching to all instances).
    gpu:              GPU to emulate without a GPU (default A100-SXM4-80GB), or which live GPU.
    outdir:           run folder (default: a new timestamped folder in the current directory).
    progress:         live per-instance progress on stderr (or on the given stream).
    baseline:         a scenario-1 RunResult or its folder; by default one is looked for next to
                      `outdir`.
    options:          variant ("full"/"tiny"), precision, shared (time-share a GPU without MIG),
                      emulate (CPU partitions even with a GPU), accuracy (run the accuracy test
                      too, default True), settings ({user.conf key: value}), user_conf, dataset,
                      vocab, sample_count, batch_size, model_path, cache_dir, timeout_s (per LoadGen test),
                      worker_target ("module:function", for tests), nvml_source, cpus.
    """
    from mlperf_mig.runner.execute import execute

    the_plan = plan(
        scenario, benchmark, loadgen_scenario, backend, preset, mode, gpu, outdir, **options
    )
    if (Path(the_plan.outdir) / RESULTS_FILE).exists():
        raise OutputDirError(
            f"{the_plan.outdir!r} already holds a run (results.json) that this one would overwrite; "
            "pass a new --outdir, or move that run away first"
        )
    return execute(the_plan, progress=progress, baseline=baseline)


def sweep(
    scenarios: Iterable[ScenarioSpec] = range(1, 9),
    benchmark: str = "resnet50",
    loadgen_scenario: str = "Offline",
    outdir: str | os.PathLike[str] | None = None,
    *,
    resume: bool = True,
    chart: bool = True,
    progress: bool | TextIO = True,
    **options: Any,
) -> Any:
    """Run every layout of `scenarios` and return a SweepResult with the table and the chart.

    Each layout runs in `<outdir>/scenario-<n>/` (or `layout-<spec>/`); with `resume` a layout
    whose results.json is there with the same settings is not run again. The other arguments are
    those of `run`.
    """
    from mlperf_mig.runner.sweep import run_sweep

    return run_sweep(
        scenarios,
        benchmark=benchmark,
        loadgen_scenario=loadgen_scenario,
        outdir=outdir,
        resume=resume,
        chart=chart,
        progress=progress,
        **options,
    )


def aggregate(
    folders: Sequence[str | os.PathLike[str]], outdir: str | os.PathLike[str] | None = None
) -> RunResult:
    """Combine run folders from several hosts (one instance per VM, as in the seed study) into
    one RunResult; written to `outdir`/results.json when given."""
    from mlperf_mig.runner.combine import combine_runs

    if outdir is not None and any(Path(outdir).resolve() == Path(f).resolve() for f in folders):
        raise SettingsError(
            f"aggregate --outdir {str(outdir)!r} is one of the run folders; its results.json would "
            "be overwritten; pass a new folder"
        )
    return combine_runs([RunResult.load(f) for f in folders], outdir=outdir)

