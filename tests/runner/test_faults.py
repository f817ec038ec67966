"""Faults of real machines: signals to the runner, a full disk, two runs into one folder, a
worker's own children; each test checks what is on disk afterwards and that no process is left."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlperf_mig import cli
from mlperf_mig.runner.results import RunResult

from .conftest import HERE, alive, recorded_pids

_QUICK = [
    "--backend",
    "null",
    "--no-accuracy",
    "--set",
    "min_duration=300",
    "--set",
    "target_qps=2000",
]
_TWO = "2g.20gb+1g.10gb"


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}


def _start_cli(
    outdir: Path, target: str, scenario: str = _TWO, *extra: str
) -> subprocess.Popen[bytes]:
    argv = [
        sys.executable,
        "-m",
        "mlperf_mig",
        "run",
        "--scenario",
        scenario,
        *_QUICK,
        "--outdir",
        str(outdir),
        "--worker-entry",
        f"fault_entries:{target}",
        *extra,
    ]
    return subprocess.Popen(argv, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _wait_for(condition: object, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError("timed out waiting for the run")


def _first_result_written(outdir: Path) -> bool:
    """results.json is there and holds i0's finished result."""
    try:
        data = json.loads((outdir / "results.json").read_text())
    except (OSError, ValueError):
        return False
    return data["instances"][0]["status"] == "ok"


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_keep_finished_results(tmp_path: Path, signum: int) -> None:
    """SIGTERM or SIGHUP mid-run stops every worker, writes results.json with the finished
    instance's result and the others interrupted, and exits 128 + signal without leaks."""
    outdir = tmp_path / "run"
    parent = _start_cli(outdir, "first_finishes_others_hang")
    _wait_for(lambda: _first_result_written(outdir) and len(recorded_pids(outdir)) == 2)
    pids = recorded_pids(outdir)
    parent.send_signal(signum)
    _, stderr = parent.communicate(timeout=30)
    assert parent.returncode == 128 + signum
    assert b"leaked" not in stderr and b"Traceback" not in stderr
    assert not [pid for pid in pids if alive(pid)]
    result = RunResult.load(outdir)
    assert result.interrupted
    assert [i.status for i in result.instances] == ["ok", "interrupted"]
    assert result.instances[0].throughput > 0
    assert signal.Signals(signum).name in result.instances[1].error


@pytest.mark.slow
def test_second_ctrl_c_hurries_but_writes(tmp_path: Path) -> None:
    """A second Ctrl-C during the shutdown kills the workers at once (they ignore SIGTERM)
    and results.json is still written."""
    outdir = tmp_path / "run"
    parent = _start_cli(outdir, "hang_ignoring_sigterm")
    _wait_for(lambda: (outdir / "pids").is_dir() and len(recorded_pids(outdir)) == 2)
    pids = recorded_pids(outdir)
    time.sleep(0.5)
    parent.send_signal(signal.SIGINT)
    time.sleep(0.3)
    sent = time.monotonic()
    parent.send_signal(signal.SIGINT)
    parent.communicate(timeout=30)
    assert time.monotonic() - sent < 2.5  # without the hurry the workers get 3 s of grace
    assert parent.returncode == 130
    assert not [pid for pid in pids if alive(pid)]
    result = RunResult.load(outdir)
    assert result.interrupted
    assert {i.status for i in result.instances} == {"interrupted"}


