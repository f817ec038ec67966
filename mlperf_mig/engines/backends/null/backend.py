"""The null backend: well-formed outputs of the right shapes, at once, for measuring the harness."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from mlperf_mig.engines.backend import HostBackend
from mlperf_mig.workloads import Workload

if TYPE_CHECKING:
    from pathlib import Path

    from mlperf_mig.engines.spec import EngineSpec


class NullBackend(HostBackend):
    """Returns zero-filled outputs shaped like the benchmark's; no model, no device, no engine."""

    name = "null"
    framework = "null backend"
    runs_model = False
    listing_order = 30
    provider = "null"

    def __init__(self, benchmark: Workload) -> None:
        super().__init__(benchmark)
        self._cache: dict[int, dict[str, np.ndarray]] = {}

    @classmethod
    def precisions(cls, spec: EngineSpec) -> tuple[str, ...]:
        return ("fp32", "fp16", "int8")  # nothing is computed, so any label is honest

    @classmethod
    def _open(
        cls, spec: EngineSpec, engine_path: Path | None, *, threads: int | None
    ) -> NullBackend:
        return cls(spec.benchmark)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        batch = len(next(iter(feeds.values())))
        outputs = self._cache.get(batch)
        if outputs is None:
            outputs = {
                spec.name: np.zeros((batch, *spec.sample_shape), dtype=spec.dtype)
                for spec in self._benchmark.outputs
            }
            self._cache[batch] = outputs
        return outputs
