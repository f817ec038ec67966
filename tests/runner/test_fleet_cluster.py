"""Every GPU of every node (`--cluster ... --gpus all`): placement on recorded nodes, and a run on
a local:2 cluster inside a private network namespace with only `lo` (as tests/cluster does)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from mlperf_mig import registry
from mlperf_mig.cluster.connect import LOOPBACK_ENV
from mlperf_mig.errors import ClusterError
from mlperf_mig.placement.nodes import NodeInventory, cluster_system_deployment
from mlperf_mig.registry.devices import node_inventory
from mlperf_mig.runner.options import RunOptions

from .conftest import NVML_STATES

BIN = Path(sys.executable).parent


def _node(k: int, state: str | None = None, cpus: tuple[int, ...] = (0, 1)) -> NodeInventory:
    """Node k replaying a recorded NVML state (None: a GPU-less node)."""
    devices = ()
    if state is not None:
        devices = node_inventory(
            registry.detect(source=registry.RecordedNvml.from_file(NVML_STATES / state))
        )
    return NodeInventory(
        node_id=f"{k:02d}" * 20,
        host=f"node{k}",
        address=f"10.0.0.{k}",
        ray_version="2.60.0",
        python_version="3.11.7",
        cpus=cpus,
        devices=devices,
    )


def _place(nodes: list[NodeInventory], scenario: Any = 8, **options: Any) -> Any:
    return cluster_system_deployment(
        scenario,
        layouts=options.pop("layouts", {}),
        inventories=nodes,
        cluster="local:2",
        gpu=options.pop("gpu", None),
        gpu_count=options.pop("gpu_count", None),
        catalog=registry.default_catalog(),
    )


def test_two_dgx_nodes_are_112_instances() -> None:
    """Two recorded DGX-A100 nodes: 16 GPUs, seven instances each, named by node and GPU."""
    deployment = _place([_node(0, "dgx-a100-8x-7x1g.json"), _node(1, "dgx-a100-8x-7x1g.json")])
    assert len(deployment.slots) == 112 and len(deployment.parts) == 16
    assert deployment.slots[7].name == "n0-g1-i0-1g.10gb"
    assert (
        deployment.slots[56].name == "n1-g0-i0-1g.10gb" and deployment.slots[56].node == "01" * 20
    )
    assert deployment.grouping == "observed" and deployment.partitioning == "mig"


def test_gpus_carrying_different_layouts() -> None:
    """A node with an A100 on layout 7 and an H200 on 7x 1g: each GPU gets its own layout."""
    deployment = _place([_node(0, "two-models-a100-h200.json")], scenario=7, layouts={1: 8})
    assert [str(p.layout) for p in deployment.parts] == ["3x2g.20gb+1g.10gb", "7x1g.18gb"]


def test_emulated_nodes_each_emulate_their_gpus() -> None:
    """Two GPU-less nodes with gpu_count 2: four emulated GPUs, each on its node's CPU share."""
    deployment = _place([_node(0, cpus=(0,)), _node(1, cpus=(1,))], gpu_count=2)
    assert Counter((p.node[:2], p.index) for p in deployment.parts) == {
        ("00", 0): 1,
        ("00", 1): 1,
        ("01", 0): 1,
        ("01", 1): 1,
    }
    assert {s.cpus for s in deployment.slots if s.node == "01" * 20} == {(1,)}
    assert deployment.grouping == "emulated"


def test_node_gpu_with_another_layout_is_named() -> None:
    """A node GPU carrying another layout is refused naming the node, the GPU and both layouts."""
    with pytest.raises(ClusterError, match=r"node node0 \(00000000\) GPU 1 .*carries"):
        _place([_node(0, "two-models-a100-h200.json")], scenario=7)


def test_node_gpu_without_mig_is_refused() -> None:
    """A node GPU with MIG off cannot be a whole GPU of the system."""
    with pytest.raises(ClusterError, match=r"GPU 1 .*without MIG"):
        _place([_node(0, "a100-pair-mig-off.json")], scenario=7)


def test_layout_for_a_gpu_no_node_has() -> None:
    """--layout for GPU 5 on nodes with two GPUs is refused."""
    with pytest.raises(ClusterError, match="names GPU 5, which no node"):
        _place([_node(0, "two-models-a100-h200.json")], scenario=7, layouts={1: 8, 5: 8})


def test_gpu_count_on_a_cluster_needs_gpus_all() -> None:
    """--gpu-count on a cluster without --gpus all is refused before a cluster starts."""
    with pytest.raises(ClusterError, match="--gpus all"):
        RunOptions(cluster="local:2", gpu_count=2)


# --- a real run --------------------------------------------------------------------------------
NS_REASON = "needs root, unshare and ip to keep Ray in a private network namespace"


@pytest.mark.slow
@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"), reason=NS_REASON
)
@pytest.mark.parametrize("mode", ["independent", "unified"])
def test_local_cluster_runs_every_emulated_gpu_of_every_node(tmp_path: Path, mode: str) -> None:
    """local:2 with two emulated GPUs per node: eight instances, per node, GPU and instance."""
    pytest.importorskip("ray")
    outdir = tmp_path / "run"
    command = [
        str(BIN / "mlperf-mig"),
        "run",
        "--cluster",
        "local:2",
        "--gpus",
        "all",
        "--gpu-count",
        "2",
        "--scenario",
        "1g.10gb+1g.10gb",
        "--backend",
        "null",
        "--no-accuracy",
        "--no-telemetry",
        "--set",
        "min_duration=300",
        "--set",
        "target_qps=500",
        "--outdir",
        str(outdir),
        "--json",
        "--mode",
        mode,
    ]
    script = 'ip link set lo up && exec "$@"'
    done = subprocess.run(
        ["unshare", "-n", "sh", "-c", script, "sh", *command],
        capture_output=True,
        text=True,
        env={**os.environ, **LOOPBACK_ENV},
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(done.stdout)
    assert len(data["gpus"]) == 4 and {g["node"] for g in data["gpus"]} == set(
        data["cluster"]["nodes"]
    )
    assert all(i["status"] == "ok" for i in data["instances"])
    assert all(g["subtotal"] is not None for g in data["gpus"])
    assert sum(g["subtotal"] for g in data["gpus"]) == pytest.approx(
        data["aggregate"]["total_throughput"]
    )
    assert {i["name"][:5] for i in data["instances"]} == {"n0-g0", "n0-g1", "n1-g0", "n1-g1"}
