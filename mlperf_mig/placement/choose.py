"""The one entry of placement: `place`, which decides where every instance of a run goes.

One GPU (one_gpu.py), a fleet of GPUs of this host (fleet.py) or the GPUs of a cluster's nodes
(nodes.py): the request's options choose which, and the answer is always one Deployment whose
slots name their GPU. A cluster's nodes are handed in by whoever holds the cluster's session
(`nodes_handed`: the public face opens it); placement itself knows no Ray.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Protocol

import attrs

from mlperf_mig import registry
from mlperf_mig.errors import ClusterError
from mlperf_mig.placement.cluster_address import ClusterSpec, parse_cluster
from mlperf_mig.placement.deployment import Deployment, PlacementRequest, as_one_gpu
from mlperf_mig.placement.fleet import choose_system
from mlperf_mig.placement.nodes import NodeInventory, cluster_deployment, cluster_system_deployment

if TYPE_CHECKING:
    from mlperf_mig.registry.catalog import Catalog
    from mlperf_mig.registry.nvml_state import NvmlModule


class ClusterNodes(Protocol):
    """A cluster's nodes as its open session hands them to placement."""

    @property
    def spec(self) -> ClusterSpec: ...

    def inventories(self) -> Sequence[NodeInventory]:
        """Every node's inventory, taken now on its own node."""
        ...


_handed: list[ClusterNodes] = []


@contextlib.contextmanager
def nodes_handed(nodes: ClusterNodes | None) -> Iterator[None]:
    """Plans made in the block place a run on cluster `nodes.spec` on these nodes; None hands
    nothing (a run on this host)."""
    if nodes is None:
        yield
        return
    _handed.append(nodes)
    try:
        yield
    finally:
        _handed.remove(nodes)


def _nodes_of(cluster: str) -> ClusterNodes:
    """The nodes handed for `--cluster` value `cluster`; ClusterError when none were."""
    spec = parse_cluster(cluster)
    for nodes in reversed(_handed):
        if nodes.spec == spec:
            return nodes
    raise ClusterError(
        f"cluster {cluster!r}: no session of that cluster is open to read its nodes from; plan "
        "and run through mlperf_mig.plan / run / sweep (or the CLI), which open it"
    )


def place(
    request: PlacementRequest, *, catalog: Catalog, nvml_source: NvmlModule | None = None
) -> Deployment:
    """Where each instance of the request's layout runs: on the nodes of its cluster, on the
    selected GPUs of this host, or on one GPU (live, shared or emulated on the CPU); the GPUs of
    this host are detected here (through `nvml_source`, a recorded state, when given)."""
    if request.cluster is not None:
        return as_one_gpu(_on_nodes(request, _nodes_of(request.cluster), catalog))
    detection = None if request.emulate else registry.detect(source=nvml_source)
    return choose_system(request, catalog=catalog, detection=detection)


def _on_nodes(request: PlacementRequest, nodes: ClusterNodes, catalog: Catalog) -> Deployment:
    """The request's layout on the cluster's nodes (every GPU of every node with gpus="all")."""
    inventories = list(nodes.inventories())
    if request.emulate:
        inventories = [attrs.evolve(inv, devices=()) for inv in inventories]
    if request.gpus == "all":
        return cluster_system_deployment(
            request.scenario,
            layouts=dict(request.layouts),
            inventories=inventories,
            cluster=str(nodes.spec),
            gpu=request.gpu,
            gpu_count=request.gpu_count,
            catalog=catalog,
        )
    return cluster_deployment(
        request.scenario,
        inventories=inventories,
        cluster=str(nodes.spec),
        gpu=request.gpu,
        gpu_group=request.gpu_group,
        catalog=catalog,
    )
