"""Combining run folders from several hosts into one RunResult (`mlperf-mig aggregate`).

In the seed study every MIG instance was its own VM: each host runs its instance(s) with
`mlperf-mig run` and the folders are combined afterwards. The result is a sum of independent
LoadGen runs, labelled as such; runs that are not comparable (other benchmark, LoadGen scenario,
GPU, partitioning or mode) are refused with the folder that differs.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from mlperf_mig._io import ensure_writable_dir
from mlperf_mig.errors import SettingsError
from mlperf_mig.placement.deployment import instance_name
from mlperf_mig.runner.results import InstanceRun, RunResult

if TYPE_CHECKING:
    from mlperf_mig.registry.model import Gpu, Layout

log = logging.getLogger(__name__)

_MUST_AGREE = ("benchmark", "loadgen_scenario", "gpu", "partitioning", "backend", "preset")


def _check_comparable(runs: Sequence[RunResult]) -> None:
    first = runs[0]
    for run in runs[1:]:
        for field in _MUST_AGREE:
            if getattr(run, field) != getattr(first, field):
                raise SettingsError(
                    f"cannot aggregate: {run.outdir} has {field} {getattr(run, field)!r} but "
                    f"{first.outdir} has {getattr(first, field)!r}; combine runs of the same settings"
                )
    unified = [run.outdir for run in runs if run.mode != "independent"]
    if unified:
        raise SettingsError(
            f"cannot aggregate unified-mode runs ({', '.join(unified)}): their single LoadGen result "
            "already covers the whole layout; aggregate independent runs"
        )


def _check_distinct(runs: Sequence[RunResult]) -> None:
    """The same run twice (one folder passed twice, or a copy of it) would be counted twice."""
    seen: dict[tuple[object, ...], str] = {}
    for run in runs:
        key = (run.outdir, run.started_at, tuple(run.hosts))
        if key in seen:
            raise SettingsError(
                f"cannot aggregate: {run.outdir} (started {run.started_at} on "
                f"{', '.join(run.hosts) or 'an unknown host'}) is passed twice; its instances "
                "would be counted twice"
            )
        seen[key] = run.outdir


def combine_runs(
    runs: Sequence[RunResult], outdir: str | os.PathLike[str] | None = None
) -> RunResult:
    """One RunResult whose instances are those of `runs`, renumbered, with their hosts kept."""
    from mlperf_mig import registry

    if not runs:
        raise SettingsError("aggregate needs at least one run folder")
    _check_comparable(runs)
    _check_distinct(runs)
    if len({run.settings_key for run in runs}) > 1:
        log.warning("the runs used different LoadGen settings; the sum is indicative only")
    instances: list[InstanceRun] = []
    for run in runs:
        for instance in run.instances:
            index = len(instances)
            instances.append(
                attrs.evolve(instance, index=index, name=instance_name(index, instance.profile))
            )
    first = runs[0]
    gpu = registry.default_catalog().get(first.gpu)
    layout = registry.parse_layout(gpu, [i.profile for i in instances])
    registry.solve_placements(layout)  # the hosts' instances must form one layout of one GPU
    folder = str(Path(outdir).absolute()) if outdir is not None else ""
    combined = attrs.evolve(
        first,
        layout=str(layout),
        system_id=registry.system_id(layout),
        scenario=_study_number(layout, gpu),
        outdir=folder,
        settings_key=first.settings_key if len({r.settings_key for r in runs}) == 1 else "mixed",
        started_at=min(run.started_at for run in runs),
        duration_s=max(run.duration_s for run in runs),
        instances=instances,
        interrupted=any(run.interrupted for run in runs),
        hosts=sorted({host for run in runs for host in (run.hosts or ("",)) if host}),
        baseline_throughput=None,
        baseline_source=None,
    )
    if outdir is not None:
        combined.save(ensure_writable_dir(folder))
    return combined


def _study_number(layout: Layout, gpu: Gpu) -> int | None:
    """The study's layout number when the combined layout is one of the eight."""
    from mlperf_mig import registry

    for number in range(1, 9):
        try:
            if str(registry.study_layout(number, gpu)) == str(layout):
                return number
        except ValueError:
            continue
    return None
