"""Cluster nodes: what each node offers (NodeInventory), and placing a layout's instances on them.

A node offers its live devices (MIG devices, a MIG-backed vGPU, whole GPUs) as the registry's
`LiveDevice` records, or, without a GPU, its CPUs. The cluster (cluster/inventory.py) takes the
record on each Ray node and sends it to the driver as plain data (`to_dict`), where it is read back
as untrusted input (`from_dict`) and handed here; what is decided here needs no Ray.

All instances of one layout must be slices of one physical GPU. Two ways to know that:
    observed   MIG devices of one GPU seen by one bare-metal node (NVML reports their parent);
    declared   vGPUs in VMs cannot see their parent GPU, so the user names the VMs that share one
               (`--gpu-group` with node addresses, host names or node-ID prefixes); the run says
               the grouping was declared, not observed.
Nodes without a GPU (and every node of local:N) offer emulated CPU partitions: one emulated GPU
whose instances are spread over those nodes as the study's vGPUs were over its VMs, each node's
CPUs split among its instances in proportion to their compute slices.
A cluster that cannot hold the layout is refused before anything starts, showing the layout and
the inventory side by side. Devices are matched to the layout by the registry's one matcher
(`assign_devices`, by profile ID), taking some of a group's or a node GPU's instances (not exact:
the layout need not use them all).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from mlperf_mig.emulation.cpu_budget import DUTY_CYCLE, emulated_cpu_budgets
from mlperf_mig.errors import ClusterError, MlperfMigError
from mlperf_mig.placement.deployment import (
    Deployment,
    InstanceSlot,
    ScenarioSpec,
    instance_slot,
    join_gpus,
)
from mlperf_mig.placement.one_gpu import (
    emulated_gpu_cpus,
    resolve_gpu,
    resolve_layout,
    solved_starts,
)
from mlperf_mig.registry.devices import (
    LiveDevice,
    assign_devices,
    carried_and_wanted,
    describe_profiles,
)

if TYPE_CHECKING:
    from mlperf_mig._io import JsonData
    from mlperf_mig.registry.catalog import Catalog
    from mlperf_mig.registry.model import Layout, Profile


_v = attrs.validators
_TEXT = _v.instance_of(str)


@attrs.frozen(kw_only=True)
class NodeInventory:
    """One Ray node: where it is, what Ray and Python it runs, and the devices it offers."""

    node_id: str = attrs.field(validator=_TEXT)
    host: str = attrs.field(validator=_TEXT)
    address: str = attrs.field(validator=_TEXT)
    ray_version: str = attrs.field(validator=_TEXT)
    python_version: str = attrs.field(validator=_TEXT)
    cpus: tuple[int, ...] = attrs.field(
        converter=tuple[int, ...],
        validator=_v.deep_iterable(_v.and_(_v.instance_of(int), _v.ge(0))),
    )
    devices: tuple[LiveDevice, ...] = attrs.field(
        converter=tuple[LiveDevice, ...], validator=_v.deep_iterable(_v.instance_of(LiveDevice))
    )
    message: str = attrs.field(
        default="", validator=_TEXT
    )  # why the node has no GPU device, and each lost GPU's problem (discovery's words)
    replayed: bool = attrs.field(default=False, validator=_v.instance_of(bool))

    @property
    def short_id(self) -> str:
        return self.node_id[:8]

    @property
    def emulated(self) -> bool:
        """True when the node has no GPU device and offers its CPUs instead."""
        return not self.devices

    def to_dict(self) -> dict[str, Any]:
        """Plain data, as it crosses Ray and as `cluster-info --json` prints it."""
        data = attrs.asdict(self, recurse=False)
        data["cpus"] = list(self.cpus)
        data["devices"] = [d.to_dict() for d in self.devices]
        return data

    @classmethod
    def from_dict(cls, data: JsonData) -> NodeInventory:
        """The inventory a node sent, read as untrusted input: ValueError naming what is wrong."""
        fields = {f.name for f in attrs.fields(cls)}
        if not isinstance(data, Mapping) or set(data) != fields:
            got = sorted(data) if isinstance(data, Mapping) else type(data).__name__
            raise ValueError(f"a node inventory must have the keys {sorted(fields)}, got {got}")
        devices = data["devices"]
        if not isinstance(devices, list | tuple):
            raise ValueError(f"devices must be a list, got {type(devices).__name__}")
        try:
            return cls(**{**data, "devices": [LiveDevice.from_dict(d) for d in devices]})
        except TypeError as exc:
            raise ValueError(str(exc)) from None


def inventory_rows(inventories: Sequence[NodeInventory]) -> list[dict[str, Any]]:
    """One row per device (or per emulated node) for `cluster-info`."""
    rows = []
    for inv in inventories:
        base = {
            "node": inv.short_id,
            "host": inv.host,
            "address": inv.address,
            "cpus": len(inv.cpus),
        }
        if inv.emulated:
            rows.append(
                {
                    **base,
                    "kind": "emulated",
                    "gpu": "-",
                    "device": "cpu:" + ",".join(map(str, inv.cpus)),
                    "profile": "- (CPU partition)",
                }
            )
        for device in inv.devices:
            rows.append(
                {
                    **base,
                    "kind": device.kind,
                    "gpu": device.gpu_model,
                    "device": device.vgpu_type or device.uuid,
                    "profile": device.profile.name if device.profile else "whole GPU",
                }
            )
    return rows


def _in_group(inv: NodeInventory, group: Sequence[str]) -> bool:
    return any(
        name in (inv.address, inv.host) or (len(name) >= 4 and inv.node_id.startswith(name))
        for name in group
    )


def _refusal(
    what: str, layout_text: str, inventories: Sequence[NodeInventory], fix: str
) -> ClusterError:
    devices = "; ".join(
        f"{row['host']} ({row['node']}): {row['kind']} {row['profile']} on {row['gpu']}"
        for row in inventory_rows(inventories)
    )
    return ClusterError(
        f"{what}: the layout is {layout_text}, the cluster has {devices or 'no node'}; {fix}"
    )


def _slot(index: int, profile: Profile, inv: NodeInventory, **fields: Any) -> InstanceSlot:
    return instance_slot(index, profile, node=inv.node_id, host=inv.host, **fields)


def emulated_cluster_deployment(
    layout: Layout, scenario: int | None, nodes: Sequence[NodeInventory], cluster: str
) -> Deployment:
    """One emulated GPU spread over GPU-less nodes: instances go round the nodes largest first.
    Each gets CPU time in proportion to its compute slices, as on one host: the whole GPU stands
    for the CPUs of the smallest host (nodes on one host, as with local:N, pool its CPUs), and
    each worker keeps to its share by a CPU quota (local:N, where this machine allows one) or a
    duty cycle (emulation/cpu_budget.py)."""
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
    # local:N nodes are processes of this machine: their actors take CPU quotas where this
    # machine allows them; other nodes' machines are not probed from here, they duty-cycle
    enforcement = None if cluster.startswith("local:") else DUTY_CYCLE
    for host, members in hosts.items():
        budgets = emulated_cpu_budgets(
            [profiles[i].compute_slices for i in members],
            layout.gpu.compute_slices,
            host_cpus[host],
            whole_gpu_cpus=whole,
            enforcement=enforcement,
        )
        notes.extend(n for n in budgets.notes if n not in notes)
        for i, budget in zip(members, budgets.budgets):
            slots[i] = _slot(
                i,
                profiles[i],
                node_of[i],
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
        partitioning="emulated",
        layout=layout,
        scenario=scenario,
        gpu_index=None,
        slots=tuple(slots[i] for i in range(len(profiles))),
        cluster=cluster,
        grouping="emulated",
        notes=tuple(notes),
    )


_Member = tuple[NodeInventory, LiveDevice]


def _gpu_groups(
    nodes: Sequence[NodeInventory], gpu_group: Sequence[str] | None
) -> list[tuple[str, list[_Member]]]:
    """Candidate physical GPUs: each bare-metal node's GPU (observed), or the declared group."""
    if gpu_group:
        members = [(inv, d) for inv in nodes if _in_group(inv, gpu_group) for d in inv.devices]
        return [("declared", members)] if members else []
    groups: dict[tuple[str, int], list[_Member]] = {}
    for inv in nodes:
        for device in inv.devices:
            groups.setdefault((inv.node_id, device.gpu_index), []).append((inv, device))
    return [("observed", members) for members in groups.values()]


