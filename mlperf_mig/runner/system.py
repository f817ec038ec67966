"""A layout on every selected GPU of the host: the deployment of a whole system.

MIG is deployed on 4- and 8-GPU servers, and NVIDIA's largest MIG result ran seven 1g.10gb on
each of a DGX-A100's eight GPUs (56 instances, `..._MIG_56x1g.10gb`). `gpus="all" | [0, 3]`
(`--gpus`) puts the layout on each selected GPU, `layouts={0: "7x1g.10gb", 1: "3g.40gb+4g.40gb"}`
(`--layout GPU=LAYOUT`) gives a GPU its own, and a study layout number is translated per GPU
model (so a host with two models works). Each GPU is resolved as a single GPU is
(placement.gpu_deployment: the registry's one matcher on live MIG devices, or the whole GPU when
shared) and the parts are joined into one Deployment whose slots name their GPU. Without a GPU,
`gpu_count=N` (`--gpu-count N`) emulates N GPUs of the model, each with its share of the CPUs,
each share laid out as one emulated GPU is (placement.emulated_deployment).

Everything here decides before anything starts; a selection that cannot run is one line.
"""

from __future__ import annotations

import os
import resource
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from mlperf_mig.errors import MlperfMigError, PlacementError, SettingsError
from mlperf_mig.runner.placement import (
    Deployment,
    GpuPart,
    InstanceSlot,
    ScenarioSpec,
    choose_deployment,
    emulated_cpu_sets,
    emulated_deployment,
    gpu_deployment,
    resolve_gpu,
    resolve_layout,
)

if TYPE_CHECKING:
    from mlperf_mig.runner.options import RunOptions

# What one more instance costs the host, measured with benchmarks/fleet_dispatch.py and
# benchmarks/instance_memory.py: a null-backend worker dirties about 20 MiB after the fork, an
# ONNX Runtime one about 90 MiB (independent mode); both rounded up so that a run that passes
# this check does not start swapping.
WORKER_BYTES_NULL = 32 * 2**20
WORKER_BYTES_MODEL = 128 * 2**20
# descriptors the runner holds per worker (its pipes, the log file, the fork server's sockets)
FILES_PER_WORKER = 8
FILES_RESERVED = 64  # the runner's own files, LoadGen's and the interpreter's


def wants_system(options: RunOptions) -> bool:
    """Whether the options select GPUs (gpus, layouts or gpu_count) rather than one GPU."""
    return options.gpus is not None or bool(options.layouts) or options.gpu_count is not None


def choose_system(options: RunOptions, *, catalog: Any, detection: Any | None) -> Deployment:
    """The deployment of the selected GPUs (one GPU when none are selected), every slot naming
    its GPU and every GPU one part of `Deployment.gpus`."""
    if not wants_system(options):
        return as_one_gpu(
            choose_deployment(
                options.scenario,
                gpu=options.gpu,
                catalog=catalog,
                detection=detection,
                shared=options.shared,
                emulate=options.emulate,
                cpus=options.cpus,
            )
        )
    emulating = options.emulate or detection is None or not detection.gpus
    if emulating:
        return _emulated_system(options, catalog, getattr(detection, "message", "") or "")
    if options.gpu_count is not None:
        raise SettingsError(
            f"gpu_count / --gpu-count {options.gpu_count} sets how many GPUs to emulate, but this "
            f"machine has {_gpu_list(detection.gpus)}; select them with --gpus, or add --emulate "
            "to emulate instead"
        )
    states = _selected_states(options, detection, catalog)
    deployments = []
    for state in states:
        scenario = _layout_of(options, state.index)
        if not (state.mig_current or state.mig_vgpu) and not options.shared:
            why = "has MIG disabled" if state.mig_current is not None else "does not support MIG"
            raise PlacementError(
                f"GPU {state.index} ({state.name}) {why}, so its layout cannot be isolated; leave it "
                "out of --gpus, enable MIG on it (see `mlperf-mig mig-setup`), or pass shared=True / "
                "--shared to let its instances time-share the whole GPU (labelled shared)"
            )
        deployments.append(
            (
                state.index,
                _on_gpu(
                    state.index,
                    state.name,
                    lambda s=state, sc=scenario: gpu_deployment(
                        sc, s, catalog=catalog, shared=options.shared
                    ),
                ),
            )
        )
    return join_gpus(deployments)


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


def emulated_gpu_cpus(count: int, cpus: Sequence[int]) -> list[tuple[int, ...]]:
    """Each of `count` emulated GPUs' share of `cpus`: equal, contiguous, at least one CPU (GPUs
    share a CPU when there are fewer CPUs than GPUs)."""
    return emulated_cpu_sets([1] * count, count, cpus)


