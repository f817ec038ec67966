"""Measured targets for the quick preset: time a few batches, derive what LoadGen should expect.

LoadGen needs a target before the test: Offline's expected QPS sizes its single query (too low
and the run ends before min_duration, trap 10), the stream scenarios pre-generate queries from the
expected latency (too high and they run out before min_duration). The quick preset measures the
harness's own batch path (gather, backend, payload) instead of trusting a table, with margins that
err on the valid side.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable, Mapping

import numpy as np

from mlperf_mig.engines.backend import Backend
from mlperf_mig.harness.samples import SampleLibrary, SampleSource, input_layouts
from mlperf_mig.harness.sut import response_payload

logger = logging.getLogger(__name__)

OFFLINE_MARGIN = 1.5  # expect more than measured: a longer run, never a short one
SERVER_LOAD = 0.5  # target half the measured capacity
STREAM_LATENCY_FACTOR = 0.25  # expect less latency than measured: more queries pre-generated
LOADGEN_COST_S = 2e-6  # per sample: response objects and LoadGen's own bookkeeping
OFFLINE_CAP_QPS = 1_000_000.0  # the Python completion path cannot go faster
SERVER_CAP_QPS = 10_000.0  # beyond this the issue path, not the backend, is the limit
MIN_LATENCY_MS = 0.005
TIMING_BUDGET_S = 1.0


def seconds_per_batch(infer: Callable[[np.ndarray], object], rows: np.ndarray) -> float:
    """Median time of `infer(rows)` after a warm-up call (at most 5 timed calls, about 1 s)."""
    infer(rows)
    timings: list[float] = []
    while len(timings) < 5 and (not timings or sum(timings) < TIMING_BUDGET_S):
        start = time.perf_counter()
        infer(rows)
        timings.append(time.perf_counter() - start)
    return statistics.median(timings) + LOADGEN_COST_S * len(rows)


def calibrated_target(
    backend: Backend,
    source: SampleSource,
    loadgen_scenario: str,
    *,
    batch_size: int,
    samples_per_query: int,
) -> float:
    """The target (QPS for Offline/Server, latency in ms for the stream scenarios).

    Times the SUT's own batch path (library gather, backend, response payload) on the first
    samples of `source`, loaded into a small library of their own.
    """
    loaded = min(max(batch_size, samples_per_query, 8), source.total_count)
    library = SampleLibrary.allocate(
        input_layouts(source.benchmark), capacity=loaded, total_count=source.total_count
    )
    library.load(range(loaded), source)
    largest = max(batch_size, samples_per_query)
    feeds = {
        name: np.empty((largest, *buf.shape[1:]), buf.dtype)
        for name, buf in library.buffers.items()
    }
    return timed_target(
        backend,
        lambda rows: library.gather(rows, feeds),
        loaded,
        loadgen_scenario,
        batch_size=batch_size,
        samples_per_query=samples_per_query,
    )


def timed_target(
    backend: Backend,
    gather: Callable[[np.ndarray], Mapping[str, np.ndarray]],
    rows_available: int,
    loadgen_scenario: str,
    *,
    batch_size: int,
    samples_per_query: int,
) -> float:
    """The target measured on the path that will serve the test: `gather(rows)` (rows below
    `rows_available`), the backend and the response payload."""
    benchmark = backend.benchmark

    def infer(rows: np.ndarray) -> np.ndarray:
        return response_payload(benchmark, backend.run(dict(gather(rows))))

    if loadgen_scenario in ("SingleStream", "MultiStream"):
        count = 1 if loadgen_scenario == "SingleStream" else samples_per_query
        latency = seconds_per_batch(infer, _rows(count, rows_available, shuffled=True))
        target = max(MIN_LATENCY_MS, STREAM_LATENCY_FACTOR * latency * 1e3)
    elif loadgen_scenario == "Offline":
        rows = _rows(batch_size, rows_available, shuffled=False)
        target = min(OFFLINE_MARGIN * batch_size / seconds_per_batch(infer, rows), OFFLINE_CAP_QPS)
    else:
        rows = _rows(batch_size, rows_available, shuffled=True)
        target = min(SERVER_LOAD * batch_size / seconds_per_batch(infer, rows), SERVER_CAP_QPS)
    logger.info("calibrated %s target: %.4g", loadgen_scenario, target)
    return target


def _rows(count: int, loaded: int, *, shuffled: bool) -> np.ndarray:
    """Rows as the SUT sees them: consecutive for Offline batches, scattered otherwise."""
    rows = np.arange(count, dtype=np.int64) % loaded
    return rows[::-1].copy() if shuffled and count > 1 else rows
