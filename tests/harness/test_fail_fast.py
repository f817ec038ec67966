"""A SUT that never completes its samples fails its test within the test's bound, in seconds,
instead of hanging the suite until an outer timeout (tests/harness/conftest.py bounds every
LoadGen test it runs in a child)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from mlperf_mig.harness import InstanceResult, InstanceTask, SettingsSpec, run_instance

pytestmark = pytest.mark.slow  # a LoadGen test left to run into its bound

BOUND_S = 8.0


def _run_with_a_backend_that_never_answers(task: InstanceTask) -> InstanceResult:
    from mlperf_mig.engines.backends.null import NullBackend

    def never(self, feeds):
        time.sleep(3600)

    NullBackend.run = never
    return run_instance(task)


def test_a_sut_that_never_completes_fails_within_the_bound(in_child, tmp_path: Path) -> None:
    """LoadGen waits forever on a sample the backend never answers: the child is killed at the
    bound and the test fails then (well under a minute), with no process left behind."""
    task = InstanceTask(
        benchmark="resnet50", loadgen_scenario="Offline", outdir=tmp_path / "instance",
        settings=SettingsSpec(overrides={"min_duration": 100, "target_qps": 100}), sample_count=8,
    )  # fmt: skip
    began = time.monotonic()
    with pytest.raises(AssertionError, match="did not end within 8 s: killed"):
        in_child(_run_with_a_backend_that_never_answers, task, bound_s=BOUND_S)
    assert time.monotonic() - began < BOUND_S + 10