def _emulated_system(options: RunOptions, catalog: Any, why_no_gpu: str) -> Deployment:
    """`gpu_count` emulated GPUs of one model (selected with gpus), each on its share of the CPUs."""
    if options.shared:
        raise PlacementError(
            "shared=True asks the instances to time-share a GPU, but they would run on emulated "
            f"CPU partitions ({'emulate=True' if options.emulate else why_no_gpu or 'no GPU found'}); "
            "drop shared / --shared to emulate, or run on a machine with the GPU"
        )
    count = options.gpu_count or 1
    selected = _selected_indices(
        options,
        range(count),
        lambda: (
            f"the run emulates {count} GPU{'s' if count > 1 else ''} ({_span(count)})",
            f"pass indices {_span(count)}, or raise gpu_count / --gpu-count",
        ),
    )
    model = resolve_gpu(options.gpu, catalog)
    available = sorted(os.sched_getaffinity(0)) if options.cpus is None else list(options.cpus)
    shares = emulated_gpu_cpus(len(selected), available)
    # each GPU stands for its fraction of the CPUs, also where GPUs share a CPU (8 GPUs on 2 CPUs)
    whole_gpu_cpus = len(set(available)) / len(selected)
    deployments = []
    for index, share in zip(selected, shares):
        scenario = _layout_of(options, index)

        def on_cpus(sc: ScenarioSpec = scenario, cpus: tuple[int, ...] = share) -> Deployment:
            layout, number = resolve_layout(sc, model, catalog)
            return emulated_deployment(
                layout, number, cpus=cpus, whole_gpu_cpus=min(whole_gpu_cpus, len(cpus))
            )

        deployments.append((index, _on_gpu(index, model.name, on_cpus)))
    return join_gpus(deployments)


def _selected_states(options: RunOptions, detection: Any, catalog: Any) -> list[Any]:
    """The live GPUs selected (of the model `gpu`, when given)."""
    states = {s.index: s for s in detection.gpus}
    if options.gpu is not None:
        wanted = catalog.get(options.gpu).name
        states = {
            i: s
            for i, s in states.items()
            if s.catalog_gpu is not None and s.catalog_gpu.name == wanted
        }
        if not states:
            raise PlacementError(
                f"gpu={options.gpu!r} asked for, but this machine has {_gpu_list(detection.gpus)}; "
                "omit gpu= to use them, or pass emulate=True / --emulate to emulate that GPU"
            )
    chosen = _selected_indices(
        options,
        sorted(states),
        lambda: (
            f"this machine has {_gpu_list(states.values())}",
            f"pass some of {', '.join(map(str, sorted(states)))}",
        ),
    )
    return [states[i] for i in chosen]


def _selected_indices(options: RunOptions, indices: Sequence[int], known: Any) -> list[int]:
    """The GPU indices `gpus` selects among `indices` (all of them for "all"; the GPUs of
    `layouts` when gpus is not given); `known()` says what there is and how to pick."""
    if options.gpus is None:
        selected = sorted(dict(options.layouts)) or list(indices)
    elif options.gpus == "all":
        selected = list(indices)
    else:
        selected = list(options.gpus)
    missing = [i for i in selected if i not in indices]
    if missing:
        there, fix = known()
        raise PlacementError(
            f"GPU index {', '.join(map(str, missing))} is not there: {there}; {fix}"
        )
    unselected = sorted(set(dict(options.layouts)) - set(selected))
    if unselected:
        raise SettingsError(
            f"layouts / --layout names GPU {', '.join(map(str, unselected))}, which is not "
            f"selected (gpus: {', '.join(map(str, selected))}); add it to --gpus or drop that --layout"
        )
    return selected


def _layout_of(options: RunOptions, index: int) -> ScenarioSpec:
    """The layout asked for on GPU `index`: its own, else the run's scenario."""
    return dict(options.layouts).get(index, options.scenario)


def _on_gpu(index: int, name: str, resolve: Any) -> Deployment:
    """`resolve()` for GPU `index`; its refusals say which GPU they are about."""
    try:
        return resolve()
    except MlperfMigError as exc:
        message = str(exc)
        if message.startswith(f"GPU {index} "):
            raise
        raise type(exc)(f"GPU {index} ({name}): {message}") from None


def _gpu_list(states: Any) -> str:
    return ", ".join(f"GPU {s.index} ({s.name})" for s in states) or "no GPU"


def _span(count: int) -> str:
    return "0" if count == 1 else f"0-{count - 1}"


