"""The devices a layout's instances can run on, and the one matching of a layout to them.

A detected GPU offers devices of three kinds: `mig` (one per live GPU instance), `vgpu` (the
MIG-backed vGPU a VM guest sees: one instance of its profile) and `gpu` (a whole GPU without MIG,
or a time-sliced vGPU). `assign_devices` is the one matching of a layout's profiles to devices, by
profile ID: `exact` (the devices form the layout, nothing left over: one GPU of this machine,
`match_layout`) or not (the layout takes some of the devices: a cluster node's GPU, a declared
group of VMs). The runner and the cluster placement both build on it; a cluster node sends its
devices to the driver as `LiveDevice.to_dict()` and the driver reads them back with `from_dict`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from mlperf_mig.errors import LiveLayoutMismatchError, PlacementError
from mlperf_mig.registry.discovery import lost_answer, lost_fix
from mlperf_mig.registry.mig_setup import mig_setup
from mlperf_mig.registry.model import Layout, Profile

if TYPE_CHECKING:
    from mlperf_mig.registry.discovery import Detection, GpuState

DEVICE_KINDS = ("mig", "vgpu", "gpu")


_v = attrs.validators
_INDEX = _v.and_(_v.instance_of(int), _v.ge(0))
# what LiveDevice.to_dict writes and from_dict accepts, no more and no less
_DEVICE_KEYS = frozenset(
    {"kind", "index", "gpu", "profile", "profile_spec", "uuid", "placement_start", "vgpu_type"}
)


@attrs.frozen(kw_only=True)
class LiveDevice:
    """One device an instance can run on: its kind, GPU, profile and CUDA_VISIBLE_DEVICES UUID."""

    kind: str = attrs.field(validator=_v.in_(DEVICE_KINDS))
    gpu_index: int = attrs.field(validator=_INDEX)
    # the catalog GPU (the vGPU's parent in a VM), else the NVML name
    gpu_model: str = attrs.field(validator=_v.instance_of(str))
    profile: Profile | None = attrs.field(
        validator=_v.optional(_v.instance_of(Profile))
    )  # None: whole GPU
    uuid: str = attrs.field(validator=_v.instance_of(str))
    placement_start: int | None = attrs.field(default=None, validator=_v.optional(_INDEX))
    vgpu_type: str | None = attrs.field(default=None, validator=_v.optional(_v.instance_of(str)))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data: the profile by name (for people) and whole (`profile_spec`, for
        `from_dict`: the driver's catalog may not know a GPU the node's discovery read live)."""
        return {
            "kind": self.kind,
            "index": self.gpu_index,
            "gpu": self.gpu_model,
            "profile": self.profile.name if self.profile else None,
            "profile_spec": self.profile.to_dict() if self.profile else None,
            "uuid": self.uuid,
            "placement_start": self.placement_start,
            "vgpu_type": self.vgpu_type,
        }

    @classmethod
    def from_dict(cls, data: object) -> LiveDevice:
        """The device `to_dict` wrote, read as untrusted input (another machine sent it):
        ValueError naming what is wrong."""
        if not isinstance(data, Mapping) or set(data) != _DEVICE_KEYS:
            got = sorted(data) if isinstance(data, Mapping) else type(data).__name__
            raise ValueError(f"a device must have the keys {sorted(_DEVICE_KEYS)}, got {got}")
        spec = data["profile_spec"]
        try:
            profile = None if spec is None else Profile(**spec)
            if profile is not None and data["profile"] != profile.name:
                raise ValueError(
                    f"profile {data['profile']!r} is not its profile_spec's {profile.name!r}"
                )
            return cls(
                kind=data["kind"],
                gpu_index=data["index"],
                gpu_model=data["gpu"],
                profile=profile,
                uuid=data["uuid"],
                placement_start=data["placement_start"],
                vgpu_type=data["vgpu_type"],
            )
        except (TypeError, ValueError) as exc:
            raise ValueError(f"device {data.get('uuid')!r}: {exc}") from None


def assign_devices(
    profiles: Sequence[Profile], devices: Sequence[LiveDevice], *, exact: bool
) -> tuple[int, ...] | None:
    """The positions in `devices` of one device per profile, in the profiles' order, or None.

    Only instances (kind mig or vgpu) match, by profile ID, not name: one ID prints under other
    names on other boards and drivers (GB200 `1g.24gb` / `1g.23gb`). `exact`: the instances must
    form the layout with none left over (one GPU carrying the layout); otherwise the layout may
    take some of them (a cluster node's GPU, a declared group of VMs).
    """
    pool = [i for i, d in enumerate(devices) if d.kind in ("mig", "vgpu") and d.profile is not None]
    chosen = []
    for profile in profiles:
        found = next((i for i in pool if _profile_id(devices[i]) == profile.profile_id), None)
        if found is None:
            return None
        pool.remove(found)
        chosen.append(found)
    return None if exact and pool else tuple(chosen)


def carried_and_wanted(devices: Sequence[LiveDevice], layout: Layout) -> str:
    """'carries the MIG layout 4x 1g.10gb, but the run asks for 3x 2g.20gb + 1g.10gb' (or
    'carries no MIG device, but ...'): the words of a refusal when `assign_devices` found no
    match."""
    carried = [d.profile.name for d in devices if d.profile]
    has = (
        f"carries the MIG layout {describe_profiles(carried)}"
        if carried
        else "carries no MIG device"
    )
    return f"{has}, but the run asks for {describe_profiles([p.name for p in layout.profiles])}"


def _profile_id(device: LiveDevice) -> int | None:
    return device.profile.profile_id if device.profile is not None else None


