"""A fleet of GPUs: a layout on every selected GPU of the host, the deployment of a whole system.

MIG is deployed on 4- and 8-GPU servers, and NVIDIA's largest MIG result ran seven 1g.10gb on
each of a DGX-A100's eight GPUs (56 instances, `..._MIG_56x1g.10gb`). `gpus="all" | [0, 3]`
(`--gpus`) puts the layout on each selected GPU, `layouts={0: "7x1g.10gb", 1: "3g.40gb+4g.40gb"}`
(`--layout GPU=LAYOUT`) gives a GPU its own, and a study layout number is translated per GPU
model (so a host with two models works). Each GPU is resolved as a single GPU is
(one_gpu.gpu_deployment: the registry's one matcher on live MIG devices, or the whole GPU when
shared) and the parts are joined into one Deployment whose slots name their GPU. Without a GPU,
`gpu_count=N` (`--gpu-count N`) emulates N GPUs of the model, each with its share of the CPUs,
each share laid out as one emulated GPU is (one_gpu.emulated_deployment).

Everything here decides before anything starts; a selection that cannot run is one line.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import TYPE_CHECKING

from mlperf_mig.errors import MlperfMigError, PlacementError, SettingsError
from mlperf_mig.placement.deployment import (
    Deployment,
    PlacementRequest,
    ScenarioSpec,
    as_one_gpu,
    join_gpus,
)
from mlperf_mig.placement.one_gpu import (
    choose_deployment,
    emulated_deployment,
    emulated_gpu_cpus,
    gpu_deployment,
    resolve_gpu,
    resolve_layout,
)
from mlperf_mig.registry.devices import refuse_lost_gpu

if TYPE_CHECKING:
    from mlperf_mig.registry.catalog import Catalog
    from mlperf_mig.registry.discovery import Detection, GpuState


def wants_system(options: PlacementRequest) -> bool:
    """Whether the options select GPUs (gpus, layouts or gpu_count) rather than one GPU."""
    return options.gpus is not None or bool(options.layouts) or options.gpu_count is not None


def choose_system(
    options: PlacementRequest, *, catalog: Catalog, detection: Detection | None
) -> Deployment:
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
    if options.emulate or detection is None or not detection.gpus:
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
        refuse_lost_gpu(state)
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
                    partial(
                        gpu_deployment, scenario, state, catalog=catalog, shared=options.shared
                    ),
                ),
            )
        )
    return join_gpus(deployments)


def _emulated_system(options: PlacementRequest, catalog: Catalog, why_no_gpu: str) -> Deployment:
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
        every_gpu=options.gpu_count is not None,
        known=lambda: (
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


def _selected_states(
    options: PlacementRequest, detection: Detection, catalog: Catalog
) -> list[GpuState]:
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
        known=lambda: (
            f"this machine has {_gpu_list(states.values())}",
            f"pass some of {', '.join(map(str, sorted(states)))}",
        ),
    )
    return [states[i] for i in chosen]


def _selected_indices(
    options: PlacementRequest,
    indices: Sequence[int],
    *,
    known: Callable[[], tuple[str, str]],
    every_gpu: bool = False,
) -> list[int]:
    """The GPU indices `gpus` selects among `indices` (all of them for "all"; when gpus is not
    given, every one with `every_gpu` (gpu_count emulated GPUs: those without a `layouts` entry
    carry `scenario`), else the GPUs of `layouts`); `known()` says what there is and how to
    pick."""
    if options.gpus is None:
        selected = list(indices) if every_gpu else sorted(dict(options.layouts)) or list(indices)
    elif isinstance(options.gpus, str):  # "all", the one word RunOptions takes
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


def _layout_of(options: PlacementRequest, index: int) -> ScenarioSpec:
    """The layout asked for on GPU `index`: its own, else the run's scenario."""
    return dict(options.layouts).get(index, options.scenario)


def _on_gpu(index: int, name: str, resolve: Callable[[], Deployment]) -> Deployment:
    """`resolve()` for GPU `index`; its refusals say which GPU they are about."""
    try:
        return resolve()
    except MlperfMigError as exc:
        message = str(exc)
        if message.startswith(f"GPU {index} "):
            raise
        raise type(exc)(f"GPU {index} ({name}): {message}") from None


def _gpu_list(states: Iterable[GpuState]) -> str:
    return ", ".join(f"GPU {s.index} ({s.name})" for s in states) or "no GPU"


def _span(count: int) -> str:
    return "0" if count == 1 else f"0-{count - 1}"