def _match_group(
    layout_for: Callable[[str], tuple[Layout, int | None]],
    scenario: ScenarioSpec,
    grouping: str,
    members: list[_Member],
    inventories: Sequence[NodeInventory],
) -> tuple[Layout, int | None, list[_Member]] | None:
    """The layout resolved on the group's GPU and one device per instance, or None if it does not fit."""
    models = sorted({d.gpu_model for _, d in members})
    if len(models) > 1:
        raise _refusal(
            f"the {grouping} GPU group mixes GPU models ({', '.join(models)})",
            str(scenario),
            inventories,
            "all instances of a layout must be slices of one GPU: name VMs of one GPU in --gpu-group",
        )
    layout, number = layout_for(models[0])
    chosen = assign_devices(layout.profiles, [d for _, d in members], exact=False)
    return None if chosen is None else (layout, number, [members[i] for i in chosen])


def cluster_deployment(
    scenario: ScenarioSpec,
    *,
    inventories: Sequence[NodeInventory],
    cluster: str,
    gpu: str | None,
    gpu_group: Sequence[str] | None,
    catalog: Catalog,
) -> Deployment:
    """Where each instance of the layout runs in the cluster (see the module docstring)."""
    with_devices = [inv for inv in inventories if not inv.emulated]
    if gpu_group:
        unknown = [g for g in gpu_group if not any(_in_group(inv, [g]) for inv in inventories)]
        if unknown:
            raise _refusal(
                f"--gpu-group names {', '.join(unknown)}, which is no node of the cluster",
                str(scenario),
                inventories,
                "name nodes by address, host name or node ID (see cluster-info)",
            )
    if not with_devices:
        nodes = [inv for inv in inventories if not gpu_group or _in_group(inv, gpu_group)]
        layout, number = resolve_layout(scenario, resolve_gpu(gpu, catalog), catalog)
        return emulated_cluster_deployment(layout, number, nodes, cluster)
    vgpu_only = all(d.kind == "vgpu" for inv in with_devices for d in inv.devices)

    def layout_for(model: str) -> tuple[Layout, int | None]:
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
        kinds = {d.kind for _, d in chosen}
        slots = tuple(
            _slot(
                i,
                profile,
                inv,
                placement_start=device.placement_start,
                device=device.vgpu_type or device.uuid,
                env={"CUDA_VISIBLE_DEVICES": device.uuid},
            )
            for i, (profile, (inv, device)) in enumerate(zip(layout.profiles, chosen))
        )
        # one instance on one device is one GPU whatever the grouping
        grouping_word = "observed" if len(chosen) == 1 else grouping
        return Deployment(
            partitioning="vgpu" if kinds == {"vgpu"} else "mig",
            layout=layout,
            scenario=number,
            gpu_index=None,
            slots=slots,
            cluster=cluster,
            grouping=grouping_word,
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
                [
                    p.name
                    for p in resolve_layout(
                        scenario, catalog.get(with_devices[0].devices[0].gpu_model), catalog
                    )[0].profiles
                ]
            )
        except MlperfMigError:  # the layout does not even resolve on that GPU: show what was asked
            layout_text = str(wanted)
    raise _refusal("the cluster cannot hold the layout", layout_text, inventories, fix)


