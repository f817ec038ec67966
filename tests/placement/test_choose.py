"""The one entry, `place`: a cluster's nodes are handed in by whoever holds its session, and the
runner's rounds likewise (no Ray started here)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import attrs
import pytest

from mlperf_mig import registry
from mlperf_mig.errors import ClusterError
from mlperf_mig.placement import place
from mlperf_mig.placement.choose import nodes_handed
from mlperf_mig.placement.cluster_address import ClusterSpec, parse_cluster
from mlperf_mig.placement.nodes import NodeInventory
from mlperf_mig.runner.execute import choose_rounds
from mlperf_mig.runner.options import RunOptions
from mlperf_mig.runner.plan import make_plan


@attrs.frozen
class _Nodes:
    """Two GPU-less nodes of a cluster, as a session would hand them."""

    spec: ClusterSpec
    nodes: Sequence[NodeInventory]

    def inventories(self) -> Sequence[NodeInventory]:
        return self.nodes


def _node(k: int) -> NodeInventory:
    return NodeInventory(
        node_id=f"{k:02d}" * 20,
        host=f"vm{k}",
        address=f"10.0.0.{k}",
        ray_version="2.60.0",
        python_version="3.11.7",
        cpus=(0,),
        devices=(),
    )


def test_a_cluster_run_is_placed_on_the_handed_nodes() -> None:
    """With the nodes of local:2 handed in, layout 7 goes round both nodes, emulated."""
    nodes = _Nodes(parse_cluster("local:2"), [_node(0), _node(1)])
    with nodes_handed(nodes):
        deployment = place(RunOptions(cluster="local:2"), catalog=registry.default_catalog())
    assert {slot.host for slot in deployment.slots} == {"vm0", "vm1"}
    assert deployment.cluster == "local:2" and deployment.emulated


def test_a_cluster_nobody_handed_is_refused() -> None:
    """Placing on a cluster whose session is not open says how to open it."""
    with pytest.raises(ClusterError, match="open it"):
        place(RunOptions(cluster="local:2"), catalog=registry.default_catalog())


def test_nodes_of_another_cluster_are_not_taken() -> None:
    """Nodes handed for local:3 are not a local:2 run's."""
    nodes = _Nodes(parse_cluster("local:3"), [_node(0)])
    with nodes_handed(nodes), pytest.raises(ClusterError, match="no session"):
        place(RunOptions(cluster="local:2"), catalog=registry.default_catalog())


def test_a_cluster_plan_without_its_rounds_is_refused(tmp_path: Path) -> None:
    """The runner runs a cluster plan only on rounds its session handed over."""
    nodes = _Nodes(parse_cluster("local:2"), [_node(0), _node(1)])
    with nodes_handed(nodes):
        plan = make_plan(RunOptions(cluster="local:2", backend="null", outdir=tmp_path / "run"))
    with pytest.raises(ClusterError, match="no session of it is open"):
        choose_rounds(plan, tmp_path, None)
