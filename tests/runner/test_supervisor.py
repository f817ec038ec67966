"""Workers forked by the fork server: they start with the harness imported, yet take the
runner's environment and CPU affinity of the moment, and die with a runner that is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from multiprocessing import forkserver
from pathlib import Path
from typing import Any

import pytest

from mlperf_mig.runner.supervisor import PRELOAD, Supervisor, Timeouts, worker_context
from mlperf_mig.runner.worker import WorkerJob

from .conftest import HERE

_VARIABLE = "MLPERF_MIG_TEST_VARIABLE"
_RUNNER = """
import sys
from multiprocessing import forkserver
from pathlib import Path
from mlperf_mig.runner.supervisor import Supervisor, Timeouts
from mlperf_mig.runner.worker import WorkerJob

folder = Path(sys.argv[1])
jobs = [
    WorkerJob(name=f"w{i}", entry="supervisor_entries:record_pid_then_hang",
              payload=str(folder / "pids"), log_path=str(folder / f"w{i}.log"))
    for i in range(2)
]
server = lambda: (folder / "server").write_text(str(forkserver._forkserver._forkserver_pid))
Supervisor(timeouts=Timeouts(ready_s=60, run_s=60)).run(jobs, after_start=server)
"""


def _in_worker(tmp_path: Path, entry: str, payload: Any, **job: Any) -> Any:
    """What `entry` returns in a worker of a one-job round."""
    work = WorkerJob(
        name="w",
        entry=f"supervisor_entries:{entry}",
        payload=payload,
        log_path=str(tmp_path / "w.log"),
        wait_at_barrier=False,
        **job,
    )
    [outcome] = Supervisor(timeouts=Timeouts(ready_s=60, run_s=60)).run([work])
    assert outcome.ok, (outcome.error, outcome.log_tail)
    return outcome.value


def _alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


@pytest.mark.slow
def test_workers_start_with_the_harness_imported(tmp_path: Path) -> None:
    """A worker finds numpy, LoadGen and the harness imported before its target runs."""
    assert _in_worker(tmp_path, "loaded_modules", list(PRELOAD)) == list(PRELOAD)


@pytest.mark.slow
def test_the_fork_server_runs_one_thread(tmp_path: Path) -> None:
    """The process the workers are forked from has no thread but its main one."""
    _in_worker(tmp_path, "loaded_modules", [])  # the server has imported PRELOAD by now
    server = forkserver._forkserver._forkserver_pid
    assert server is not None
    assert len(os.listdir(f"/proc/{server}/task")) == 1


@pytest.mark.slow
def test_a_variable_set_after_the_server_started_reaches_the_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A variable the runner sets between rounds is in the next round's workers."""
    worker_context()
    monkeypatch.setenv(_VARIABLE, "set later")
    assert _in_worker(tmp_path, "environment", [_VARIABLE]) == {_VARIABLE: "set later"}


@pytest.mark.slow
def test_a_variable_removed_after_the_server_started_is_gone_from_the_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A variable the runner had when the fork server started, and removed since, is not in
    the next round's workers."""
    forkserver._forkserver._stop()  # a server started afresh with the variable set
    monkeypatch.setenv(_VARIABLE, "removed later")
    assert _in_worker(tmp_path, "environment", [_VARIABLE]) == {_VARIABLE: "removed later"}
    monkeypatch.delenv(_VARIABLE)
    assert _in_worker(tmp_path, "environment", [_VARIABLE]) == {_VARIABLE: None}


@pytest.mark.slow
def test_the_jobs_variables_win_over_the_runners(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job's own variable (a device variable such as CUDA_VISIBLE_DEVICES) replaces the
    runner's value of it."""
    monkeypatch.setenv(_VARIABLE, "the runner's")
    value = _in_worker(tmp_path, "environment", [_VARIABLE], env={_VARIABLE: "the job's"})
    assert value == {_VARIABLE: "the job's"}


@pytest.mark.slow
def test_a_worker_without_cpus_takes_the_runners_affinity_of_the_moment(tmp_path: Path) -> None:
    """A job without CPUs of its own runs on the CPUs the runner has when the round starts,
    not on those it had when the fork server started."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs")
    worker_context()  # the server starts (or runs already) with every CPU
    os.sched_setaffinity(0, {cpus[-1]})
    try:
        value = _in_worker(tmp_path, "affinity", None)
    finally:
        os.sched_setaffinity(0, cpus)
    assert value == [cpus[-1]]


def test_workers_die_with_a_killed_runner(tmp_path: Path) -> None:
    """SIGKILL to the runner ends its workers (waiting at the barrier) and its fork server
    within seconds: none outlives the runner."""
    (tmp_path / "pids").mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    runner = subprocess.Popen([sys.executable, "-c", _RUNNER, str(tmp_path)], env=env)
    deadline = time.monotonic() + 60
    while len(list((tmp_path / "pids").iterdir())) < 2 or not (tmp_path / "server").exists():
        assert time.monotonic() < deadline and runner.poll() is None, "the workers did not start"
        time.sleep(0.1)
    pids = [int(p.name) for p in (tmp_path / "pids").iterdir()]
    pids.append(int((tmp_path / "server").read_text()))
    runner.send_signal(signal.SIGKILL)
    runner.wait(timeout=10)
    deadline = time.monotonic() + 10
    while [pid for pid in pids if _alive(pid)] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in pids if _alive(pid)]


@pytest.mark.slow
def test_a_worker_killed_at_the_barrier_does_not_hang_the_release(tmp_path: Path) -> None:
    """A worker killed while it waits at the start barrier (as the OOM killer did) is reported
    crashed, and the others are still released and finish (a Condition-based Event hung here)."""
    import threading

    jobs = [
        WorkerJob(
            name=name,
            entry=f"supervisor_entries:{entry}",
            payload=None,
            log_path=str(tmp_path / f"{name}.log"),
        )
        for name, entry in (("late", "ready_late"), ("killed", "killed_at_the_barrier"))
    ]
    outcomes: list[Any] = []
    round_ = threading.Thread(
        target=lambda: outcomes.extend(
            Supervisor(timeouts=Timeouts(ready_s=60, run_s=60)).run(jobs)
        ),
        daemon=True,
    )
    round_.start()
    round_.join(timeout=60)
    assert not round_.is_alive(), "the runner hung releasing the barrier"
    by_name = {o.name: o for o in outcomes}
    assert by_name["late"].ok and by_name["late"].value == "released"
    assert not by_name["killed"].ok
