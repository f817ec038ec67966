"""Placing a layout's instances on the devices of a cluster's nodes.

All instances of one layout must be slices of one physical GPU. Two ways to know that:
    observed   MIG devices of one GPU seen by one bare-metal node (NVML reports their parent);
    declared   vGPUs in VMs cannot see their parent GPU, so the user names the VMs that share one
               (`--gpu-group` with node addresses, host names or node-ID prefixes); the run says
               the grouping was declared, not observed.
Nodes without a GPU (and every node of local:N) offer emulated CPU partitions: one emulated GPU
whose instances are spread over those nodes as the study's vGPUs were over its VMs, each node's
CPUs split among its instances in proportion to their compute slices.
A cluster that cannot hold the layout is refused before anything starts, showing the layout and
the inventory side by side.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mlperf_mig.cluster.inventory import NodeInventory, inventory_rows
from mlperf_mig.errors import ClusterError, MlperfMigError
from mlperf_mig.runner.placement import (
    Deployment,
    InstanceSlot,
    ScenarioSpec,
    describe_profiles,
    instance_slot,
    resolve_gpu,
    resolve_layout,
    solved_starts,
)


def _in_group(inv: NodeInventory, group: Sequence[str]) -> bool:
    return any(
        name in (inv.address, inv.host) or (len(name) >= 4 and inv.node_id.startswith(name))
        for name in group
    )


def _refusal(what: str, layout_text: str, inventories: Sequence[NodeInventory], fix: str) -> ClusterError:
    devices = "; ".join(
        f"{row['host']} ({row['node']}): {row['kind']} {row['profile']} on {row['gpu']}"
        for row in inventory_rows(inventories)
    )
    return ClusterError(f"{what}: the layout is {layout_text}, the cluster has {devices or 'no node'}; {fix}")


def _slot(index: int, profile: Any, inv: NodeInventory, **fields: Any) -> InstanceSlot:
    return instance_slot(index, profile, node=inv.node_id, host=inv.host, **fields)


def emulated_cluster_deployment(
    layout: Any, scenario: int | None, nodes: Sequence[NodeInventory], cluster: str
) -> Deployment:
    """One emulated GPU spread over GPU-less nodes: instances go round the nodes largest first.
    Each gets CPU time in proportion to its compute slices, as on one host: the whole GPU stands
    for the CPUs of the smallest host (nodes on one host, as with local:N, pool its CPUs), and
    each worker keeps to its share by a duty cycle (runner/cpu_budget.py)."""
    from mlperf_mig.runner.cpu_budget import DUTY_CYCLE, emulated_cpu_budgets

    profiles = list(layout.profiles)
    node_of = {i: nodes[i % len(nodes)] for i in range(len(profiles))}
    hosts: dict[str, list[int]] = {}
    for i, inv in node_of.items():
        hosts.setdefault(inv.host, []).append(i)
    host_cpus = {
        host: sorted({c for inv in nodes if inv.host == host for c in inv.cpus}) for host in hosts
    }
    whole = min(len(cpus) for cpus in host_cpus.values())
    starts = solved_starts(layout)
    slots: dict[int, InstanceSlot] = {}
    notes: list[str] = []
    for host, members in hosts.items():
        budgets = emulated_cpu_budgets(
            [profiles[i].compute_slices for i in members], layout.gpu.compute_slices, host_cpus[host],
            whole_gpu_cpus=whole, enforcement=DUTY_CYCLE,
        )
        notes.extend(n for n in budgets.notes if n not in notes)
        for i, budget in zip(members, budgets.budgets):
            slots[i] = _slot(
                i, profiles[i], node_of[i],
                placement_start=starts[i],
                device="cpu:" + ",".join(map(str, budget.cpus)),
                env={"CUDA_VISIBLE_DEVICES": ""},
                budget=budget,
            )
    unused = {h: len(c) - whole for h, c in host_cpus.items() if len(c) > whole}
    if unused:
        notes.append(
            f"the whole emulated GPU stands for {whole} CPUs, the smallest host's, so that every "
            "instance keeps its proportion; CPUs left unused: "
            + ", ".join(f"{h}: {n}" for h, n in unused.items())
        )
    return Deployment(
        partitioning="emulated", layout=layout, scenario=scenario, gpu_index=None,
        slots=tuple(slots[i] for i in range(len(profiles))), cluster=cluster, grouping="emulated",
        notes=tuple(notes),
    )


def _gpu_groups(
    nodes: Sequence[NodeInventory], gpu_group: Sequence[str] | None
) -> list[tuple[str, list[tuple[NodeInventory, dict[str, Any]]]]]:
    """Candidate physical GPUs: each bare-metal node's GPU (observed), or the declared group."""
    if gpu_group:
        members = [(inv, d) for inv in nodes if _in_group(inv, gpu_group) for d in inv.devices]
        return [("declared", members)] if members else []
    groups: dict[tuple[str, int], list[tuple[NodeInventory, dict[str, Any]]]] = {}
    for inv in nodes:
        for device in inv.devices:
            groups.setdefault((inv.node_id, device["index"]), []).append((inv, device))
    return [("observed", members) for members in groups.values()]


