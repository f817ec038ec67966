"""One GPU: where the instances of a layout run on it (live MIG devices, a shared GPU, or
emulated CPU partitions).

Four partitionings, and every result says which one it came from:
    mig       one live MIG device per instance (CUDA_VISIBLE_DEVICES=MIG-<uuid>); the live layout
              must be the requested one, else LiveLayoutMismatchError with the MIG setup steps.
    vgpu      inside a VM whose GPU is a MIG-backed vGPU (A100D-2-20C): a layout of exactly that
              one profile runs on it (CUDA_VISIBLE_DEVICES=the vGPU's UUID).
    shared    a GPU without MIG (or a time-sliced vGPU), time-shared by all instances; only when
              the user opts in.
    emulated  no GPU: each instance gets CPU cores in proportion to its compute slices (as far as
              the machine allows), pinned with sched_setaffinity. Not a GPU measurement.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from mlperf_mig.emulation.cpu_budget import emulated_cpu_budgets
from mlperf_mig.errors import NameParseError, PlacementError, UnknownGpuError
from mlperf_mig.placement.deployment import Deployment, ScenarioSpec, instance_slot
from mlperf_mig.registry.devices import describe_profiles, match_layout, refuse_lost_gpu

if TYPE_CHECKING:
    from mlperf_mig.registry.catalog import Catalog
    from mlperf_mig.registry.discovery import Detection, GpuState
    from mlperf_mig.registry.model import Gpu, Layout


log = logging.getLogger(__name__)

DEFAULT_EMULATED_GPU = "A100-SXM4-80GB"  # the seed study's GPU
STUDY_SCENARIOS = range(1, 9)
_LOADGEN_SCENARIO_NAMES = ("offline", "server", "singlestream", "multistream")


def _study_number(value: int) -> int:
    if value not in STUDY_SCENARIOS:
        raise NameParseError(
            f"scenario {value} is not one of the study's MIG layouts 1-8 ('scenario' is the MIG "
            "layout; the MLPerf LoadGen scenario is loadgen_scenario= / --loadgen-scenario); pass "
            "1-8, a profile list, a layout string such as '3x2g.20gb+1g.10gb' or a system ID"
        )
    return value


def resolve_gpu(name: str | None, catalog: Catalog) -> Gpu:
    """The catalog GPU called `name`, or the seed study's A100-SXM4-80GB when None."""
    return catalog.get(name or DEFAULT_EMULATED_GPU)


def resolve_layout(scenario: ScenarioSpec, gpu: Gpu, catalog: Catalog) -> tuple[Layout, int | None]:
    """The Layout that `scenario` means on `gpu`, and the study's number when it was one.

    `scenario` is a study layout number (1-8, int or digits), a layout string
    ("3x2g.20gb+1g.10gb"), a list of profile names, or a system ID; a system ID names its own GPU.
    """
    from mlperf_mig import registry

    if isinstance(scenario, bool):
        raise NameParseError(f"scenario {scenario!r} is not a MIG layout; pass 1-8 or a layout")
    if isinstance(scenario, int):
        number = _study_number(scenario)
        return registry.study_layout(number, gpu), number
    if isinstance(scenario, str):
        text = scenario.strip()
        if re.fullmatch(
            r"[+-]?[0-9]+", text
        ):  # ASCII digits only: int() refuses "²", isdigit() not
            number = _study_number(int(text))
            return registry.study_layout(number, gpu), number
        if text.lower() in _LOADGEN_SCENARIO_NAMES:
            raise NameParseError(
                f"scenario {scenario!r} is an MLPerf LoadGen scenario, but 'scenario' is the MIG "
                "layout (1-8 or a layout string); pass it as loadgen_scenario= / --loadgen-scenario"
            )
        if "_MIG_" in text.upper():
            return registry.parse_system_id(text, catalog), None
        return registry.parse_layout(gpu, text), None
    return registry.parse_layout(gpu, list(scenario)), None


