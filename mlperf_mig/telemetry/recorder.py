"""One run's telemetry from start to summary: `RunRecorder`, used by the runner's execute().

The recorder chooses the sources a run can have (NVML for the GPUs and MIG instances of a local
GPU run, each worker's CPU use and memory, the CPU package's RAPL energy), measures idle power
before the run, samples only around the performance round, cuts the series to the common timed
window from the LoadGen logs, writes telemetry.csv and returns the `RunTelemetry`.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import pynvml

from mlperf_mig.telemetry.host import PackageEnergy, WorkerWatch
from mlperf_mig.telemetry.nvml import Device, NvmlReadings, error_name
from mlperf_mig.telemetry.sampler import DEFAULT_INTERVAL_S, Sampler, Source
from mlperf_mig.telemetry.series import write_series
from mlperf_mig.telemetry.summary import InstanceColumns, RunTelemetry, summarize
from mlperf_mig.telemetry.window import common_window

if TYPE_CHECKING:
    from mlperf_mig.registry.nvml_state import NvmlModule

log = logging.getLogger(__name__)

IDLE_SECONDS = 1.0
GPM_METRIC = "SM activity of its GPU instance (NVML GPM)"
CPU_METRIC = "CPU use of the worker against its CPU budget (emulated slice)"
NO_GPM = "not measured: {why}; DCGM's Python bindings (profiling fields) are {dcgm}"


def dcgm_bindings() -> str:
    """Whether DCGM's Python bindings import here (they are not a dependency of mlperf-mig)."""
    try:
        import pydcgm  # noqa: F401
    except ImportError:
        return "not importable here"
    return "importable, but reading DCGM profiling fields is not part of mlperf-mig"


class ObservedSlot(Protocol):
    """What the recorder reads of an instance's slot (placement's InstanceSlot)."""

    @property
    def name(self) -> str: ...

    @property
    def device(self) -> str: ...

    @property
    def cpus(self) -> tuple[int, ...] | None: ...

    @property
    def compute_slices(self) -> int: ...


class ObservedDeployment(Protocol):
    """What the recorder reads of where the run's instances are (placement's Deployment)."""

    @property
    def partitioning(self) -> str: ...

    @property
    def cluster(self) -> str | None: ...


class ObservedPlan(Protocol):
    """What the recorder reads of the run it observes (the runner's RunPlan): telemetry is handed
    the plan and imports nothing above it."""

    @property
    def slots(self) -> Sequence[ObservedSlot]: ...

    @property
    def deployment(self) -> ObservedDeployment: ...


def _slot_cpus(slot: ObservedSlot) -> float:
    """The CPUs an instance may use: its emulated CPU budget where it has one, else its CPUs
    (100% util = all of it)."""
    share = getattr(slot, "cpu_share", None)
    if share:
        return float(share)
    return float(len(set(slot.cpus)) if slot.cpus else (os.cpu_count() or 1))


