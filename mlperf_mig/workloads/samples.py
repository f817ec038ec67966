"""Where a workload's samples come from: the SampleSource protocol the harness's sample library
fills itself from (declared with the Workload interface, workload.py, whose `open_dataset` gives
one), and the deterministic synthetic source every workload has."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from mlperf_mig.workloads.workload import SampleSource, Workload

__all__ = ["SampleSource", "SyntheticSource"]


@attrs.define(kw_only=True)
class SyntheticSource:
    """Deterministic synthetic samples of a workload: each depends only on (seed, index)."""

    benchmark: Workload
    total_count: int
    performance_count: int
    seed: int = 0
    synthetic: bool = attrs.field(default=True, init=False)
    description: str = attrs.field(default="synthetic", init=False)
    _scratch: dict[str, Any] = attrs.field(factory=dict, init=False, repr=False)

    def fill(self, indices: Sequence[int], out: Mapping[str, np.ndarray]) -> None:
        self.benchmark.fill_synthetic(
            seed=self.seed,
            total_count=self.total_count,
            indices=indices,
            out=out,
            scratch=self._scratch,
        )
