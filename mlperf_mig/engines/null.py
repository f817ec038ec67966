"""The null backend: well-formed outputs of the right shapes, at once, for measuring the harness."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from mlperf_mig.benchmark import Benchmark
from mlperf_mig.engines.backend import Backend, DeviceReport


class NullBackend(Backend):
    """Returns zero-filled outputs shaped like the benchmark's; no model, no device."""

    name = "null"

    def __init__(self, benchmark: Benchmark) -> None:
        self._benchmark = benchmark
        self._cache: dict[int, dict[str, np.ndarray]] = {}

    @property
    def benchmark(self) -> Benchmark:
        return self._benchmark

    @property
    def device(self) -> DeviceReport:
        return DeviceReport(backend="null", provider="null", device="cpu")

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        batch = len(next(iter(feeds.values())))
        outputs = self._cache.get(batch)
        if outputs is None:
            outputs = {
                spec.name: np.zeros((batch, *spec.shape[1:]), dtype=spec.dtype)
                for spec in self._benchmark.outputs
            }
            self._cache[batch] = outputs
        return outputs
