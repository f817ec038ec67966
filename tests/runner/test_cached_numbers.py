"""Issue 33, finding 8 (cached numbers): an engine speed read from the cache must be one this
tool could have measured; a crafted 1e-300 samples/s is refused with a warning naming it, not
turned into a hang limit of 1.6e303 s, and no hang limit exceeds a week."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import mlperf_mig
from mlperf_mig.runner.capacity_store import store_capacity
from mlperf_mig.runner.speed import MAX_HANG_S, MIN_HANG_S, hang_limit, speed_key

KEY = speed_key(
    benchmark="bert", variant="tiny", backend="onnxruntime", precision=None, where="cpu"
)


@pytest.mark.parametrize("qps", [1e-300, 1e300])
def test_implausible_cached_speed_is_not_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, qps: float
) -> None:
    """A cached speed of 1e-300 (or 1e300) leaves the estimate to the settings alone, the hang
    limit at its floor, and says which entry it ignored."""
    store_capacity(KEY, {"qps": qps}, tmp_path)
    with caplog.at_level(logging.WARNING):
        plan = mlperf_mig.plan(
            5, benchmark="bert", variant="tiny", loadgen_scenario="Server", emulate=True,
            cpus=[0, 1], cache_dir=tmp_path,
        )  # fmt: skip
    assert "not measured here yet" in plan.expected_from
    assert plan.timeouts.run_s == MIN_HANG_S
    assert any(KEY in r.getMessage() and "outside" in r.getMessage() for r in caplog.records)


def test_hang_limit_never_exceeds_a_week() -> None:
    """However long the estimate, a hung worker is stopped within MAX_HANG_S."""
    assert hang_limit(1.6e303, None) == MAX_HANG_S
    assert hang_limit(10.0, 1e9) == MAX_HANG_S
    assert hang_limit(10.0, None) == MIN_HANG_S
