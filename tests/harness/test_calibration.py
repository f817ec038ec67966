"""Measured targets: the timing covers the path that will serve the test."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from mlperf_mig.benchmark import BERT
from mlperf_mig.engines.backends.null import NullBackend
from mlperf_mig.harness import InstanceTask
from mlperf_mig.harness.calibration import OFFLINE_MARGIN, timed_target
from mlperf_mig.harness.loadgen_test import calibrates
from mlperf_mig.harness.samples import input_layouts

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
