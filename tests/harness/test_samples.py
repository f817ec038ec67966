"""The sample library and the synthetic source."""

from __future__ import annotations

import numpy as np
import pytest

from mlperf_mig.errors import DatasetError
from mlperf_mig.harness import SampleLibrary
from mlperf_mig.harness.samples import input_layouts
from mlperf_mig.workloads.bert import BERT
from mlperf_mig.workloads.resnet50 import RESNET50
from mlperf_mig.workloads.samples import SyntheticSource


def test_library_uses_the_buffer_it_is_given() -> None:
    """A library built on an existing buffer loads into it and gathers from it."""
    shared = np.zeros((4, 3, 224, 224), dtype=np.float32)
    library = SampleLibrary({"input_tensor:0": shared}, total_count=10)
    source = SyntheticSource(benchmark=RESNET50, total_count=10, performance_count=4)
    library.load([7, 2], source)
    assert shared[0].any() and shared[1].any() and not shared[2].any()
    batch = library.gather(library.slots([2, 7]))
    assert np.array_equal(batch["input_tensor:0"][0], shared[1])


def test_consecutive_rows_are_gathered_as_a_view() -> None:
    """Consecutive rows come back as a view of the library, scattered rows as a copy."""
    library = SampleLibrary.allocate(input_layouts(BERT), capacity=4, total_count=4)
    buffer = library.buffers["input_ids"]
    assert np.shares_memory(library.gather(np.array([1, 2]))["input_ids"], buffer)
    assert not np.shares_memory(library.gather(np.array([2, 1]))["input_ids"], buffer)


def test_synthetic_samples_are_deterministic() -> None:
    """The same (seed, index) gives the same sample; BERT samples are well formed."""
    source = SyntheticSource(benchmark=BERT, total_count=5, performance_count=5)
    first = {layout.name: np.zeros((2, *layout.shape), np.int64) for layout in input_layouts(BERT)}
    second = {name: np.zeros_like(a) for name, a in first.items()}
    source.fill([3, 4], first)
    source.fill([3, 4], second)
    assert all(np.array_equal(first[n], second[n]) for n in first)
    assert first["input_ids"][0, 0] == 101 and set(np.unique(first["input_mask"])) == {0, 1}


def test_image_samples_differ_and_repeat() -> None:
    """Every ResNet50 sample index gets its own bytes in the pixel range, the same ones each
    time and in any process (a fresh source)."""
    indices = [0, 1, 2, 49_999, 777]
    layout = input_layouts(RESNET50)[0]
    first = {layout.name: np.zeros((len(indices), *layout.shape), np.float32)}
    second = {layout.name: np.zeros_like(first[layout.name])}
    SyntheticSource(benchmark=RESNET50, total_count=50_000, performance_count=5).fill(
        indices, first
    )
    SyntheticSource(benchmark=RESNET50, total_count=50_000, performance_count=5).fill(
        indices[::-1], second
    )
    samples = first[layout.name]
    assert np.array_equal(samples, second[layout.name][::-1])
    assert len({row.tobytes() for row in samples}) == len(indices)
    assert samples.min() >= -124.0 and samples.max() < 152.0


def test_loading_more_than_capacity_raises() -> None:
    """LoadGen asking for more samples than the library holds is reported."""
    library = SampleLibrary.allocate(input_layouts(BERT), capacity=2, total_count=5)
    with pytest.raises(DatasetError, match="holds 2"):
        library.load([0, 1, 2], SyntheticSource(benchmark=BERT, total_count=5, performance_count=2))


def test_repeated_indices_take_one_row() -> None:
    """MultiStream repeats indices to fill its last query; each index takes one row."""
    library = SampleLibrary.allocate(input_layouts(BERT), capacity=3, total_count=5)
    library.load(
        [4, 1, 4, 2, 1], SyntheticSource(benchmark=BERT, total_count=5, performance_count=3)
    )
    assert library.loaded_count == 3
    assert library.slots([4, 1, 2]).tolist() == [0, 1, 2]
