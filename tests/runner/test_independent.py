"""Independent mode end to end on the null backend: folders, results, and failing workers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from mlperf_mig import cli
from mlperf_mig.runner.results import RunResult

from .conftest import HERE, QUICK_NULL, alive, recorded_pids

pytestmark = pytest.mark.slow  # starts the runner's workers


def test_run_folder_layout(good_run: Any) -> None:
    """Each instance has the performance run's user.conf, worker.log, performance and accuracy
    logs (with the accuracy run's user.conf); results.json on top."""
    outdir = Path(good_run.outdir)
    assert (outdir / "results.json").is_file()
    for instance in good_run.instances:
        folder = outdir / instance.name
        assert (folder / "user.conf").is_file()
        assert (folder / "worker.log").is_file()
        assert (folder / "performance" / "mlperf_log_detail.txt").is_file()
        assert (folder / "accuracy" / "mlperf_log_accuracy.json").is_file()
        assert (folder / "accuracy" / "user.conf").is_file()


def test_emulated_workers_are_pinned(good_run: Any) -> None:
    """Each worker ran pinned to the CPUs of its emulated partition, as its log records."""
    for instance in good_run.instances:
        log = (Path(good_run.outdir) / instance.name / "worker.log").read_text()
        assert f"cpus={sorted(instance.cpus)}" in log


def test_aggregate_is_the_sum(good_run: Any) -> None:
    """The total is the sum of the instances' throughput, with every instance ok."""
    assert good_run.ok
    assert [i.status for i in good_run.instances] == ["ok", "ok"]
    assert good_run.total_throughput == pytest.approx(sum(i.throughput for i in good_run.instances))


def test_table_labels_emulated_and_engineering_metric(good_run: Any) -> None:
    """The table says emulated and that the sum is not an MLPerf result."""
    table = good_run.table()
    assert "emulated" in table
    assert "not an MLPerf result" in table
    assert "total (sum)" in table


@pytest.fixture(scope="module", name="faulty")
def fixture_faulty(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path, float]:
    """Scenario 7 from the CLI with i1 killed, i2 raising and i3 hanging; i0 runs normally."""
    outdir = tmp_path_factory.mktemp("faulty") / "run"
    began = time.monotonic()
    code = cli.main(
        [
            "run",
            "--scenario",
            "7",
            "--backend",
            "null",
            "--no-accuracy",
            "--timeout",
            "8",
            "--set",
            "min_duration=300",
            "--set",
            "target_qps=2000",
            "--outdir",
            str(outdir),
            "--worker-entry",
            "fault_entries:crash_raise_hang",
        ]
    )
    return code, outdir, time.monotonic() - began


def _instance(outdir: Path, prefix: str) -> Any:
    result = RunResult.load(outdir)
    return next(i for i in result.instances if i.name.startswith(prefix))


def test_cli_exit_code_says_failure(faulty: tuple[int, Path, float]) -> None:
    """A run with failed workers exits 1 and still writes results.json."""
    code, outdir, _ = faulty
    assert code == 1
    assert not RunResult.load(outdir).ok


def test_healthy_instance_keeps_its_result(faulty: tuple[int, Path, float]) -> None:
    """i0 finished normally next to the failing workers, with its logs."""
    _, outdir, _ = faulty
    healthy = _instance(outdir, "i0-")
    assert healthy.status == "ok" and healthy.throughput > 0
    assert (outdir / healthy.name / "performance" / "mlperf_log_detail.txt").is_file()


def test_sigkill_is_a_crash_with_the_signal(faulty: tuple[int, Path, float]) -> None:
    """The worker killed with SIGKILL is 'crashed' and names the signal, with its log tail."""
    _, outdir, _ = faulty
    crashed = _instance(outdir, "i1-")
    assert crashed.status == "crashed"
    assert "SIGKILL" in crashed.error
    assert "worker i1-2g.20gb" in crashed.log_tail


def test_exception_comes_back_with_its_traceback(faulty: tuple[int, Path, float]) -> None:
    """The worker that raised is 'raised' with the exception and the child's traceback text."""
    _, outdir, _ = faulty
    raised = _instance(outdir, "i2-")
    assert raised.status == "raised"
    assert raised.error == "ValueError: injected failure in the worker"
    assert "fault_entries.py" in raised.traceback


def test_hang_is_killed_at_the_deadline(faulty: tuple[int, Path, float]) -> None:
    """The hanging worker is 'hung' after the 8 s deadline, and the run did not wait longer."""
    _, outdir, elapsed = faulty
    hung = _instance(outdir, "i3-")
    assert hung.status == "hung"
    assert elapsed < 30


def test_no_worker_outlives_the_run(faulty: tuple[int, Path, float]) -> None:
    """Every worker process is gone after the run."""
    _, outdir, _ = faulty
    assert not [pid for pid in recorded_pids(outdir) if alive(pid)]


_INTERRUPTED_RUN = """
import sys
import mlperf_mig
mlperf_mig.run(7, outdir=sys.argv[1], worker_entry="fault_entries:hang_after_barrier",
               accuracy=False, progress=False, backend="null")
"""


def test_ctrl_c_stops_every_worker(tmp_path: Path) -> None:
    """SIGINT to the parent stops all workers within seconds, leaves no orphan, writes results."""
    outdir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    parent = subprocess.Popen(
        [sys.executable, "-c", _INTERRUPTED_RUN, str(outdir)], env=env, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pids_dir = outdir / "pids"
        if pids_dir.is_dir() and len(list(pids_dir.iterdir())) == 4:
            break
        time.sleep(0.2)
    pids = recorded_pids(outdir)
    assert len(pids) == 4
    time.sleep(0.5)
    parent.send_signal(signal.SIGINT)
    sent = time.monotonic()
    _, stderr = parent.communicate(timeout=30)
    assert time.monotonic() - sent < 10
    assert parent.returncode != 0
    assert b"KeyboardInterrupt" in stderr
    assert not [pid for pid in pids if alive(pid)]
    results = json.loads((outdir / "results.json").read_text())
    assert results["interrupted"] is True
    assert {i["status"] for i in results["instances"]} == {"interrupted"}


def test_quick_settings_are_recorded(good_run: Any) -> None:
    """The user.conf of an instance holds the overrides it ran with."""
    conf = (Path(good_run.outdir) / good_run.instances[0].name / "user.conf").read_text()
    assert "resnet50.Offline.min_duration = 300" in conf
    assert QUICK_NULL["backend"] == good_run.backend
