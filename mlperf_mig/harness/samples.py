"""The sample library behind the QSL (its sources are the workload's: workloads/samples.py).

Loaded samples live in one contiguous array per model input (`[capacity, *sample_shape]`), and
a slot table maps LoadGen's sample index to a row. Batches are gathered with one `np.take` per
input, never assembled from per-sample Python objects. The arrays can be handed in by the caller
(the runner's unified mode backs them with shared memory).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import attrs
import numpy as np

from mlperf_mig.errors import DatasetError
from mlperf_mig.workloads.samples import SampleSource
from mlperf_mig.workloads.workload import Workload

logger = logging.getLogger(__name__)

# Above this sample size, one copy per row beats fancy indexing (588 KiB ResNet50 samples).
ROW_COPY_BYTES = 1 << 16


@attrs.frozen(kw_only=True)
class InputLayout:
    """Shape of one sample of one input (without the batch axis) and its dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: str


def input_layouts(benchmark: Workload) -> tuple[InputLayout, ...]:
    """Per-sample layouts of the benchmark's inputs (the batch axis dropped)."""
    return tuple(
        InputLayout(name=t.name, shape=t.sample_shape, dtype=t.dtype) for t in benchmark.inputs
    )


class SampleLibrary:
    """Loaded samples: one contiguous `[capacity, *sample_shape]` array per input.

    `adopts`: the library may serve arrays handed to `adopt` instead of its buffers (a library
    on buffers shared with other processes copies them in instead).
    """

    def __init__(
        self, buffers: Mapping[str, np.ndarray], *, total_count: int, adopts: bool = False
    ) -> None:
        capacities = {len(buf) for buf in buffers.values()}
        if len(capacities) != 1:
            raise ValueError(f"sample buffers disagree on capacity: {sorted(capacities)}")
        self.buffers = dict(buffers)
        self._own = dict(buffers)  # writable: where samples are generated
        self._adopts = adopts
        self.capacity = capacities.pop()
        self.total_count = total_count
        self._slots = np.full(total_count, -1, dtype=np.int64)

    @classmethod
    def allocate(
        cls, layouts: Sequence[InputLayout], *, capacity: int, total_count: int
    ) -> SampleLibrary:
        """A library with freshly allocated buffers for `capacity` samples."""
        buffers = {
            layout.name: np.zeros((capacity, *layout.shape), dtype=layout.dtype)
            for layout in layouts
        }
        return cls(buffers, total_count=total_count, adopts=True)

    @property
    def loaded_count(self) -> int:
        return int(np.count_nonzero(self._slots >= 0))

    def load(self, indices: Sequence[int], source: SampleSource) -> None:
        """Load `indices` (replacing what was loaded) into rows 0..n-1, each index once
        (MultiStream repeats indices to fill its last query)."""
        unique = self.place(indices)
        source.fill(unique, self.rows(len(unique)))

    def place(self, indices: Sequence[int]) -> list[int]:
        """Give `indices` (each once, in order) rows 0..n-1 and return them; the caller fills
        `rows(n)` or hands in arrays holding them (`adopt`)."""
        unique = list(dict.fromkeys(int(i) for i in indices))
        count = len(unique)
        if count > self.capacity:
            raise DatasetError(
                f"LoadGen asked to load {count} samples but the library holds {self.capacity}; "
                "raise the performance sample count"
            )
        self.buffers = dict(self._own)
        self._slots.fill(-1)
        self._slots[np.asarray(unique, dtype=np.int64)] = np.arange(count)
        return unique

    def rows(self, count: int) -> dict[str, np.ndarray]:
        """The first `count` rows of every input: where `place`'s samples are written."""
        return {name: buf[:count] for name, buf in self._own.items()}

    def adopt(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Serve the placed samples from `arrays` (the rows `place` gave, per input; e.g. a
        cached file mapped read-only) until the next load: a library on its own buffers uses
        them as they are, one on buffers handed in (shared with other processes) copies them."""
        if not self._adopts:
            for name, array in arrays.items():
                self._own[name][: len(array)] = array
            return
        self.buffers = dict(arrays)

    def unload(self, indices: Sequence[int]) -> None:
        self._slots[np.asarray(indices, dtype=np.int64)] = -1

    def slots(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """Rows of the loaded samples `indices`; raises when one is not loaded."""
        if isinstance(indices, list):  # LoadGen's: fromiter reads a list of ints 2x faster
            indices = np.fromiter(indices, dtype=np.int64, count=len(indices))
        rows = self._slots[np.asarray(indices, dtype=np.int64)]
        if rows.size and rows.min() < 0:
            raise DatasetError("LoadGen issued a sample that is not loaded")
        return rows

    def gather(
        self,
        rows: np.ndarray,
        out: Mapping[str, np.ndarray] | None = None,
        *,
        contiguous: bool | None = None,
    ) -> dict[str, np.ndarray]:
        """Return the batch of `rows` per input: a view when the rows are consecutive, else a
        copy. Large samples are copied row by row into `out` when given (3x faster than
        np.take for ResNet50), small ones by fancy indexing. `contiguous` saves the check."""
        count = len(rows)
        if contiguous is None:
            contiguous = _consecutive(rows)
        if contiguous:
            start = int(rows[0])
            return {name: buf[start : start + count] for name, buf in self.buffers.items()}
        batch = {}
        for name, buf in self.buffers.items():
            if out is None or buf[0].nbytes < ROW_COPY_BYTES:
                batch[name] = buf[rows]
                continue
            gathered = out[name][:count]
            for row, source_row in enumerate(rows.tolist()):
                gathered[row] = buf[source_row]
            batch[name] = gathered
        return batch


def _consecutive(rows: np.ndarray) -> bool:
    count = len(rows)
    if not count or int(rows[-1]) - int(rows[0]) != count - 1:
        return False
    return count < 3 or bool(np.all(np.diff(rows) == 1))