class RunRecorder:
    """The sampler of one run, with what it measures and what it cannot (`notes`)."""

    def __init__(
        self,
        plan: ObservedPlan,
        sampler: Sampler,
        watch: WorkerWatch,
        nvml: NvmlReadings | None,
        package: PackageEnergy,
        notes: list[str],
    ) -> None:
        self._plan = plan
        self.sampler = sampler
        self.watch = watch
        self._nvml = nvml
        self._package = package
        self.notes = notes
        self.idle: list[dict[str, Any]] = []
        self._gpus = [] if nvml is None else _gpu_facts(nvml)
        self._gpu_of = {} if nvml is None else nvml.instance_gpu()

    @classmethod
    def open(cls, plan: ObservedPlan, interval_s: float = DEFAULT_INTERVAL_S) -> RunRecorder:
        """The sources the plan's run can have; NVML's own answers decide what is measured."""
        notes: list[str] = []
        slots = plan.slots
        watch = WorkerWatch({s.name: _slot_cpus(s) for s in slots})
        nvml = None
        deployment = plan.deployment
        if deployment.cluster is not None:
            notes.append(
                "instances ran on Ray nodes: the runner samples its own host only; GPU telemetry not measured"
            )
        elif deployment.partitioning != "emulated":
            nvml, why = _open_nvml(
                getattr(plan, "nvml_source", None), [Device(s.name, s.device) for s in slots]
            )
            if why:
                notes.append(why)
        package = PackageEnergy()
        if not package.available:
            notes.append(f"CPU package energy: {package.why_not}")
        sources: list[Source] = [watch]
        if nvml is not None:
            sources.insert(0, nvml)
        if package.available:
            sources.append(package)
        return cls(plan, Sampler(sources, interval_s), watch, nvml, package, notes)

    def measure_idle(self, seconds: float = IDLE_SECONDS) -> None:
        """Idle readings before the run (board power with nothing of the run loaded)."""
        if self._nvml is not None or self._package.available:
            self.idle = self.sampler.measure(seconds)

    @contextlib.contextmanager
    def sampling(self) -> Iterator[None]:
        """Sample on the thread for the duration of the block. The runner tells `watch` of the
        round's workers as they start and end (telemetry does not know who starts them)."""
        self.sampler.start()
        try:
            yield
        finally:
            self.sampler.stop()

    def finish(
        self, outdir: Path, log_folders: Sequence[Path], extra_notes: Sequence[str] = ()
    ) -> RunTelemetry:
        """Close the sources, write telemetry.csv, and summarise over the common timed window."""
        self.close()
        window, why = common_window(log_folders)
        notes = [*self.notes, *extra_notes] + ([why] if why else [])
        if self.sampler.failures:
            notes.append(f"{self.sampler.failures} telemetry readings failed and were left empty")
        if self._nvml is not None and self._nvml.errors:
            notes.append(
                f"{self._nvml.errors} NVML readings failed during the run and were left empty"
            )
        rows = self.sampler.rows
        columns = self.sampler.columns()
        write_series(outdir, rows, columns)
        telemetry = summarize(
            rows,
            window=window,
            idle=self.idle,
            instances=self._instance_columns(columns),
            gpus=self._gpus,
            package={
                "column": PackageEnergy.COLUMN if self._package.available else None,
                "source": self._package.source or f"not measured: {self._package.why_not}",
            },
            interval_s=self.sampler.interval_s,
            notes=notes,
        )
        span = rows[-1]["t"] - rows[0]["t"] if rows else None
        return attrs.evolve(
            telemetry, sampled_s=_round(span), sampler_cpu_s=_round(self.sampler.busy_s)
        )

    def close(self) -> None:
        if self._nvml is not None:
            self._nvml.close()
            self._nvml = None

    def _instance_columns(self, columns: Sequence[str]) -> list[InstanceColumns]:
        """Where each instance's activity and memory are among the columns, and what they are."""
        emulated = self._plan.deployment.partitioning == "emulated"
        gpu_of = self._gpu_of
        specs = []
        for slot in self._plan.slots:
            gpu = gpu_of.get(slot.name)
            util: str | None
            if emulated or gpu is None:
                util, metric = f"{slot.name}:cpu_pct", CPU_METRIC
                memory, memory_metric = (
                    f"{slot.name}:rss_mib",
                    "worker resident memory (RSS; shared pages counted in each)",
                )
                weight = _slot_cpus(slot)
            else:
                util, metric = self._gpu_util(slot.name, gpu, columns)
                memory = f"{slot.name}:memory_mib"
                memory_metric = "device memory used (NVML, on its MIG device handle)"
                weight = float(slot.compute_slices)
            specs.append(
                InstanceColumns(
                    name=slot.name,
                    gpu_index=None if emulated else gpu,
                    weight=weight,
                    util=util if util in columns else None,
                    util_metric=metric,
                    memory=memory if memory in columns else None,
                    memory_metric=memory_metric,
                )
            )
        return specs

    def _gpu_util(self, name: str, gpu: int, columns: Sequence[str]) -> tuple[str | None, str]:
        if f"{name}:sm_active_pct" in columns:
            return f"{name}:sm_active_pct", GPM_METRIC
        if f"gpu{gpu}:util_pct" in columns:
            return f"gpu{gpu}:util_pct", "whole-GPU utilisation (NVML; the GPU is not partitioned)"
        gpm = next((g["gpm"] for g in self._gpus if g["index"] == gpu), "not supported")
        return None, NO_GPM.format(why=f"GPM {gpm}", dcgm=dcgm_bindings())


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _gpu_facts(nvml: NvmlReadings) -> list[dict[str, Any]]:
    """Each GPU's index, name, GPM support, what it measures and what not (and why)."""
    facts = []
    for gpu in nvml.gpus():
        prefix = f"gpu{gpu['index']}:"
        missing = {
            k.removeprefix(prefix): v
            for k, v in nvml.missing.items()
            if k.startswith(prefix) and k != prefix + "gpm"
        }
        facts.append({**gpu, "not_measured": missing})
    return facts


def _open_nvml(
    source: NvmlModule | None, devices: Sequence[Device]
) -> tuple[NvmlReadings | None, str | None]:
    """NVML readings of the devices, or None and why not (a replayed state without telemetry,
    a driver that fails)."""
    nvml = pynvml if source is None else source
    state = getattr(nvml, "state", None)
    if isinstance(state, Mapping) and not state.get("telemetry"):
        return None, "the recorded NVML state has no telemetry: GPU telemetry not measured"
    try:
        return NvmlReadings.open(nvml, devices), None
    except pynvml.NVMLError as exc:
        return (
            None,
            f"NVML could not be read for telemetry ({error_name(exc)}): GPU telemetry not measured",
        )
