"""Unified mode: one LoadGen for the layout, samples dispatched to the instance workers."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

import mlperf_mig
from mlperf_mig.harness import parse_detail_log

from .conftest import QUICK_NULL
from .fault_entries import RATE_PER_SLICE

pytestmark = pytest.mark.slow  # starts the runner's workers


@pytest.fixture(scope="module", name="unified_run")
def fixture_unified_run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Scenario 7, unified, null backend, BERT-shaped samples (small), performance and accuracy."""
    outdir = tmp_path_factory.mktemp("unified") / "run"
    return mlperf_mig.run(
        7, benchmark="bert", mode="unified", outdir=outdir, batch_size=16, **QUICK_NULL
    )


def test_one_log_for_the_whole_layout(unified_run: Any) -> None:
    """The layout folder holds the one MLPerf log; the instance folders hold only worker logs."""
    outdir = Path(unified_run.outdir)
    assert (outdir / "layout" / "performance" / "mlperf_log_detail.txt").is_file()
    assert (outdir / "layout" / "accuracy" / "mlperf_log_accuracy.json").is_file()
    for instance in unified_run.instances:
        assert sorted(p.name for p in (outdir / instance.name).iterdir()) == ["worker.log"]


def test_logged_samples_equal_the_sum_dispatched(unified_run: Any) -> None:
    """The log's completed-sample count is the sum of the samples dispatched to the instances."""
    records = parse_detail_log(Path(unified_run.outdir) / "layout" / "performance")
    logged = records["result_query_count"] * records["effective_samples_per_query"]
    dispatched = sum(i.dispatched_samples for i in unified_run.instances)
    assert dispatched == logged
    assert all(i.dispatched_samples > 0 for i in unified_run.instances)


def test_unified_result_is_labelled(unified_run: Any) -> None:
    """The table shows the layout row and the one-LoadGen label, and every worker ended ok."""
    assert unified_run.ok
    assert unified_run.total_throughput == unified_run.layout_result.throughput
    table = unified_run.table()
    assert "layout (unified)" in table and "one LoadGen" in table and "emulated" in table


def _bert_with_known_speeds(
    tmp_path: Path,
    scenario: Any,
    worker_entry: str,
    *,
    min_duration: int,
    target_qps: float,
    **more: Any,
) -> Any:
    """A unified BERT run whose serving workers are the test entry `worker_entry`."""
    return mlperf_mig.run(
        scenario,
        benchmark="bert",
        mode="unified",
        outdir=tmp_path / "run",
        backend="null",
        batch_size=4,
        accuracy=False,
        progress=False,
        settings={"min_duration": min_duration, "target_qps": target_qps},
        worker_entry=worker_entry,
        **more,
    )


def test_dispatch_follows_capacity(tmp_path: Path) -> None:
    """With instance speeds proportional to compute slices, each gets its share within 10%."""
    result = _bert_with_known_speeds(
        tmp_path, 7, "fault_entries:sleepy_serve", min_duration=3000, target_qps=7 * RATE_PER_SLICE
    )
    assert result.ok
    total = sum(i.dispatched_samples for i in result.instances)
    for instance in result.instances:
        expected = instance.compute_slices / 7
        assert instance.dispatched_samples / total == pytest.approx(expected, rel=0.10)


def test_dead_worker_samples_go_to_the_others(tmp_path: Path) -> None:
    """A worker killed mid-run is 'crashed'; its in-flight samples are served by the others."""
    result = _bert_with_known_speeds(
        tmp_path,
        "3x1g.10gb",
        "fault_entries:dying_serve",
        min_duration=1000,
        target_qps=3 * 4 * RATE_PER_SLICE,
    )
    statuses = {i.name: i.status for i in result.instances}
    assert statuses == {"i0-1g.10gb": "ok", "i1-1g.10gb": "crashed", "i2-1g.10gb": "ok"}
    assert not result.ok and result.layout_status == "ok"
    records = parse_detail_log(Path(result.outdir) / "layout" / "performance")
    logged = records["result_query_count"] * records["effective_samples_per_query"]
    assert result.layout_result.samples_completed == logged
    assert sum(i.dispatched_samples for i in result.instances) == logged
    assert result.layout_result.failed_samples == 0


def test_unified_multistream(tmp_path: Path) -> None:
    """MultiStream, whose QSL loads one query beyond the performance count, runs unified."""
    result = mlperf_mig.run(
        "2g.20gb+1g.10gb",
        benchmark="bert",
        loadgen_scenario="MultiStream",
        mode="unified",
        outdir=tmp_path / "run",
        backend="null",
        accuracy=False,
        progress=False,
        settings={"min_duration": 300},
    )
    assert result.ok and result.layout_result.throughput > 0


def test_quick_offline_query_is_sized_by_the_serving_path(tmp_path: Path) -> None:
    """The quick preset's measured target covers the copy out of shared memory: a null-backend
    unified Offline run ends in seconds and is INVALID only by the preset's design."""
    started = time.monotonic()
    result = mlperf_mig.run(
        "2g.20gb+1g.10gb",
        mode="unified",
        outdir=tmp_path / "run",
        backend="null",
        accuracy=False,
        progress=False,
        timeout_s=120,
    )
    assert result.ok and result.layout_result.target_source == "calibration"
    assert result.layout_result.invalid_by_design
    assert time.monotonic() - started < 60


def test_hung_worker_is_dropped_and_its_samples_served(tmp_path: Path) -> None:
    """A worker that stops answering is dropped after the reply timeout (half the deadline): its
    in-flight samples go to the others, the layout's test completes every sample, the run is
    marked degraded naming it, and no worker process is left."""
    started = time.monotonic()
    result = _bert_with_known_speeds(
        tmp_path,
        "3x1g.10gb",
        "fault_entries:hanging_serve",
        min_duration=1000,
        target_qps=3 * 4 * RATE_PER_SLICE,
        timeout_s=12,
    )
    statuses = {i.name: i.status for i in result.instances}
    assert statuses == {"i0-1g.10gb": "ok", "i1-1g.10gb": "hung", "i2-1g.10gb": "ok"}
    assert result.layout_status == "ok" and result.layout_result.failed_samples == 0
    assert "degraded" in result.layout_error and "i1-1g.10gb" in result.layout_error
    records = parse_detail_log(Path(result.outdir) / "layout" / "performance")
    logged = records["result_query_count"] * records["effective_samples_per_query"]
    assert sum(i.dispatched_samples for i in result.instances) == logged
    assert time.monotonic() - started < 40
    pids = [int(p.read_text()) for p in (Path(result.outdir) / "pids").iterdir()]
    assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()]