def cluster_system_deployment(
    scenario: ScenarioSpec,
    *,
    layouts: Mapping[int, ScenarioSpec],
    inventories: Sequence[NodeInventory],
    cluster: str,
    gpu: str | None,
    gpu_count: int | None,
    catalog: Catalog,
) -> Deployment:
    """Every GPU of every node (`gpus="all"`): each node's MIG GPUs with the layout asked of
    that GPU index (`layouts`, else `scenario`, translated per GPU model), matched on the node's
    own devices; GPU-less nodes each emulate `gpu_count` GPUs of `gpu` on their CPUs (each GPU
    its share, kept by a duty cycle). A node GPU that cannot carry its layout is refused, naming
    the node and the GPU."""
    with_devices = [inv for inv in inventories if not inv.emulated]
    parts: list[tuple[int, Deployment]] = []
    for inv in with_devices or inventories:
        if inv.emulated:
            parts += _emulated_node_gpus(
                scenario, layouts, inv, gpu, gpu_count or 1, catalog, cluster
            )
            continue
        if gpu_count is not None:
            raise ClusterError(
                f"gpu_count / --gpu-count emulates GPUs on GPU-less nodes, but node {inv.host} "
                f"({inv.short_id}) has GPUs; drop --gpu-count, or add --emulate to emulate on every node"
            )
        by_gpu: dict[int, list[LiveDevice]] = {}
        for device in inv.devices:
            by_gpu.setdefault(device.gpu_index, []).append(device)
        for index, devices in sorted(by_gpu.items()):
            parts.append(
                (index, _node_gpu(scenario, layouts, inv, index, devices, gpu, cluster, catalog))
            )
    missing = sorted(set(layouts) - {index for index, _ in parts})
    if missing:
        raise ClusterError(
            f"layouts / --layout names GPU {', '.join(map(str, missing))}, which no node of the "
            f"cluster has; the nodes have GPUs {', '.join(sorted({str(i) for i, _ in parts}))}"
        )
    joined = join_gpus(parts)
    grouping = "emulated" if joined.emulated else "observed"
    return attrs.evolve(joined, cluster=cluster, grouping=grouping)


