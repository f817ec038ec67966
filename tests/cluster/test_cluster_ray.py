"""Runs across a real Ray cluster of three nodes on this machine, kept off the network.

The cluster and every command of these tests live in a private network namespace with only `lo`
(as root: `unshare -n`), so nothing Ray does can reach another address, whatever it tries; the
socket test checks that Ray itself binds to loopback only. Each node replays the recorded NVML
state of a VM guest with a MIG-backed vGPU (A100D-2-20C), so the nodes' inventories are the
study's VMs; the runs use `--emulate`, which sets those devices aside and runs on the nodes' CPUs.
The tests run in file order and share one cluster; the last one kills a node.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")

from mlperf_mig.cluster.connect import LOOPBACK_ENV

HERE = Path(__file__).parent
BIN = Path(sys.executable).parent
NS_REASON = "needs root, unshare and nsenter to keep Ray in a private network namespace"
pytestmark = [
    pytest.mark.slow,  # Ray clusters in a network namespace
    pytest.mark.skipif(
        os.geteuid() != 0
        or not shutil.which("unshare")
        or not shutil.which("nsenter")
        or not shutil.which("ip"),
        reason=NS_REASON,
    ),
]
ENV = {**os.environ, **LOOPBACK_ENV}
VGPU_STATE = HERE.parent / "registry" / "fixtures" / "vgpu-a100d-2-20c.json"
QUICK = ["--emulate", "--variant", "tiny", "--set", "min_duration=1000"]
# an Offline run the submission checker accepts, in seconds (the submission pillar's own hint)
CHECKABLE = [
    "--emulate",
    "--variant",
    "tiny",
    "--set",
    "min_duration=600000",
    "--set",
    "performance_sample_count_override=1024",
    "--set",
    "target_qps=0.1",
]


class Namespace:
    """A private network namespace holding the test cluster; runs commands inside it."""

    def __init__(self, holder: subprocess.Popen) -> None:
        self.holder = holder
        self.address = ""

    def command(self, args: list[str]) -> list[str]:
        return ["nsenter", f"--net=/proc/{self.holder.pid}/ns/net", *args]

    def run(self, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.command([str(BIN / "mlperf-mig"), *args]),
            capture_output=True,
            text=True,
            env=ENV,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    def send(self, line: str) -> str:
        assert self.holder.stdin is not None and self.holder.stdout is not None
        self.holder.stdin.write(line + "\n")
        self.holder.stdin.flush()
        return self.holder.stdout.readline().strip()


@pytest.fixture(scope="module", name="cluster")
def fixture_cluster() -> Namespace:
    holder = subprocess.Popen(
        [
            "unshare",
            "-n",
            "sh",
            "-c",
            'ip link set lo up && exec "$0" "$@"',
            sys.executable,
            str(HERE / "ray_nodes.py"),
            "--nodes",
            "3",
            *(f"--replay={k}={VGPU_STATE}" for k in range(3)),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    space = Namespace(holder)
    try:
        assert holder.stdout is not None
        line = holder.stdout.readline().strip()
        assert line.startswith("address "), f"the test cluster did not start: {line!r}"
        space.address = line.split()[1]
        yield space
    finally:
        if holder.poll() is None:
            try:
                space.send("quit")
                holder.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                holder.kill()
                holder.wait()


def _results(folder: Path) -> dict:
    return json.loads((folder / "results.json").read_text())


def test_inventory_reports_each_vms_vgpu_from_discovery_on_that_node(cluster: Namespace) -> None:
    """cluster-info asks each of the three nodes; each finds its A100D-2-20C, one 2g.20gb instance."""
    done = cluster.run("cluster-info", "--cluster", cluster.address, "--json")
    assert done.returncode == 0, done.stderr
    nodes = json.loads(done.stdout)["nodes"]
    assert len({n["node_id"] for n in nodes}) == 3
    for node in nodes:
        (device,) = node["devices"]
        assert (device["kind"], device["profile"], device["vgpu_type"]) == (
            "vgpu",
            "2g.20gb",
            "A100D-2-20C",
        )
        assert node["replayed"] and node["cpus"]


def test_vgpus_of_several_vms_need_a_declared_group(cluster: Namespace) -> None:
    """3x 2g.20gb over the three VMs: refused without --gpu-group, placed with it (declared)."""
    refused = cluster.run(
        "plan", "--scenario", "3x2g.20gb", "--backend", "null", "--cluster", cluster.address
    )
    assert refused.returncode == 2 and "--gpu-group" in refused.stderr
    done = cluster.run(
        "plan",
        "--scenario",
        "3x2g.20gb",
        "--backend",
        "null",
        "--cluster",
        cluster.address,
        "--gpu-group",
        "127.0.0.1",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["partitioning"] == "vgpu" and plan["gpu"] == "A100-PCIE-80GB"
    assert len({i["node"] for i in plan["instances"]}) == 3


def test_plan_shows_the_node_and_device_of_every_instance(cluster: Namespace) -> None:
    """plan --cluster places layout 7 over the three nodes and shows host, node and device."""
    done = cluster.run(
        "plan", "--scenario", "7", "--emulate", "--cluster", cluster.address, "--json"
    )
    assert done.returncode == 0, done.stderr
    instances = json.loads(done.stdout)["instances"]
    assert len({i["node"] for i in instances}) == 3
    assert all(i["host"] and i["device"].startswith("cpu:") for i in instances)
    table = cluster.run("plan", "--scenario", "7", "--emulate", "--cluster", cluster.address)
    assert "host" in table.stdout and "node" in table.stdout and "on Ray cluster" in table.stdout


def test_independent_run_has_a_node_per_instance_and_makes_a_valid_submission(
    cluster: Namespace, tmp_path: Path
) -> None:
    """Layout 7 runs one instance per node round the cluster; the run folder becomes a submission."""
    out = tmp_path / "run"
    done = cluster.run(
        "run", "--scenario", "7", *CHECKABLE, "--cluster", cluster.address, "--outdir", str(out)
    )
    assert done.returncode == 0, done.stderr
    data = _results(out)
    instances = data["instances"]
    assert [i["status"] for i in instances] == ["ok"] * 4
    assert len({i["node"] for i in instances}) == 3
    assert all(i["accuracy_status"] == "ok" for i in instances)
    assert data["cluster"]["start_skew_ms"] is not None
    assert data["cluster"]["grouping"] == "emulated"
    for instance in instances:
        folder = out / instance["name"]
        assert (folder / "performance" / "mlperf_log_detail.txt").is_file()
        assert (folder / "accuracy" / "mlperf_log_accuracy.json").is_file()
        assert (folder / "user.conf").is_file()
        assert instance["performance"]["log_dir"].startswith(str(folder))
    tree = tmp_path / "submission"
    wrote = subprocess.run(
        [
            str(BIN / "mlperf-mig"),
            "submission",
            "--division",
            "open",
            "--submitter",
            "Test",
            "--outdir",
            str(tree),
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert wrote.returncode == 0, wrote.stderr
    checked = subprocess.run(
        [str(BIN / "mlperf-mig"), "submission", "check", str(tree)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_unified_run_dispatches_to_every_node(cluster: Namespace, tmp_path: Path) -> None:
    """Layout 6 in unified mode: one LoadGen log for the layout, every instance served samples."""
    out = tmp_path / "run"
    done = cluster.run(
        "run",
        "--scenario",
        "6",
        "--mode",
        "unified",
        *CHECKABLE,
        "--cluster",
        cluster.address,
        "--outdir",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    data = _results(out)
    assert data["layout_status"] == "ok"
    assert all(i["status"] == "ok" and i["dispatched_samples"] > 0 for i in data["instances"])
    assert (out / "layout" / "performance" / "mlperf_log_detail.txt").is_file()
    tree = tmp_path / "submission"
    wrote = subprocess.run(
        [
            str(BIN / "mlperf-mig"),
            "submission",
            "--division",
            "open",
            "--submitter",
            "Test",
            "--outdir",
            str(tree),
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert wrote.returncode == 0, wrote.stderr
    (system,) = (tree / "open" / "Test" / "systems").glob("*.json")
    described = json.loads(system.read_text())
    assert described["number_of_nodes"] == 3
    assert "network system" in described["host_networking_topology"]


def test_unified_llm_run_streams_tokens_from_the_nodes(cluster: Namespace, tmp_path: Path) -> None:
    """The tiny LLM in unified Server mode over the nodes: one LoadGen log with TTFT and TPOT,
    every request answered by a node's generator, and its accuracy run scored."""
    out = tmp_path / "run"
    done = cluster.run(
        "run",
        "--benchmark",
        "llama3.1-8b",
        "--loadgen-scenario",
        "Server",
        "--scenario",
        "2g.20gb+1g.10gb",
        "--mode",
        "unified",
        *QUICK,
        "--no-telemetry",
        "--cluster",
        cluster.address,
        "--outdir",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    data = _results(out)
    assert data["layout_status"] == "ok" and data["layout_error"] is None
    layout = data["layout_result"]
    assert layout["failed_samples"] == 0
    assert layout["tokens"]["ttft_ns"]["99.00"] > 0 and layout["tokens"]["tpot_ns"]["99.00"] > 0
    instances = data["instances"]
    assert all(i["status"] == "ok" for i in instances)
    assert len({i["node"] for i in instances}) == 2
    assert sum(i["dispatched_samples"] for i in instances) == layout["samples_completed"]
    assert data["layout_accuracy"]["samples_completed"] > 0
    assert (out / "layout" / "accuracy" / "mlperf_log_accuracy.json").is_file()


def test_a_cluster_that_cannot_hold_the_layout_is_refused_before_anything_runs(
    cluster: Namespace, tmp_path: Path
) -> None:
    """A --gpu-group naming no node of the cluster is one line, exit 2, and no run folder."""
    out = tmp_path / "run"
    done = cluster.run(
        "run",
        "--scenario",
        "7",
        "--cluster",
        cluster.address,
        "--gpu-group",
        "10.9.9.9",
        "--outdir",
        str(out),
    )
    assert done.returncode == 2
    assert "no node of the cluster" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_ray_listens_and_connects_on_loopback_only(cluster: Namespace) -> None:
    """Every socket of the test cluster is bound to and connected on loopback addresses."""
    done = subprocess.run(
        cluster.command(["ss", "-H", "-tuan"]), capture_output=True, text=True, check=True
    )
    sockets = [line.split() for line in done.stdout.splitlines() if line.strip()]
    assert sockets, "the cluster has no socket open"
    loopback = ("127.", "[::ffff:127.", "[::1]")
    for fields in sockets:
        local, peer = fields[4], fields[5]
        assert local.startswith(loopback), f"bound beyond loopback: {fields}"
        assert peer.startswith((*loopback, "0.0.0.0:*", "*:*", "[::]:*")), (
            f"talks beyond loopback: {fields}"
        )


def test_ctrl_c_stops_the_remote_instances_and_keeps_what_is_known(
    cluster: Namespace, tmp_path: Path
) -> None:
    """SIGINT during the timed test: exit 130, results.json written, no actor left on the cluster."""
    out = tmp_path / "run"
    run = _start_long_run(cluster, out)
    _wait_ready(run)
    run.send_signal(signal.SIGINT)
    run.communicate(timeout=120)
    assert run.returncode == 130
    data = _results(out)
    assert data["interrupted"] is True
    assert {i["status"] for i in data["instances"]} == {"interrupted"}
    assert _alive_actors(cluster) == 0


def test_a_node_killed_mid_run_loses_its_instance_and_keeps_the_others(
    cluster: Namespace, tmp_path: Path
) -> None:
    """Killing a node during the timed test: its instance is lost, the others' results are on disk, exit 1."""
    out = tmp_path / "run"
    run = _start_long_run(cluster, out)
    _wait_ready(run)
    time.sleep(2)
    word, killed = cluster.send("kill 2").split()
    assert word == "killed"
    _, err = run.communicate(timeout=180)
    assert run.returncode == 1, err
    instances = _results(out)["instances"]
    on_killed = [i for i in instances if i["node"] == killed]
    assert on_killed, "no instance ran on the killed node"
    lost = [(i["status"], i["error"]) for i in on_killed]
    assert all(status == "crashed" and "died" in error for status, error in lost), lost
    kept = [(i["name"], i["status"], i["error"]) for i in instances if i["node"] != killed]
    assert all(status == "ok" for _, status, _ in kept), kept
    assert all(
        (out / i["name"] / "performance" / "mlperf_log_detail.txt").is_file()
        for i in instances
        if i["node"] != killed
    )
    assert _alive_actors(cluster) == 0


def _start_long_run(cluster: Namespace, out: Path) -> subprocess.Popen:
    """Layout 7, null backend, SingleStream for 12 s: long enough to be stopped mid-test."""
    return subprocess.Popen(
        cluster.command(
            [
                str(BIN / "mlperf-mig"),
                "run",
                "--scenario",
                "7",
                "--emulate",
                "--backend",
                "null",
                "--loadgen-scenario",
                "SingleStream",
                "--set",
                "min_duration=12000",
                "--no-accuracy",
                "--cluster",
                cluster.address,
                "--outdir",
                str(out),
            ]
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )


def _wait_ready(run: subprocess.Popen) -> None:
    """Read the run's progress until all four instances are at the start barrier."""
    assert run.stderr is not None
    ready = set()
    deadline = time.monotonic() + 120
    while len(ready) < 4 and time.monotonic() < deadline:
        line = run.stderr.readline()
        if not line:
            break
        if line.rstrip().endswith(": ready"):
            ready.add(line.split("]")[1].split(":")[0].strip())
    assert len(ready) == 4, "the instances never reached the start barrier"


def _alive_actors(cluster: Namespace) -> int:
    """How many actors are alive on the test cluster (Ray's own record, from the GCS)."""
    left = subprocess.run(
        cluster.command(
            [
                sys.executable,
                "-c",
                f"import ray; ray.init(address='{cluster.address}', log_to_driver=False);"
                "print(sum(a['State']=='ALIVE' for a in ray._private.state.actors().values()))",
            ]
        ),
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
    )
    assert left.returncode == 0, left.stdout + left.stderr
    return int(left.stdout.strip().splitlines()[-1])