def solved_starts(layout: Layout) -> list[int]:
    """Placement start of each profile of `layout` (in layout order); raises LayoutError if none."""
    from mlperf_mig import registry

    pool = list(registry.solve_placements(layout))
    starts = []
    for profile in layout.profiles:
        placement = next(p for p in pool if p.profile.name == profile.name)
        pool.remove(placement)
        starts.append(placement.start)
    return starts


def emulated_cpu_sets(
    compute_slices: Sequence[int], gpu_compute_slices: int, cpus: Sequence[int]
) -> list[tuple[int, ...]]:
    """CPU sets in proportion to `compute_slices` (used to split the CPUs among emulated GPUs).

    The slices are laid over the machine's CPUs in order; each gets the CPUs under it, and at
    least one. An emulated instance's CPU time is its budget (emulation/cpu_budget.py), not this set.
    """
    ordered = sorted(cpus)
    n = len(ordered)
    sets = []
    first_slice = 0
    for slices in compute_slices:
        low = first_slice * n // gpu_compute_slices
        high = max(low + 1, (first_slice + slices) * n // gpu_compute_slices)
        sets.append(tuple(ordered[min(i, n - 1)] for i in range(low, high)))
        first_slice += slices
    return sets


def emulated_gpu_cpus(count: int, cpus: Sequence[int]) -> list[tuple[int, ...]]:
    """Each of `count` emulated GPUs' share of `cpus`: equal, contiguous, at least one CPU (GPUs
    share a CPU when there are fewer CPUs than GPUs)."""
    return emulated_cpu_sets([1] * count, count, cpus)


def emulated_deployment(
    layout: Layout,
    scenario: int | None,
    cpus: Sequence[int] | None = None,
    *,
    whole_gpu_cpus: float | None = None,
) -> Deployment:
    """Emulated partitions on this machine's CPUs (or `cpus`, for tests): each instance gets CPU
    time in proportion to its compute slices of the GPU (emulation/cpu_budget.py)."""
    available = sorted(os.sched_getaffinity(0)) if cpus is None else list(cpus)
    profiles = list(layout.profiles)
    budgets = emulated_cpu_budgets(
        [p.compute_slices for p in profiles],
        layout.gpu.compute_slices,
        available,
        whole_gpu_cpus=whole_gpu_cpus,
    )
    starts = solved_starts(layout)
    slots = tuple(
        instance_slot(
            i,
            p,
            placement_start=start,
            device="cpu:" + ",".join(str(c) for c in budget.cpus),
            env={"CUDA_VISIBLE_DEVICES": ""},
            budget=budget,
        )
        for i, (p, budget, start) in enumerate(zip(profiles, budgets.budgets, starts))
    )
    return Deployment(
        partitioning="emulated",
        layout=layout,
        scenario=scenario,
        gpu_index=None,
        slots=slots,
        notes=budgets.notes,
    )


def live_deployment(layout: Layout, scenario: int | None, gpu_state: GpuState) -> Deployment:
    """Each instance of `layout` on its live MIG device, or the VM's MIG-backed vGPU.

    The matching is the registry's `match_layout`: it raises LiveLayoutMismatchError showing both
    layouts and how to get there (this library never changes MIG state).
    """
    solved_starts(layout)
    devices = match_layout(layout, gpu_state)
    slots = tuple(
        instance_slot(
            i,
            profile,
            placement_start=device.placement_start,
            device=device.uuid,
            env={"CUDA_VISIBLE_DEVICES": device.uuid},
        )
        for i, (profile, device) in enumerate(zip(layout.profiles, devices))
    )
    partitioning = "vgpu" if gpu_state.vgpu is not None else "mig"
    return Deployment(
        partitioning=partitioning,
        layout=layout,
        scenario=scenario,
        gpu_index=gpu_state.index,
        slots=slots,
    )


def shared_deployment(layout: Layout, scenario: int | None, gpu_state: GpuState) -> Deployment:
    """All instances time-share the whole GPU (no MIG isolation); labelled `shared`."""
    slots = tuple(
        instance_slot(
            i,
            p,
            placement_start=start,
            device=gpu_state.uuid,
            env={"CUDA_VISIBLE_DEVICES": gpu_state.uuid},
        )
        for i, (p, start) in enumerate(zip(layout.profiles, solved_starts(layout)))
    )
    return Deployment(
        partitioning="shared",
        layout=layout,
        scenario=scenario,
        gpu_index=gpu_state.index,
        slots=slots,
    )


def _live_gpu(detection: Detection, gpu_name: str | None, catalog: Catalog) -> GpuState:
    """The live GPU to run on: the first one, or the first of the model `gpu_name`."""
    if gpu_name is None:
        return detection.gpus[0]
    wanted = catalog.get(gpu_name).name
    for state in detection.gpus:
        if state.catalog_gpu is not None and state.catalog_gpu.name == wanted:
            return state
    found = ", ".join(f"{s.index}: {s.name}" for s in detection.gpus)
    raise PlacementError(
        f"gpu={gpu_name!r} asked for, but this machine has {found}; omit gpu= to use them, or "
        "pass emulate=True / --emulate to emulate that GPU's partitions on the CPU"
    )


def choose_deployment(
    scenario: ScenarioSpec,
    *,
    gpu: str | None,
    catalog: Catalog,
    detection: Detection | None,
    shared: bool = False,
    emulate: bool = False,
    cpus: Sequence[int] | None = None,
) -> Deployment:
    """Resolve the layout and decide where its instances run (see the module docstring)."""
    if emulate or detection is None or not detection.gpus:
        if shared:
            why = (
                "emulate=True" if emulate else (getattr(detection, "message", "") or "no GPU found")
            )
            raise PlacementError(
                f"shared=True asks the instances to time-share a GPU, but they would run on "
                f"emulated CPU partitions ({why}); drop shared / --shared to emulate, or run on a "
                "machine with the GPU"
            )
        if not emulate and detection is not None and detection.message:
            log.info(
                "no GPU to run on (%s): emulating MIG partitions on the CPU", detection.message
            )
        layout, number = resolve_layout(scenario, resolve_gpu(gpu, catalog), catalog)
        return emulated_deployment(layout, number, cpus)
    return gpu_deployment(
        scenario, _live_gpu(detection, gpu, catalog), catalog=catalog, shared=shared
    )


def gpu_deployment(
    scenario: ScenarioSpec, state: GpuState, *, catalog: Catalog, shared: bool
) -> Deployment:
    """The layout on the live GPU `state` (a registry GpuState): its MIG devices or vGPU, the
    whole GPU time-shared when `shared`, else a one-line refusal saying how to get there."""
    refuse_lost_gpu(state)
    if state.catalog_gpu is None:
        raise UnknownGpuError(
            f"GPU {state.index} ({state.name}) is not in the catalog; add a data file for it to "
            "the systems search path (MLPERF_MIG_SYSTEMS_PATH)"
        )
    layout, number = resolve_layout(scenario, state.catalog_gpu, catalog)
    if layout.gpu.name != state.catalog_gpu.name:
        raise PlacementError(
            f"the layout {scenario!r} is for {layout.gpu.name}, but GPU {state.index} is a "
            f"{state.catalog_gpu.name}; pass a layout of that GPU, or emulate=True / --emulate"
        )
    if state.mig_current or state.mig_vgpu:
        return live_deployment(layout, number, state)
    if shared:
        return shared_deployment(layout, number, state)
    wanted = describe_profiles([p.name for p in layout.profiles])
    if state.vgpu is not None:
        why = f"is a time-sliced vGPU ({state.vgpu.type_name}), not a MIG instance"
        fix = "give the VM a MIG-backed vGPU type (such as A100D-2-20C) for one instance"
    else:
        why = "has MIG disabled" if state.mig_current is not None else "does not support MIG"
        fix = "enable MIG and create the layout (see `mlperf-mig mig-setup`)"
    raise PlacementError(
        f"GPU {state.index} ({state.name}) {why}, so the layout {wanted} cannot be isolated; "
        f"{fix}, or pass shared=True / --shared to let the instances time-share the whole GPU "
        "(labelled shared)"
    )
