"""Time estimates from the engine's speed here, and the hang limit from the estimates."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

import mlperf_mig
from mlperf_mig.runner.capacity_store import read_capacities, store_capacity
from mlperf_mig.runner.speed import record_speeds, speed_key


def test_full_bert_server_is_not_estimated_at_two_seconds(tmp_path: Path) -> None:
    """Full BERT Server on 2 emulated CPUs is estimated from the CPU target (minutes), and the hang limit is five times that."""
    plan = mlperf_mig.plan(
        7,
        benchmark="bert",
        loadgen_scenario="Server",
        emulate=True,
        cpus=[0, 1],
        cache_dir=tmp_path,
    )
    assert plan.expected_s > 60 and "CPU target" in plan.expected_from
    assert plan.timeouts.run_s >= 5 * max(plan.expected_s, plan.accuracy_s or 0)
    assert f"about {plan.expected_s:.0f} s per LoadGen test" in plan.table()


def test_a_measured_speed_drives_the_estimate(tmp_path: Path) -> None:
    """With 4 samples per CPU-second measured here, a BERT 1g (2/7 CPU) Server test of 32 queries is estimated at 28 s."""
    key = speed_key(
        benchmark="bert", variant="tiny", backend="onnxruntime", precision=None, where="cpu"
    )
    store_capacity(key, {"qps": 4.0}, tmp_path)
    plan = mlperf_mig.plan(
        5,
        benchmark="bert",
        variant="tiny",
        loadgen_scenario="Server",
        emulate=True,
        cpus=[0, 1],
        cache_dir=tmp_path,
    )
    assert plan.expected_from.startswith("measured here")
    assert plan.expected_s == pytest.approx(32 / (4.0 * 2 / 7), rel=1e-3)


def test_an_unmeasured_tiny_engine_says_so(tmp_path: Path) -> None:
    """Before its first run a tiny engine's estimate rests on the settings alone, and says so."""
    plan = mlperf_mig.plan(5, variant="tiny", emulate=True, cpus=[0, 1], cache_dir=tmp_path)
    assert "not measured here yet" in plan.expected_from


def test_an_offline_run_keeps_its_speed_per_cpu_second(tmp_path: Path) -> None:
    """An emulated Offline run of 100 samples/s on 0.5 CPU used is kept as 200 samples per CPU-second."""
    plan = mlperf_mig.plan(5, variant="tiny", emulate=True, cpus=[0, 1], cache_dir=tmp_path)
    instance = SimpleNamespace(ok=True, throughput=100.0, cpu_used=0.5, cpu_share=2 / 7)
    record_speeds(plan, SimpleNamespace(instances=[instance]))
    key = speed_key(
        benchmark="resnet50", variant="tiny", backend="onnxruntime", precision=None, where="cpu"
    )
    assert read_capacities(tmp_path)[key]["qps"] == pytest.approx(200.0)