@pytest.fixture(name="small_disk")
def fixture_small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs (needs root and mount; skipped elsewhere)."""
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


@pytest.mark.slow
def test_full_disk_mid_run_keeps_what_was_written(small_disk: Path) -> None:
    """A disk that fills up mid-run ends it with one line naming the path and the free space;
    results.json keeps the instance that finished before, and no worker is left."""
    outdir = small_disk / "run"
    parent = _start_cli(outdir, "second_fills_the_disk")
    _, stderr = parent.communicate(timeout=120)
    err = stderr.decode().strip().splitlines()[-1]  # after the progress lines
    assert parent.returncode == 2
    assert err.startswith("mlperf-mig: error: cannot write") and b"Traceback" not in stderr
    assert "results.json" in err and "free" in err
    result = RunResult.load(outdir)
    assert result.instances[0].status == "ok" and result.instances[0].throughput > 0
    assert not [pid for pid in recorded_pids(outdir) if alive(pid)]


@pytest.mark.slow
def test_failing_write_keeps_the_previous_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An injected write failure of the second results.json ends the run with one line, exit 2,
    and the first results.json (i0 finished) stays readable."""
    import mlperf_mig._io as io

    writes = []
    real_fsync = os.fsync

    def failing_fsync(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").rsplit("/", 1)[-1].startswith(".results.json."):
            writes.append(fd)
            if len(writes) > 1:
                raise OSError(28, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(io.os, "fsync", failing_fsync)
    outdir = tmp_path / "run"
    code = cli.main(["run", "--scenario", _TWO, *_QUICK, "--outdir", str(outdir)])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2
    assert err.startswith("mlperf-mig: error: cannot write") and "No space left" in err
    result = RunResult.load(outdir)
    assert result.interrupted  # the checkpoint of the first instance: incomplete, but kept
    assert [i.status for i in result.instances].count("ok") == 1
    assert not list(outdir.glob(".results.json.*"))


@pytest.mark.slow
def test_second_run_into_the_same_folder_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """While a run holds its folder, a second run into it is refused with one line and writes
    nothing there; the first run's results are its own."""
    outdir = tmp_path / "run"
    first = _start_cli(outdir, "first_finishes_others_hang")
    _wait_for(lambda: _first_result_written(outdir))
    before = sorted(p.name for p in outdir.iterdir())
    code = cli.main(["run", "--scenario", "5", *_QUICK, "--outdir", str(outdir)])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert "in use by another mlperf-mig run" in err and str(first.pid) in err
    assert sorted(p.name for p in outdir.iterdir()) == before
    first.send_signal(signal.SIGTERM)
    first.communicate(timeout=30)
    assert RunResult.load(outdir).layout == "2g.20gb+1g.10gb"
    assert not [pid for pid in recorded_pids(outdir) if alive(pid)]


@pytest.mark.slow
def test_killed_worker_takes_its_children(tmp_path: Path) -> None:
    """A hung worker is killed with its process group: the child it started is gone too."""
    outdir = tmp_path / "run"
    parent = _start_cli(outdir, "starts_a_child_then_hangs", "5", "--timeout", "10")
    _, stderr = parent.communicate(timeout=60)
    assert parent.returncode == 1, stderr
    children = [int(p.read_text()) for p in (outdir / "pids").glob("*.child")]
    assert children
    assert not [pid for pid in recorded_pids(outdir) if alive(pid)]
    assert RunResult.load(outdir).instances[0].status == "hung"


@pytest.mark.slow
def test_sigterm_in_unified_mode_unlinks_shared_memory(tmp_path: Path) -> None:
    """SIGTERM to a unified run stops the coordinator and the serving workers, writes
    results.json marked interrupted, exits 143 and unlinks its shared-memory blocks."""
    outdir = tmp_path / "run"
    argv = [sys.executable, "-m", "mlperf_mig", "-v", "run", "--scenario", "3x1g.10gb", "--benchmark",
            "bert", "--mode", "unified", "--backend", "null", "--no-accuracy", "--set",
            "min_duration=60000", "--set", "target_qps=480", "--outdir", str(outdir),
            "--worker-entry", "fault_entries:hanging_serve"]  # fmt: skip
    parent = subprocess.Popen(argv, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _wait_for(lambda: (outdir / "pids").is_dir() and len(recorded_pids(outdir)) == 3)
    pids = recorded_pids(outdir)
    time.sleep(1.0)
    parent.send_signal(signal.SIGTERM)
    _, stderr = parent.communicate(timeout=30)
    assert parent.returncode == 128 + signal.SIGTERM
    assert b"leaked" not in stderr and b"Traceback" not in stderr
    assert not [pid for pid in pids if alive(pid)]
    blocks = re.search(rb"shared samples: ([^(]+) \(", stderr)
    assert blocks is not None
    assert not [
        name for name in blocks.group(1).split() if (Path("/dev/shm") / name.decode()).exists()
    ]
    result = RunResult.load(outdir)
    assert result.interrupted and result.layout_status == "interrupted"


def test_ctrl_c_during_engine_builds_writes_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C while the engines are being built still leaves a results.json, marked interrupted,
    with every instance not run."""
    import mlperf_mig
    from mlperf_mig.runner.rounds import IndependentRounds

    def interrupted_build(self: IndependentRounds) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(IndependentRounds, "build_engines", interrupted_build)
    with pytest.raises(KeyboardInterrupt):
        mlperf_mig.run("2g.20gb+1g.10gb", outdir=tmp_path / "run", backend="null", progress=False)
    result = RunResult.load(tmp_path / "run")
    assert result.interrupted
    assert [i.status for i in result.instances] == ["not run", "not run"]
