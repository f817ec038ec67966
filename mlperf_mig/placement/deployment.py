"""What a placement decides: the Deployment (the layout on its GPUs and where each instance runs).

A Deployment is made by one of the placements of this package (one GPU, a fleet of GPUs, the
nodes of a cluster) and read by everything after it: the runner's plan and rounds, the results
(a GpuPart per GPU, its instances named and counted here) and the submission's system names.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import attrs

if TYPE_CHECKING:
    from mlperf_mig.emulation.cpu_budget import CpuBudget
    from mlperf_mig.registry.model import Gpu, Layout, Profile


PARTITIONINGS = ("mig", "vgpu", "shared", "emulated")

ScenarioSpec = int | str | Sequence[str]


class PlacementRequest(Protocol):
    """What a placement reads of a run's options (runner/options.py's RunOptions is one)."""

    @property
    def scenario(self) -> ScenarioSpec: ...
    @property
    def gpu(self) -> str | None: ...
    @property
    def shared(self) -> bool: ...
    @property
    def emulate(self) -> bool: ...
    @property
    def cpus(self) -> tuple[int, ...] | None: ...
    @property
    def gpus(self) -> tuple[int, ...] | str | None: ...
    @property
    def layouts(self) -> tuple[tuple[int, ScenarioSpec], ...]: ...
    @property
    def gpu_count(self) -> int | None: ...
    @property
    def cluster(self) -> str | None: ...
    @property
    def gpu_group(self) -> tuple[str, ...] | None: ...


@attrs.frozen(kw_only=True)
class InstanceSlot:
    """One instance of the layout and the device, environment and CPUs its worker gets."""

    index: int
    name: str  # "i0-2g.20gb": the instance's folder name
    profile: str
    compute_slices: int
    memory_slices: int
    placement_start: int | None
    device: str  # MIG-<uuid>, GPU-<uuid> (vgpu, shared) or "cpu:0,1" (emulated)
    env: dict[str, str] = attrs.field(factory=dict)
    cpus: tuple[int, ...] | None = None
    threads: int | None = None
    node: str | None = None  # the Ray node it runs on (cluster runs); None: this host
    host: str | None = None  # that node's host name
    gpu_index: int | None = (
        None  # the GPU it is a slice of (NVML index on its node; emulated 0..N-1)
    )
    # emulated: CPU-seconds per second it may use, and how that is enforced (emulation/cpu_budget.py)
    cpu_share: float | None = None
    cpu_budget: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen(kw_only=True)
class GpuPart:
    """One GPU of a deployment: its index on its node, the layout it carries and how."""

    index: int
    layout: Layout  # on this GPU
    partitioning: str = attrs.field(validator=attrs.validators.in_(PARTITIONINGS))
    scenario: int | None = None
    node: str | None = None
    host: str | None = None

    @property
    def name(self) -> str:
        """The GPU's catalog name."""
        return self.layout.gpu.name

    def holds(self, slot: InstanceSlot) -> bool:
        """Whether `slot` is one of this GPU's instances."""
        # one GPU of a cluster sits on one node; an emulated GPU spread over nodes has none
        return slot.gpu_index == self.index and (self.node is None or slot.node == self.node)


@attrs.frozen(kw_only=True)
class Deployment:
    """The resolved layout on its GPU and where each instance runs."""

    partitioning: str = attrs.field(validator=attrs.validators.in_(PARTITIONINGS))
    layout: Layout
    scenario: int | None  # the study's layout number when one was asked for
    gpu_index: int | None
    slots: tuple[InstanceSlot, ...]
    cluster: str | None = None  # the --cluster value of a run across Ray nodes
    grouping: str | None = None  # cluster runs: "observed" or "declared" (--gpu-group) one GPU
    # a run over several GPUs (placement/fleet.py): one part per GPU, `layout` is the first's;
    # () for a layout on one GPU
    gpus: tuple[GpuPart, ...] = attrs.field(default=(), converter=tuple[GpuPart, ...])
    # emulated: what every result must say about the CPU budgets (cpu_budget.CpuBudgets.notes)
    notes: tuple[str, ...] = attrs.field(default=(), converter=tuple[str, ...])

    @property
    def gpu(self) -> Gpu:
        """The registry Gpu the layout is resolved on (the first GPU's, over several)."""
        return self.layout.gpu

    @property
    def parts(self) -> tuple[GpuPart, ...]:
        """The GPUs of the deployment, one part for a layout on one GPU too."""
        if self.gpus:
            return self.gpus
        return (
            GpuPart(
                index=self.gpu_index or 0,
                layout=self.layout,
                partitioning=self.partitioning,
                scenario=self.scenario,
            ),
        )

    @property
    def multi_gpu(self) -> bool:
        """Whether the instances are slices of several GPUs."""
        return len(self.gpus) > 1

    @property
    def emulated(self) -> bool:
        return self.partitioning == "emulated"


def instance_name(index: int, profile: str) -> str:
    return f"i{index}-{profile}"


def instance_slot(
    index: int,
    profile: Profile,
    *,
    placement_start: int | None,
    device: str,
    env: dict[str, str],
    cpus: tuple[int, ...] | None = None,
    node: str | None = None,
    host: str | None = None,
    budget: CpuBudget | None = None,
) -> InstanceSlot:
    """The slot of instance `index` of registry Profile `profile`; threads follow `cpus`, or the
    emulated CPU `budget` (a cpu_budget.CpuBudget: its CPUs, share, threads and enforcement)."""
    if budget is not None:
        cpus = budget.cpus
    return InstanceSlot(
        index=index,
        name=instance_name(index, profile.name),
        profile=profile.name,
        compute_slices=profile.compute_slices,
        memory_slices=profile.memory_slices,
        placement_start=placement_start,
        device=device,
        env=env,
        cpus=cpus,
        threads=budget.threads if budget is not None else None if cpus is None else len(set(cpus)),
        node=node,
        host=host,
        cpu_share=None if budget is None else budget.share,
        cpu_budget=None if budget is None else budget.enforced_by,
    )


