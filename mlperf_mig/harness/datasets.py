"""Choosing the sample source of a task: synthetic samples, ImageNet or SQuAD."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from mlperf_mig.benchmark import Benchmark
from mlperf_mig.errors import DatasetError
from mlperf_mig.harness.samples import SampleSource, SyntheticSource

if TYPE_CHECKING:
    from mlperf_mig.harness.instance import InstanceTask


def open_source(task: InstanceTask, benchmark: Benchmark) -> SampleSource:
    """The task's samples: its dataset when it names one, else deterministic synthetic samples.

    Synthetic libraries hold the official performance sample count unless `sample_count` says
    otherwise; a dataset is cut to its first `sample_count` samples when that is given.
    """
    if task.dataset is None:
        total = task.sample_count if task.sample_count is not None else benchmark.performance_sample_count
        return SyntheticSource(
            benchmark=benchmark,
            total_count=total,
            performance_count=min(total, benchmark.performance_sample_count),
            seed=task.seed,
        )
    if benchmark.name == "bert":
        from mlperf_mig.harness.squad import SquadSource

        return SquadSource.open(task.dataset, vocab=task.vocab, limit=task.sample_count)
    from mlperf_mig.harness.imagenet import ImageNetSource

    return ImageNetSource.open(task.dataset, limit=task.sample_count)


def check_dataset(benchmark: Benchmark, dataset: str, vocab: str | None = None) -> None:
    """Raise DatasetError when `dataset` (and BERT's vocabulary) is not where it should be.

    A cheap check of the paths, for the runner to refuse bad input before it starts workers;
    the files themselves are read when the source is opened.
    """
    if benchmark.name == "bert":
        from mlperf_mig.harness.squad import squad_paths

        squad_paths(dataset, vocab)
        return
    from mlperf_mig.harness.imagenet import VAL_MAP

    root = Path(dataset)
    if not (root / VAL_MAP).is_file():
        raise DatasetError(
            f"ImageNet folder {str(root)!r} has no {VAL_MAP}; pass the validation folder holding "
            f"the images and {VAL_MAP}"
        )