def _match_group(
    layout_for: Any, scenario: ScenarioSpec, grouping: str, members: list[tuple[NodeInventory, dict[str, Any]]],
    inventories: Sequence[NodeInventory],
) -> tuple[Any, int | None, list[tuple[NodeInventory, dict[str, Any]]]] | None:
    """The layout resolved on the group's GPU and one device per instance, or None if it does not fit."""
    models = sorted({d["gpu"] for _, d in members})
    if len(models) > 1:
        raise _refusal(
            f"the {grouping} GPU group mixes GPU models ({', '.join(models)})",
            str(scenario), inventories,
            "all instances of a layout must be slices of one GPU: name VMs of one GPU in --gpu-group",
        )
    layout, number = layout_for(models[0])
    pool = [m for m in members if m[1]["kind"] in ("mig", "vgpu") and m[1]["profile"]]
    chosen = []
    for profile in layout.profiles:
        found = next((m for m in pool if m[1]["profile"] == profile.name), None)
        if found is None:
            return None
        pool.remove(found)
        chosen.append(found)
    return layout, number, chosen


def cluster_deployment(
    scenario: ScenarioSpec,
    *,
    inventories: Sequence[NodeInventory],
    cluster: str,
    gpu: str | None,
    gpu_group: Sequence[str] | None,
    catalog: Any,
) -> Deployment:
    """Where each instance of the layout runs in the cluster (see the module docstring)."""
    with_devices = [inv for inv in inventories if not inv.emulated]
    if gpu_group:
        unknown = [g for g in gpu_group if not any(_in_group(inv, [g]) for inv in inventories)]
        if unknown:
            raise _refusal(
                f"--gpu-group names {', '.join(unknown)}, which is no node of the cluster",
                str(scenario), inventories, "name nodes by address, host name or node ID (see cluster-info)",
            )
    if not with_devices:
        nodes = [inv for inv in inventories if not gpu_group or _in_group(inv, gpu_group)]
        layout, number = resolve_layout(scenario, resolve_gpu(gpu, catalog), catalog)
        return emulated_cluster_deployment(layout, number, nodes, cluster)
    vgpu_only = all(d["kind"] == "vgpu" for inv in with_devices for d in inv.devices)

    def layout_for(model: str) -> tuple[Any, int | None]:
        if gpu is not None and catalog.get(gpu).name != catalog.get(model).name:
            raise ClusterError(
                f"gpu={gpu!r} asked for, but the cluster's GPU group is a {model}; omit --gpu or "
                "pass a cluster of that GPU"
            )
        return resolve_layout(scenario, catalog.get(model), catalog)

    for grouping, members in _gpu_groups(with_devices, gpu_group):
        matched = _match_group(layout_for, scenario, grouping, members, inventories)
        if matched is None:
            continue
        layout, number, chosen = matched
        solved_starts(layout)
        kinds = {d["kind"] for _, d in chosen}
        slots = tuple(
            _slot(
                i, profile, inv,
                placement_start=device["placement_start"],
                device=device["vgpu_type"] or device["uuid"],
                env={"CUDA_VISIBLE_DEVICES": device["uuid"]},
            )
            for i, (profile, (inv, device)) in enumerate(zip(layout.profiles, chosen))
        )
        # one instance on one device is one GPU whatever the grouping
        grouping_word = "observed" if len(chosen) == 1 else grouping
        return Deployment(
            partitioning="vgpu" if kinds == {"vgpu"} else "mig", layout=layout, scenario=number,
            gpu_index=None, slots=slots, cluster=cluster, grouping=grouping_word,
        )
    fix = (
        "vGPUs in VMs cannot see which GPU they are slices of: name the VMs of one GPU with "
        "--gpu-group ADDRESS,ADDRESS,... (the run then says the grouping was declared)"
        if vgpu_only and not gpu_group
        else "create the layout's MIG devices (see `mlperf-mig mig-setup`) or ask for a layout the "
        "cluster carries"
    )
    wanted = scenario if isinstance(scenario, str) else f"study layout {scenario}"
    layout_text = str(wanted)
    if with_devices:
        try:
            layout_text = describe_profiles(
                [p.name for p in resolve_layout(scenario, catalog.get(with_devices[0].devices[0]["gpu"]), catalog)[0].profiles]
            )
        except MlperfMigError:  # the layout does not even resolve on that GPU: show what was asked
            layout_text = str(wanted)
    raise _refusal("the cluster cannot hold the layout", layout_text, inventories, fix)