def _node_gpu(
    scenario: ScenarioSpec,
    layouts: Mapping[int, ScenarioSpec],
    inv: NodeInventory,
    index: int,
    devices: list[LiveDevice],
    gpu: str | None,
    cluster: str,
    catalog: Catalog,
) -> Deployment:
    """GPU `index` of node `inv` carrying its layout on its MIG devices (it may carry more)."""
    where = f"node {inv.host} ({inv.short_id}) GPU {index}"
    model = devices[0].gpu_model
    if any(d.kind != "mig" for d in devices):
        kind = devices[0].kind
        what = "a vGPU in a VM, whose parent GPU it cannot see" if kind == "vgpu" else "without MIG"
        raise ClusterError(
            f"{where} ({model}) is {what}, so it cannot be one whole GPU of the system; run "
            "without --gpus all (with --gpu-group for the VMs of one GPU), or enable MIG there"
        )
    if gpu is not None and catalog.get(gpu).name != catalog.get(model).name:
        raise ClusterError(f"gpu={gpu!r} asked for, but {where} is a {model}; omit --gpu")
    wanted = layouts.get(index, scenario)
    try:
        layout, number = resolve_layout(wanted, catalog.get(model), catalog)
        solved_starts(layout)
    except MlperfMigError as exc:
        raise type(exc)(f"{where} ({model}): {exc}") from None
    chosen = assign_devices(layout.profiles, devices, exact=False)
    if chosen is None:
        raise ClusterError(
            f"{where} ({model}) {carried_and_wanted(devices, layout)}; create it there (see "
            f"`mlperf-mig mig-setup --gpu {model}`) or pass --layout {index}=LAYOUT with the "
            "layout it carries"
        )
    slots = tuple(
        _slot(
            i,
            profile,
            inv,
            placement_start=devices[k].placement_start,
            device=devices[k].uuid,
            env={"CUDA_VISIBLE_DEVICES": devices[k].uuid},
        )
        for i, (profile, k) in enumerate(zip(layout.profiles, chosen))
    )
    return Deployment(
        partitioning="mig",
        layout=layout,
        scenario=number,
        gpu_index=index,
        slots=slots,
        cluster=cluster,
        grouping="observed",
    )


def _emulated_node_gpus(
    scenario: ScenarioSpec,
    layouts: Mapping[int, ScenarioSpec],
    inv: NodeInventory,
    gpu: str | None,
    count: int,
    catalog: Catalog,
    cluster: str,
) -> list[tuple[int, Deployment]]:
    """`count` emulated GPUs on a GPU-less node, each on its share of the node's CPUs, kept by
    a CPU quota on local:N (this machine's processes, where it allows one), else a duty cycle."""
    model = resolve_gpu(gpu, catalog)
    whole = len(set(inv.cpus)) / count
    enforcement = None if cluster.startswith("local:") else DUTY_CYCLE
    gpus = []
    for index, share in enumerate(emulated_gpu_cpus(count, inv.cpus)):
        layout, number = resolve_layout(layouts.get(index, scenario), model, catalog)
        budgets = emulated_cpu_budgets(
            [p.compute_slices for p in layout.profiles],
            layout.gpu.compute_slices,
            share,
            whole_gpu_cpus=min(whole, len(share)),
            enforcement=enforcement,
        )
        slots = tuple(
            _slot(
                i,
                profile,
                inv,
                placement_start=start,
                device="cpu:" + ",".join(map(str, budget.cpus)),
                env={"CUDA_VISIBLE_DEVICES": ""},
                budget=budget,
            )
            for i, (profile, budget, start) in enumerate(
                zip(layout.profiles, budgets.budgets, solved_starts(layout))
            )
        )
        gpus.append(
            (
                index,
                Deployment(
                    partitioning="emulated",
                    layout=layout,
                    scenario=number,
                    gpu_index=index,
                    slots=slots,
                    grouping="emulated",
                    notes=budgets.notes,
                ),
            )
        )
    return gpus