def describe_profiles(names: Sequence[str]) -> str:
    """'3x 2g.20gb + 1g.10gb' for a list of profile names (order of first appearance kept)."""
    counts = Counter(names)
    parts = [f"{n}x {name}" if n > 1 else name for name, n in counts.items()]
    return " + ".join(parts) if parts else "no MIG devices"


def usable_devices(state: GpuState) -> tuple[LiveDevice, ...]:
    """The devices of one detected GPU: its GPU instances, its MIG-backed vGPU, or the whole GPU.

    A GPU with MIG on but no GPU instance offers nothing, nor does a lost GPU; a GPU instance is
    offered through its first compute instance (match_layout refuses a GPU instance split into
    several).
    """
    if state.lost:
        return ()
    model = state.catalog_gpu.name if state.catalog_gpu else state.name
    if state.vgpu is not None:
        kind = "vgpu" if state.mig_vgpu else "gpu"
        return (
            LiveDevice(
                kind=kind,
                gpu_index=state.index,
                gpu_model=model,
                profile=state.vgpu.profile,
                uuid=state.vgpu.uuid,
                vgpu_type=state.vgpu.type_name,
            ),
        )
    if state.mig_current:
        first: dict[int, Any] = {}
        for device in state.mig_devices:
            first.setdefault(device.gpu_instance_id, device)
        ordered = sorted(
            first.values(),
            key=lambda d: (
                -d.profile.compute_slices,
                -d.profile.memory_slices,
                d.placement_start if d.placement_start is not None else 0,
                d.gpu_instance_id,
            ),
        )
        return tuple(
            LiveDevice(
                kind="mig",
                gpu_index=state.index,
                gpu_model=model,
                profile=d.profile,
                uuid=d.uuid,
                placement_start=d.placement_start,
            )
            for d in ordered
        )
    return (
        LiveDevice(
            kind="gpu", gpu_index=state.index, gpu_model=model, profile=None, uuid=state.uuid
        ),
    )


def refuse_lost_gpu(state: GpuState) -> None:
    """PlacementError in one line naming a lost GPU a run asked for (what it answered, the fix);
    nothing for a GPU that was read."""
    if state.lost:
        raise PlacementError(
            f"{state.label} cannot run the layout: it {lost_answer(state.error or '', state.failed_query or '')}; "
            f"fix: {lost_fix(state.index)}; or run on the other GPUs: select them with --gpus / "
            "gpus= (see `mlperf-mig detect`)"
        )


def node_inventory(detection: Detection) -> tuple[LiveDevice, ...]:
    """Every usable device of this machine, GPU by GPU, for a cluster node to report what it has
    (it sends them as `LiveDevice.to_dict()`). Empty when there is no GPU (Detection.message says
    why)."""
    return tuple(device for state in detection.gpus for device in usable_devices(state))


def match_layout(layout: Layout, state: GpuState) -> tuple[LiveDevice, ...]:
    """One live device per instance of `layout`, in the layout's order.

    The live MIG devices (or the VM's MIG-backed vGPU) must form exactly `layout`, each GPU
    instance with one compute instance; otherwise LiveLayoutMismatchError says what the GPU
    carries, what was asked for and how to get there (this library never changes MIG state).
    Profiles are matched by profile ID (`assign_devices`, exact).
    """
    wanted = [p.name for p in layout.profiles]
    if state.vgpu is not None:
        return _match_vgpu(layout, state, wanted)
    _refuse_split_instances(state)
    live = [d for d in usable_devices(state) if d.kind == "mig"]
    chosen = assign_devices(layout.profiles, live, exact=True)
    if chosen is None:
        raise LiveLayoutMismatchError(
            f"GPU {state.index} ({state.name}) {carried_and_wanted(live, layout)}; to create it (as "
            f"root, after destroying the current instances): "
            f"{'; '.join(mig_setup(layout, gpu_index=state.index).steps())}; or ask for the live layout instead"
        )
    return tuple(live[i] for i in chosen)


def _match_vgpu(layout: Layout, state: GpuState, wanted: list[str]) -> tuple[LiveDevice, ...]:
    assert state.vgpu is not None
    device = usable_devices(state)[0]
    if device.kind == "vgpu" and wanted == [device.profile.name if device.profile else None]:
        return (device,)
    what = (
        f"a time-sliced vGPU ({state.vgpu.type_name}), not a MIG instance"
        if state.vgpu.time_sliced
        else f"the vGPU {state.vgpu.type_name}, one {device.profile.name if device.profile else '?'} instance"
    )
    raise LiveLayoutMismatchError(
        f"GPU {state.index} of this VM is {what}, but the run asks for "
        f"{describe_profiles(wanted)}; a VM runs one instance of its vGPU's profile: ask for "
        "that layout here, or give each instance its own VM with a vGPU of its profile"
    )


def _refuse_split_instances(state: GpuState) -> None:
    per_instance = Counter(d.gpu_instance_id for d in state.mig_devices)
    split = sorted(gi for gi, n in per_instance.items() if n > 1)
    if split:
        gi = split[0]
        raise LiveLayoutMismatchError(
            f"GPU {state.index} ({state.name}): GPU instance {gi} holds {per_instance[gi]} compute "
            "instances, but each instance of a layout runs on one compute instance that spans its "
            f"GPU instance; as root, destroy them (nvidia-smi mig -i {state.index} -gi {gi} -dci) "
            f"and create the full-size one listed by `nvidia-smi mig -i {state.index} -gi {gi} "
            "-lcip` (nvidia-smi mig -cci PROFILE)"
        )
