"""Runs across VMs and machines, on Ray (the optional extra `cluster`).

The study ran each MIG instance as a MIG-backed vGPU inside its own VM. This package runs a layout
whose instances live on several Ray nodes: it connects to (or, for `local:N`, starts) a Ray cluster
(connect.py), asks every node what it has with the registry's own discovery, run on that node
(inventory.py), hands those inventories to placement, which places the layout's instances on the
nodes' devices (placement/nodes.py), and hands the runner the rounds that run one Ray actor per
instance (handover.py; rounds.py, actors.py). Results, logs and the run folder are the same as
for a run on one host, with a node and host per instance.

Ray is imported only here, and only when a run asks for a cluster.
"""

from mlperf_mig.cluster.connect import (
    ClusterSession,
    ClusterSpec,
    cluster_scope,
    open_cluster,
    parse_cluster,
)

__all__ = ["ClusterSession", "ClusterSpec", "cluster_scope", "open_cluster", "parse_cluster"]