def without_cpu_budgets(deployment: Deployment, backend: str) -> Deployment:
    """An emulated deployment for a backend that computes no model (null): no CPU budgets, as
    there is no compute whose proportions to keep; the instances keep their CPU sets, and the
    notes say so. Budgets would make such a run measure the quotas, not the harness."""
    slots = tuple(attrs.evolve(slot, cpu_share=None, cpu_budget=None) for slot in deployment.slots)
    note = (
        f"no CPU budgets: the {backend} backend computes no model, so there are no slice "
        "proportions to keep; the instances share the CPUs (a measurement of the harness)"
    )
    return attrs.evolve(deployment, slots=slots, notes=(note,))


# --- one GPU, or several joined ----------------------------------------------------------------
def as_one_gpu(deployment: Deployment) -> Deployment:
    """A one-GPU deployment with its part and each slot's GPU index filled in."""
    if deployment.gpus:
        return deployment
    part = deployment.parts[0]
    slots = tuple(attrs.evolve(s, gpu_index=part.index) for s in deployment.slots)
    return attrs.evolve(deployment, slots=slots, gpus=(part,))


def join_gpus(deployments: Sequence[tuple[int, Deployment]]) -> Deployment:
    """One deployment of several one-GPU deployments (GPU index, deployment), in order: run-wide
    instance indices, names `g<gpu>-i<k>-<profile>` when there is more than one GPU, and
    `n<node>-g<gpu>-i<k>-<profile>` when they are on several nodes (numbered in order)."""
    several = len(deployments) > 1
    nodes = list(dict.fromkeys(d.slots[0].node for _, d in deployments if d.slots))
    slots: list[InstanceSlot] = []
    parts = []
    for gpu_index, deployment in deployments:
        node = deployment.slots[0].node if deployment.slots else None
        host = deployment.slots[0].host if deployment.slots else None
        prefix = f"n{nodes.index(node)}-" if len(nodes) > 1 else ""
        for k, slot in enumerate(deployment.slots):
            name = f"{prefix}g{gpu_index}-i{k}-{slot.profile}" if several else slot.name
            slots.append(attrs.evolve(slot, index=len(slots), name=name, gpu_index=gpu_index))
        parts.append(
            GpuPart(
                index=gpu_index,
                layout=deployment.layout,
                partitioning=deployment.partitioning,
                scenario=deployment.scenario,
                node=node,
                host=host,
            )
        )
    first = deployments[0][1]
    kinds = {d.partitioning for _, d in deployments}
    numbers = {d.scenario for _, d in deployments}
    fields: dict[str, Any] = {
        # a set with a time-shared GPU is labelled shared as a whole: not every instance is isolated
        "partitioning": kinds.pop() if len(kinds) == 1 else "shared",
        "scenario": numbers.pop() if len(numbers) == 1 else None,
        "gpu_index": first.gpu_index if not several else None,
        "slots": tuple(slots),
        "gpus": tuple(parts),
        "notes": tuple(dict.fromkeys(n for _, d in deployments for n in d.notes)),
    }
    return attrs.evolve(first, **fields)


# --- how a system is named ------------------------------------------------------------------
def system_gpu(parts: Sequence[GpuPart]) -> str:
    """The GPU model, or the models joined by '+' when the GPUs differ."""
    return "+".join(dict.fromkeys(p.name for p in parts))


def system_layout(parts: Sequence[GpuPart]) -> str:
    """One GPU: its layout. Several: `8x[7x1g.10gb]`, mixed layouts spelled out
    (`6x[7x1g.10gb] + 2x[3g.40gb+4g.40gb]`), with the model when the models differ."""
    if len(parts) == 1:
        return str(parts[0].layout)
    models = len({p.name for p in parts}) > 1
    groups = Counter(f"{p.name} {p.layout}" if models else str(p.layout) for p in parts)
    return " + ".join(f"{n}x[{text}]" for text, n in groups.items())


def system_id(parts: Sequence[GpuPart]) -> str:
    """NVIDIA's system ID: one GPU as the registry names it; a system of one model with its
    instances counted over all GPUs (`A100-SXM-80GB_MIG_56x1g.10gb`, as NVIDIA named its
    DGX-A100 result); GPUs of several models, one ID per model joined by ' + '."""
    from mlperf_mig import registry

    if len(parts) == 1:
        return registry.system_id(parts[0].layout)
    by_model: dict[str, list[GpuPart]] = {}
    for part in parts:
        by_model.setdefault(part.name, []).append(part)
    ids = []
    for members in by_model.values():
        gpu = members[0].layout.gpu
        counts = Counter(p.name for part in members for p in part.layout.profiles)
        order = sorted(counts, key=lambda name: gpu.profile(name).size_key)
        prefix = gpu.system_id_name or gpu.name
        ids.append(f"{prefix}_MIG_{'+'.join(f'{counts[name]}x{name}' for name in order)}")
    return " + ".join(ids)


def parts_to_dicts(parts: Sequence[GpuPart], slots: Sequence[InstanceSlot]) -> list[dict[str, Any]]:
    """The `gpus` entries of plan.json and results.json (without the measured subtotals)."""
    return [
        {
            "index": part.index,
            "name": part.name,
            "layout": str(part.layout),
            "partitioning": part.partitioning,
            "node": part.node,
            "host": part.host,
            "instances": [s.name for s in slots if part.holds(s)],
        }
        for part in parts
    ]
