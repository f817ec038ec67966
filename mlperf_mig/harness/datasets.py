"""Choosing the sample source of a task: the workload's dataset or its synthetic samples."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mlperf_mig.workloads.samples import SampleSource, SyntheticSource

if TYPE_CHECKING:
    from mlperf_mig.harness.task import InstanceTask


def open_source(task: InstanceTask) -> SampleSource:
    """The task's samples: its dataset when it names one, else deterministic synthetic samples.

    Synthetic libraries hold the official performance sample count unless `sample_count` says
    otherwise; a dataset is cut to its first `sample_count` samples when that is given.
    """
    workload = task.benchmark
    if task.dataset is None:
        total = (
            task.sample_count
            if task.sample_count is not None
            else workload.performance_sample_count
        )
        return SyntheticSource(
            benchmark=workload,
            total_count=total,
            performance_count=min(total, workload.performance_sample_count),
            seed=task.seed,
        )
    return workload.open_dataset(task.dataset, vocab=task.vocab, limit=task.sample_count)
