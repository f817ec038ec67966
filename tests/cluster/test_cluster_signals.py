"""SIGTERM to a `--cluster local:2` run stops it as it stops a local run (a real Ray cluster).

The run lives in a private network namespace with only `lo` (as root: `unshare -n`), as the other
Ray tests do. Ray replaces the driver's SIGTERM handler when it starts; the run must still exit
143 with its results written, print no stack dump, and leave no Ray process behind, nor any
instance's scratch folder in the nodes' temp folder (issue 33 item 8). Every process
of the run carries a tag in its environment (Ray's processes inherit the driver's), which is how
the test finds what is left.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

pytest.importorskip("ray")

from mlperf_mig.cluster.connect import LOOPBACK_ENV

BIN = Path(sys.executable).parent
pytestmark = [
    pytest.mark.slow,  # a Ray cluster in a network namespace
    pytest.mark.skipif(
        os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"),
        reason="needs root, unshare and ip to keep Ray in a private network namespace",
    ),
]
TAG_VARIABLE = "MLPERF_MIG_TEST_RUN_TAG"
DUMP_MARKERS = ("*** SIGTERM received", "Stack trace", "Fatal Python error", "Traceback")


def _tagged(tag: str) -> list[str]:
    """The command lines of this machine's processes whose environment carries `tag`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if f"{TAG_VARIABLE}={tag}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                found.append(
                    (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                )
        except OSError:  # gone meanwhile, or a zombie
            continue
    return found


def test_sigterm_stops_a_local_cluster_run_with_its_results_and_no_process_left(
    tmp_path: Path,
) -> None:
    """SIGTERM in the timed test of a local:2 run: exit 143, results.json, no stack dump, no Ray
    process and no scratch folder left."""
    tag = uuid.uuid4().hex
    out = tmp_path / "run"
    run = subprocess.Popen(
        [
            "unshare",
            "-n",
            "sh",
            "-c",
            'ip link set lo up && exec "$0" "$@"',
            str(BIN / "mlperf-mig"),
            "run",
            "--scenario",
            "2x3g.40gb",
            "--emulate",
            "--backend",
            "null",
            "--loadgen-scenario",
            "SingleStream",
            "--set",
            "min_duration=12000",
            "--no-accuracy",
            "--cluster",
            "local:2",
            "--outdir",
            str(out),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **LOOPBACK_ENV, TAG_VARIABLE: tag},
    )
    try:
        assert run.stderr is not None
        seen, ready = [], 0
        deadline = time.monotonic() + 120
        while ready < 2 and time.monotonic() < deadline:
            line = run.stderr.readline()
            if not line:
                break
            seen.append(line)
            ready += line.rstrip().endswith(": ready")
        assert ready == 2, "the instances never reached the start barrier: " + "".join(seen)
        running = _tagged(tag)
        assert any("gcs_server" in c for c in running) and any("raylet" in c for c in running), (
            running
        )
        run.send_signal(signal.SIGTERM)
        _, rest = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    stderr = "".join(seen) + rest
    assert run.returncode == 128 + signal.SIGTERM, stderr
    assert stderr.rstrip().endswith("mlperf-mig: interrupted (SIGTERM)")
    assert not [m for m in DUMP_MARKERS if m in stderr], stderr
    data = json.loads((out / "results.json").read_text())
    assert data["interrupted"] is True
    assert [i["status"] for i in data["instances"]] == ["interrupted", "interrupted"]
    left = _tagged(tag)
    for _ in range(100):  # a raylet's workers may take a moment to follow it
        if not left:
            break
        time.sleep(0.1)
        left = _tagged(tag)
    assert left == []
    # the actors were killed at the barrier; their folders (named by the driver's pid) are gone
    assert sorted(Path(tempfile.gettempdir()).glob(f"mlperf-mig-{run.pid}-*")) == []