# --- what the host can start ----------------------------------------------------------------
@attrs.frozen(kw_only=True)
class HostMemory:
    """What the instances of a run hold in memory at once, against half of this machine's."""

    workers: int  # instance workers (+ the coordinator in unified mode)
    worker_bytes: int  # one worker's own memory, without its samples
    sample_bytes: int  # one sample of every input
    samples: int  # LoadGen's performance sample count: what each LoadGen loads
    sample_sets: int  # 1 in unified mode (shared memory), one per instance in independent mode
    budget: float  # half of this machine's memory (or of its control group's limit)

    def need(self, samples: int | None = None) -> float:
        count = self.samples if samples is None else samples
        return self.workers * self.worker_bytes + self.sample_sets * count * self.sample_bytes

    def samples_that_fit(self) -> int:
        """The most samples each LoadGen may load so that the run fits."""
        room = self.budget - self.workers * self.worker_bytes
        return max(0, int(room // (self.sample_sets * self.sample_bytes)))

    def most_instances(self, mode: str) -> int:
        """The most instances this host holds with this sample count."""
        if mode == "unified":
            return max(
                0, int((self.budget - self.samples * self.sample_bytes) // self.worker_bytes) - 1
            )
        return int(self.budget // (self.worker_bytes + self.samples * self.sample_bytes))


# a quick run of many instances loads fewer samples rather than none: at least this many
MIN_QUICK_SAMPLES = 64


def host_memory(
    deployment: Deployment, *, runs_model: bool, mode: str, benchmark: Any, samples: int
) -> HostMemory:
    """The memory model of the run on this host (see HostMemory)."""
    import numpy as np

    from mlperf_mig.harness.samples import input_layouts
    from mlperf_mig.harness.settings import machine_memory_bytes

    sample_bytes = sum(
        int(np.prod(t.shape)) * np.dtype(t.dtype).itemsize for t in input_layouts(benchmark)
    )
    unified = mode == "unified"
    return HostMemory(
        workers=len(deployment.slots) + (1 if unified else 0),
        worker_bytes=WORKER_BYTES_MODEL if runs_model else WORKER_BYTES_NULL,
        sample_bytes=max(1, sample_bytes),
        samples=samples,
        sample_sets=1 if unified else len(deployment.slots),
        budget=machine_memory_bytes() / 2,
    )


def fit_host(
    deployment: Deployment,
    *,
    runs_model: bool,
    mode: str,
    benchmark: Any,
    samples: int,
    samples_given: bool,
    preset: str,
) -> tuple[int | None, str | None]:
    """Refuse more instances than this host can start; for a quick run whose instances'
    sample sets alone would not fit, the performance sample count that fits (with the note that
    says so), else (None, None)."""
    files = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    workers = len(deployment.slots) + (1 if mode == "unified" else 0)
    if files != resource.RLIM_INFINITY and workers * FILES_PER_WORKER + FILES_RESERVED > files:
        most = max(
            0, (files - FILES_RESERVED) // FILES_PER_WORKER - (1 if mode == "unified" else 0)
        )
        raise SettingsError(
            f"{len(deployment.slots)} instances on {len(deployment.parts)} GPU(s), but this host "
            f"can start at most {most} ({files} open files, ulimit -n, at {FILES_PER_WORKER} per "
            "worker); raise ulimit -n, select fewer GPUs (--gpus), or spread them over nodes with --cluster"
        )
    memory = host_memory(
        deployment, runs_model=runs_model, mode=mode, benchmark=benchmark, samples=samples
    )
    if memory.need() <= memory.budget:
        return None, None
    fit = min(memory.samples_that_fit(), samples)
    if preset == "quick" and not samples_given and fit >= MIN_QUICK_SAMPLES:
        fewer = 2 ** (fit.bit_length() - 1)  # a power of two: runs of a size are comparable
        note = (
            f"quick preset: each of the {len(deployment.slots)} LoadGens loads {fewer} of "
            f"{benchmark.name}'s {samples} performance samples ({memory.sample_bytes / 1024:,.0f} KiB "
            f"each), so that all fit half of this host's {2 * memory.budget / 2**30:.1f} GiB; "
            "preset='submission' loads them all (mode='unified' shares one set)"
        )
        return fewer, note
    raise SettingsError(
        f"{len(deployment.slots)} instances on {len(deployment.parts)} GPU(s) need about "
        f"{memory.need() / 2**30:.1f} GiB ({samples} samples of {memory.sample_bytes / 1024:,.0f} KiB "
        f"per LoadGen, {memory.worker_bytes // 2**20} MiB per worker), but this host can start at most "
        f"{memory.most_instances(mode)} in half of its {2 * memory.budget / 2**30:.1f} GiB; select "
        "fewer GPUs (--gpus), lower --set performance_sample_count_override, use --mode unified "
        "(one sample set for all), or spread them over nodes with --cluster"
    )


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
