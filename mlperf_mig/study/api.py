"""`advise` (exported as `mlperf_mig.advise`): which valid layout of a GPU to create."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

import attrs

from mlperf_mig.errors import SettingsError
from mlperf_mig.runner.results import LayoutResult
from mlperf_mig.study.advisor import (
    Advice,
    advise_from,
    check_constraints,
    check_energy_objective,
    check_ranking,
    measurements_from,
)
from mlperf_mig.study.measure import Measure
from mlperf_mig.study.tokens import TOKENS_PER_S
from mlperf_mig.workloads import get_workload

if TYPE_CHECKING:
    from mlperf_mig.study.sweep import SweepResult

PathArg = str | os.PathLike[str]


def advise(
    benchmark: str | None = None,
    gpu: str | None = None,
    objective: str = "throughput",
    *,
    from_dir: PathArg | None = None,
    min_instances: int | None = None,
    max_instances: int | None = None,
    profiles_allowed: Sequence[str] | str | None = None,
    max_p99_ms: float | None = None,
    top: int = 5,
    outdir: PathArg | None = None,
    variant: str = "full",
    backend: str = "auto",
    preset: str = "quick",
    repeats: int = 1,
    progress: bool | TextIO = True,
    measure: Measure,
) -> Advice:
    """Rank every valid MIG layout of the GPU for `benchmark` by `objective`.

    from_dir:         a sweep, repeated-run or run folder to read the per-profile measurements
                      from; without it the study's layouts 1-8 are measured first (a sweep into
                      `outdir` with `variant`, `backend`, `preset`, `repeats`, no accuracy run).
    objective:        "throughput" (total), "instances", "capacity" (Server), "p99" (worst),
                      "samples_per_joule", or "tokens_per_joule" for a workload that generates
                      tokens (from the runs' telemetry: GPU board energy, not wall power;
                      per-instance power is an estimate).
    min_instances, max_instances, profiles_allowed, max_p99_ms: constraints on the layouts.
    top:              how many layouts the table shows.
    The validation (each measured multi-instance layout predicted from the single-profile ones,
    with the error in percent) comes with the answer. Emulated measurements give emulated advice.
    """
    from mlperf_mig import registry

    check_ranking(objective, top)  # before a measuring sweep, not after it
    if from_dir is None:
        workload = get_workload(benchmark or "resnet50")
        unit = TOKENS_PER_S if workload.generates_tokens else "samples/s"
        check_energy_objective(objective, unit, workload.name)
    report: LayoutResult | SweepResult
    if from_dir is None:
        report = measure.sweep(
            range(1, 9),
            benchmark=benchmark or "resnet50",
            gpu=gpu,
            outdir=outdir,
            variant=variant,
            backend=backend,
            preset=preset,
            repeats=repeats,
            accuracy=False,
            progress=progress,
        )
    else:
        from mlperf_mig.study.sweep import load_report

        report = load_report(from_dir)
    layouts, systems = _per_gpu(list(report.layouts), gpu)
    first = layouts[0].first
    # a sweep measured here ran `benchmark`: only runs read from a folder can be of another
    wanted = get_workload(benchmark).name if benchmark is not None else None  # "bert-99" is bert
    if from_dir is not None and wanted is not None and wanted != first.benchmark:
        raise SettingsError(
            f"{os.fspath(from_dir)!r} holds {first.benchmark} runs, not {benchmark}; pass a folder of "
            f"{benchmark} runs or leave benchmark out"
        )
    if gpu is not None and registry.default_catalog().get(gpu).name != first.gpu:
        raise SettingsError(
            f"the runs were made on {first.gpu}, not {gpu}; the advisor predicts the GPU it has "
            "measurements of: leave gpu out or measure that GPU"
        )
    board = registry.default_catalog().get(first.gpu)
    constraints = check_constraints(
        board,
        min_instances=min_instances,
        max_instances=max_instances,
        profiles_allowed=profiles_allowed,
        max_p99_ms=max_p99_ms,
    )
    measurements = measurements_from(layouts, board.compute_slices, report.capacities)
    advice = advise_from(measurements, objective=objective, constraints=constraints, top=top)
    if not systems:
        return advice
    return attrs.evolve(advice, labels=(*advice.labels, _per_gpu_label(systems, advice)))


def _per_gpu(
    layouts: list[LayoutResult], gpu: str | None
) -> tuple[list[LayoutResult], list[LayoutResult]]:
    """Runs of whole systems split into one run per GPU (the advisor ranks layouts of one GPU),
    keeping the GPUs of the model asked for (else of the first GPU's); the systems split."""
    from mlperf_mig import registry

    systems = [layout for layout in layouts if layout.first.multi_gpu]
    if not systems:
        return layouts, []
    split = [part for layout in layouts for part in layout.gpu_runs()]
    model = registry.default_catalog().get(gpu).name if gpu is not None else split[0].gpu
    return [run for run in split if run.gpu == model], systems


def _per_gpu_label(systems: list[LayoutResult], advice: Advice) -> str:
    """What advice from a whole system means for the system."""
    counts = sorted({len(layout.first.gpus) for layout in systems})
    each = ", ".join(
        f"{layout.layout}: "
        + "; ".join(
            f"GPU {g.index} {g.subtotal:,.0f}"
            for g in layout.first.gpu_rows()
            if g.subtotal is not None
        )
        for layout in systems
    )
    return (
        f"measured on whole systems ({each}); each GPU's instances are read as a run of its layout, "
        f"and the advice is per GPU: a system of {'/'.join(map(str, counts))} GPUs carrying the "
        f"winner on each predicts about {counts[-1]} x {advice.winner.total:,.0f} {advice.unit}"
    )
