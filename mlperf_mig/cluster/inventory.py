"""What every node of the cluster has, found by the registry's own discovery run on that node.

The record of a node (NodeInventory) is placement's (placement/nodes.py): placing a layout
on nodes needs no Ray. Taking it on every node, and the cluster-info table, are here.

A node offers its live devices (MIG devices, a MIG-backed vGPU, whole GPUs) as the registry's
`LiveDevice` records its discovery finds there (they cross Ray as plain data, `to_dict`, and are
read back on the driver as untrusted input, `from_dict`); a node without a GPU offers its CPUs as one
emulated partition (on local:N, the CPUs that node was given). `MLPERF_MIG_NVML_REPLAY`, set in
a node's environment before `ray start`, makes that node replay a recorded NVML state instead of
its own (tests, and trying a layout against a colleague's recorded machine).
"""

from __future__ import annotations

import os
import platform
import socket
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mlperf_mig._table import text_table
from mlperf_mig.cluster.connect import LOCAL_NODE_CPUS_ENV, ClusterSession
from mlperf_mig.cluster.ray_api import RayApi, RayRef
from mlperf_mig.errors import ClusterError
from mlperf_mig.placement.nodes import NodeInventory, inventory_rows

if TYPE_CHECKING:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy


REPLAY_ENV = "MLPERF_MIG_NVML_REPLAY"
INVENTORY_TIMEOUT_S = 60.0


def describe_this_node() -> dict[str, Any]:
    """Run on a node: its identity and the devices discovery finds there (plain data)."""
    import ray

    from mlperf_mig import registry
    from mlperf_mig.registry.devices import node_inventory

    replay = os.environ.get(REPLAY_ENV)
    source = registry.RecordedNvml.from_file(replay) if replay else None
    detection = registry.detect(source=source)
    context = ray.get_runtime_context()
    cpus_text = os.environ.get(LOCAL_NODE_CPUS_ENV)
    cpus = [int(c) for c in cpus_text.split(",")] if cpus_text else sorted(os.sched_getaffinity(0))
    return NodeInventory(
        node_id=context.get_node_id(),
        host=socket.gethostname(),
        address=ray.util.get_node_ip_address(),
        ray_version=ray.__version__,
        python_version=platform.python_version(),
        cpus=cpus,
        devices=node_inventory(detection),
        # a lost GPU is said, not left out without a word (the other GPUs still count)
        message="; ".join(
            m for m in (detection.message, *(g.problem for g in detection.gpus if g.lost)) if m
        ),
        replayed=bool(replay),
    ).to_dict()


def pinned(node_id: str) -> NodeAffinitySchedulingStrategy:
    """Ray's scheduling strategy that runs a task or actor on node `node_id` and nowhere else
    (Ray's soft affinity does not keep a zero-CPU actor there)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)


def take_inventory(
    session: ClusterSession, timeout_s: float = INVENTORY_TIMEOUT_S
) -> list[NodeInventory]:
    """Every alive node's inventory, each taken on its own node; ClusterError on a node that
    does not answer in time or runs another Ray or Python version than the driver."""
    import ray

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    if not nodes:
        raise ClusterError(f"the Ray cluster at {session.address} has no alive node")
    task = ray.remote(num_cpus=0, max_retries=0)(describe_this_node)
    refs = {
        n["NodeID"]: task.options(scheduling_strategy=pinned(n["NodeID"])).remote() for n in nodes
    }
    _, pending = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
    if pending:
        late = [node for node, ref in refs.items() if ref in pending]
        for ref in pending:
            ray.cancel(ref, force=True)
        raise ClusterError(
            f"{len(late)} node(s) of the cluster at {session.address} did not report their devices "
            f"within {timeout_s:.0f} s ({', '.join(n[:8] for n in late)}); check that mlperf-mig "
            "is installed on every node, or remove the node"
        )
    inventories = [_node_answer(ray, node, ref) for node, ref in refs.items()]
    check_versions(inventories)
    return sorted(inventories, key=lambda inv: (inv.host, inv.address, inv.node_id))


def _node_answer(ray: RayApi, node: str, ref: RayRef) -> NodeInventory:
    """A node's inventory, or ClusterError saying why that node could not report one (mlperf-mig
    missing there, a discovery error, the node gone, an answer this driver cannot read)."""
    from ray import exceptions

    try:
        return NodeInventory.from_dict(ray.get(ref))
    except ValueError as exc:
        raise ClusterError(
            f"node {node[:8]} reported an inventory this driver cannot read ({exc}); install the "
            "same mlperf-mig on every node"
        ) from None
    except exceptions.RayError as exc:
        cause = getattr(exc, "cause", None) or exc
        reason = " ".join(f"{type(cause).__name__}: {cause}".split())[:300]
        raise ClusterError(
            f"node {node[:8]} could not report its devices ({reason}); install the same "
            "mlperf-mig and Ray on every node, or remove the node from the cluster"
        ) from None


def check_versions(inventories: Sequence[NodeInventory]) -> None:
    """Refuse a cluster whose nodes run another Ray or Python version than this driver."""
    import ray

    here = (ray.__version__, platform.python_version())
    odd = [inv for inv in inventories if (inv.ray_version, inv.python_version) != here]
    if odd:
        found = ", ".join(
            f"{inv.host} ({inv.short_id}): Ray {inv.ray_version}, Python {inv.python_version}"
            for inv in odd
        )
        raise ClusterError(
            f"the driver runs Ray {here[0]} on Python {here[1]} but {found}; install the same "
            f"versions everywhere (pip install 'ray=={here[0]}' on Python {sys.version_info.major}."
            f"{sys.version_info.minor})"
        )


INVENTORY_COLUMNS = ("node", "host", "address", "kind", "gpu", "device", "profile", "cpus")


def _where(session: ClusterSession) -> str:
    """'local:3 at 127.0.0.1:6379', '10.0.0.1:6379', or the address Ray's auto-discovery found
    ('auto' is how it was asked for, not where the cluster is)."""
    address = session.address
    if address == "auto":
        try:
            import ray

            address = ray.get_runtime_context().gcs_address
        except (ImportError, AttributeError, RuntimeError):  # an older Ray, or not connected
            return "found by Ray's auto-discovery (--cluster auto)"
        return f"at {address}, found by Ray's auto-discovery (--cluster auto)"
    spec = str(session.spec)
    return f"{spec} at {address}" if spec != address else f"at {address}"


def inventory_table(session: ClusterSession, inventories: Sequence[NodeInventory]) -> str:
    """The inventory as a text table with a header line naming the cluster."""
    emulated = " (local:N: nodes are processes of this machine, partitions emulated on its CPUs)"
    head = f"Ray cluster {_where(session)}: {len(inventories)} node(s)"
    if session.emulated_nodes:
        head += emulated
    return "\n".join([head, text_table(inventory_rows(inventories), INVENTORY_COLUMNS)])
