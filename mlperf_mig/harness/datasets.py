"""Choosing the sample source of a task: synthetic samples, ImageNet or SQuAD."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from mlperf_mig.benchmark import Benchmark
from mlperf_mig.errors import DatasetError
from mlperf_mig.harness.samples import SampleSource, SyntheticSource

if TYPE_CHECKING:
    from mlperf_mig.harness.task import InstanceTask


def open_source(task: InstanceTask, benchmark: Benchmark) -> SampleSource:
    """The task's samples: its dataset when it names one, else deterministic synthetic samples.

    Synthetic libraries hold the official performance sample count unless `sample_count` says
    otherwise; a dataset is cut to its first `sample_count` samples when that is given.
    """
    if task.dataset is None:
        total = (
            task.sample_count
            if task.sample_count is not None
            else benchmark.performance_sample_count
        )
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
    """Raise DatasetError when `dataset` (and BERT's vocabulary) is missing or malformed.

    For the runner and the harness CLI to refuse bad input before any worker or LoadGen test
    starts: ImageNet's val_map.txt is parsed (lines, labels, images present); SQuAD's json and
    vocabulary are read as UTF-8 and the json parsed. Images and questions are read later.
    """
    if benchmark.name == "bert":
        from mlperf_mig.harness.squad import squad_paths

        path, vocab_path = squad_paths(dataset, vocab)
        _utf8_text(vocab_path, "BERT vocabulary")
        _json_document(path)
        return
    from mlperf_mig.harness.imagenet import VAL_MAP, read_val_map

    root = Path(dataset)
    if not root.is_dir():
        raise DatasetError(
            f"ImageNet folder {str(root)!r} does not exist; pass the validation folder holding "
            f"the images and {VAL_MAP}"
        )
    if not (root / VAL_MAP).is_file():
        raise DatasetError(
            f"ImageNet folder {str(root)!r} has no {VAL_MAP}; pass the validation folder holding "
            f"the images and {VAL_MAP}"
        )
    read_val_map(root)


def _utf8_text(path: Path, what: str) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise DatasetError(f"cannot read {what} {str(path)!r}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise DatasetError(
            f"{what} {str(path)!r} is not UTF-8 text (byte {exc.start}: {exc.reason}); pass the "
            "original UTF-8 file"
        ) from None


def _json_document(path: Path) -> None:
    """The SQuAD file must be UTF-8 JSON of a sane depth (Python's parser recurses)."""
    text = _utf8_text(path, "SQuAD file")
    try:
        json.loads(text)
    except RecursionError:
        raise DatasetError(
            f"SQuAD file {str(path)!r} is nested too deeply to be SQuAD v1.1; pass the dev-v1.1.json file"
        ) from None
    except ValueError as exc:
        raise DatasetError(f"SQuAD file {str(path)!r} is not JSON: {exc}") from None
