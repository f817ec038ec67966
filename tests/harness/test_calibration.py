"""Measured targets: the timing covers the path that will serve the test."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mlperf_mig.engines.backends.null import NullBackend
from mlperf_mig.harness import InstanceTask
from mlperf_mig.harness.calibration import OFFLINE_MARGIN, SERVER_LOAD, timed_target
from mlperf_mig.harness.loadgen_test import calibrates
from mlperf_mig.harness.samples import input_layouts
from mlperf_mig.workloads.bert import BERT

GATHER_S = 0.02
BATCH = 8


def _slow_gather(rows: np.ndarray) -> dict[str, np.ndarray]:
    """Feeds of `rows` after GATHER_S seconds, as a copy out of shared memory would take."""
    time.sleep(GATHER_S)
    return {
        layout.name: np.zeros((len(rows), *layout.shape), dtype=layout.dtype)
        for layout in input_layouts(BERT)
    }


def test_offline_target_includes_the_gather_time() -> None:
    """A backend that costs nothing behind a 20 ms gather is timed at about the gather's rate."""
    target = timed_target(
        NullBackend(BERT), _slow_gather, 16, "Offline", batch_size=BATCH, samples_per_query=8
    )
    assert target == pytest.approx(OFFLINE_MARGIN * BATCH / GATHER_S, rel=0.3)


@pytest.mark.parametrize(
    ("mode", "scenario", "expected"),
    [
        ("performance", "Offline", True),
        ("accuracy", "Offline", False),
        ("accuracy", "SingleStream", False),
        ("accuracy", "Server", True),
    ],
)
def test_accuracy_runs_calibrate_only_where_the_target_paces_them(
    tmp_path: Path, mode: str, scenario: str, expected: bool
) -> None:
    """Server accuracy runs are paced by the target (the CPU row would take minutes); the
    others issue their samples regardless, so timing a target would be wasted."""
    task = InstanceTask(benchmark="bert", loadgen_scenario=scenario, outdir=tmp_path, mode=mode)
    assert calibrates(task, BERT) is expected


def _paced_gather(seconds: list[float]) -> Any:
    """A gather that takes `seconds[k]` on its k-th call (the first is the warm-up)."""
    calls = iter(seconds)

    def gather(rows: np.ndarray) -> dict[str, np.ndarray]:
        time.sleep(next(calls))
        return {
            layout.name: np.zeros((len(rows), *layout.shape), dtype=layout.dtype)
            for layout in input_layouts(BERT)
        }

    return gather


# The warm-up, then timed calls until they add up to the budget: 0.2, 0.2, 0.04 (nothing else
# on the machine), 0.2 s.
_INTERFERED = [0.2, 0.2, 0.2, 0.04, 0.2]


def test_offline_target_comes_from_the_fastest_timed_call() -> None:
    """Other work slows some timed calls: Offline's expected QPS follows the fastest call, so
    that it is not set too low (a query that ends before min_duration, trap 10)."""
    gather = _paced_gather(_INTERFERED)
    target = timed_target(
        NullBackend(BERT), gather, 16, "Offline", batch_size=BATCH, samples_per_query=8
    )
    assert target > 0.5 * OFFLINE_MARGIN * BATCH / 0.04  # the median call would give a fifth


def test_server_target_comes_from_the_median_timed_call() -> None:
    """Server's target errs on the valid side by being low: it keeps the median call."""
    gather = _paced_gather(_INTERFERED)
    target = timed_target(
        NullBackend(BERT), gather, 16, "Server", batch_size=BATCH, samples_per_query=8
    )
    assert target == pytest.approx(SERVER_LOAD * BATCH / 0.2, rel=0.3)


class RecordingBackend(NullBackend):
    """The null backend, keeping the size of every call."""

    def __init__(self, samples_per_run: int | None = None) -> None:
        super().__init__(BERT)
        self.sizes: list[int] = []
        if samples_per_run is not None:
            self.samples_per_run = samples_per_run

    def run(self, feeds: Any) -> dict[str, np.ndarray]:
        self.sizes.append(len(next(iter(feeds.values()))))
        return super().run(feeds)


@pytest.mark.parametrize(("per_run", "warmed"), [(None, 8), (2, 2), (16, 8)])
def test_warm_up_is_one_session_run(per_run: int | None, warmed: int) -> None:
    """The warm-up runs one session run's samples where the backend splits a batch into runs
    (ONNX Runtime on the CPU), else the whole batch."""
    from mlperf_mig.harness.calibration import warm_up_path

    backend = RecordingBackend(per_run)
    layouts = input_layouts(BERT)
    buffers = {lay.name: np.zeros((8, *lay.shape), dtype=lay.dtype) for lay in layouts}
    warm_up_path(
        backend, lambda rows: {n: b[rows] for n, b in buffers.items()}, 8, "Offline",
        batch_size=8, samples_per_query=1,
    )  # fmt: skip
    assert backend.sizes == [warmed]
