"""What NVML says about the GPUs and MIG instances of a run, one reading at a time.

`NvmlReadings.open(nvml, devices)` asks NVML once what each GPU offers and keeps the handles;
`read()` then returns one row of numbers (None where a reading failed this time). Conventions are
NVML's own (nvidia-ml-py): board power in mW (`nvmlDeviceGetPowerUsage`), the energy counter in mJ
since the driver loaded (`nvmlDeviceGetTotalEnergyConsumption`, Volta and later), clocks in MHz,
the clock-event (throttle) reasons as a bit mask. Per MIG instance: memory used on the MIG device
handle, and where the GPU has GPM (Hopper and later) SM activity, SM occupancy and DRAM bandwidth
utilisation of its GPU instance (`nvmlGpmMigSampleGet` twice, then `nvmlGpmMetricsGet` on the
pair: one GPM sample alone is no metric). Whole-GPU utilisation is NOT_SUPPORTED on a MIG-enabled
GPU, so it is only asked on GPUs without MIG. What a GPU does not offer is recorded once, named,
and not asked again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import attrs
import pynvml

if TYPE_CHECKING:
    from mlperf_mig.registry.nvml_state import NvmlHandle, NvmlModule, NvmlValue

log = logging.getLogger(__name__)

GpmSample = Any  # an nvmlGpmSample_t from nvmlGpmSampleAlloc (or a stand-in's)

# The GPM metrics read per GPU instance: column suffix -> NVML metric ID.
GPM_METRICS = {
    "sm_active_pct": pynvml.NVML_GPM_METRIC_SM_UTIL,
    "sm_occupancy_pct": pynvml.NVML_GPM_METRIC_SM_OCCUPANCY,
    "dram_bw_pct": pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL,
}
# Clock-event (throttle) reasons by bit, named as NVML's constants are (nvmlClocksEventReason*).
CLOCK_EVENT_REASONS = {
    pynvml.nvmlClocksEventReasonGpuIdle: "gpu_idle",
    pynvml.nvmlClocksEventReasonApplicationsClocksSetting: "applications_clocks_setting",
    pynvml.nvmlClocksEventReasonSwPowerCap: "sw_power_cap",
    pynvml.nvmlClocksEventReasonHwSlowdown: "hw_slowdown",
    pynvml.nvmlClocksEventReasonSyncBoost: "sync_boost",
    pynvml.nvmlClocksEventReasonSwThermalSlowdown: "sw_thermal_slowdown",
    pynvml.nvmlClocksEventReasonHwThermalSlowdown: "hw_thermal_slowdown",
    pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown: "hw_power_brake_slowdown",
    pynvml.nvmlClocksEventReasonDisplayClockSetting: "display_clock_setting",
}
_ABSENT = (
    pynvml.NVMLError_NotSupported,
    pynvml.NVMLError_FunctionNotFound,
    pynvml.NVMLError_NoPermission,
)


def error_name(exc: BaseException) -> str:
    """NVML's name of an error ("NOT_SUPPORTED"), or the exception's text."""
    if isinstance(exc, pynvml.NVMLError):
        for attribute in dir(pynvml):
            if attribute.startswith("NVML_ERROR_") and getattr(pynvml, attribute) == exc.value:
                return attribute.removeprefix("NVML_ERROR_")
    return str(exc)


def reason_names(mask: int) -> list[str]:
    """The clock-event reasons set in NVML's bit mask (unknown bits as 'bit 0x...')."""
    names = [name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit]
    unknown = mask & ~sum(CLOCK_EVENT_REASONS)
    return names + ([f"bit {unknown:#x}"] if unknown else [])


@attrs.frozen
class Device:
    """One instance's device as the run placed it: a MIG or GPU UUID."""

    instance: str
    uuid: str


@attrs.define
class _Gpu:
    index: int
    name: str
    handle: NvmlHandle
    mig: bool
    readers: dict[str, Callable[[], NvmlValue]] = attrs.field(factory=dict)
    gpm: bool = False


@attrs.define
class _Instance:
    name: str
    gpu: int
    handle: NvmlHandle
    gpu_instance_id: int | None
    previous_gpm: GpmSample | None = None


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


class NvmlReadings:
    """Readings of the GPUs and MIG instances a run uses; made by `open`, ended by `close`."""

    def __init__(
        self,
        nvml: NvmlModule,
        gpus: Sequence[_Gpu],
        instances: Sequence[_Instance],
        missing: Mapping[str, str],
    ) -> None:
        self._nvml = nvml
        self._gpus = list(gpus)
        self._instances = list(instances)
        self.missing = dict(missing)  # what could not be measured -> why (NVML's error name)
        self.errors = 0  # readings that failed after the capability check (transient errors)

    @classmethod
    def open(cls, nvml: NvmlModule, devices: Sequence[Device]) -> NvmlReadings:
        """Initialise NVML, find each device's GPU and ask once what each GPU can report."""
        nvml.nvmlInit()
        try:
            return cls._probe(nvml, devices)
        except BaseException:
            nvml.nvmlShutdown()
            raise

    @classmethod
    def _probe(cls, nvml: NvmlModule, devices: Sequence[Device]) -> NvmlReadings:
        gpus: dict[int, _Gpu] = {}
        instances: list[_Instance] = []
        missing: dict[str, str] = {}
        for device in devices:
            handle = nvml.nvmlDeviceGetHandleByUUID(device.uuid)
            is_mig = bool(nvml.nvmlDeviceIsMigDeviceHandle(handle))  # a ctypes c_uint
            parent = nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle) if is_mig else handle
            index = int(nvml.nvmlDeviceGetIndex(parent))
            if index not in gpus:
                gpus[index] = _open_gpu(nvml, index, parent, missing)
            gi = int(nvml.nvmlDeviceGetGpuInstanceId(handle)) if is_mig else None
            instances.append(_Instance(device.instance, index, handle, gi))
        for gpu in gpus.values():
            if not gpu.gpm:
                continue
            for instance in instances:
                if instance.gpu == gpu.index and instance.gpu_instance_id is not None:
                    instance.previous_gpm = _gpm_sample(nvml, gpu.handle, instance.gpu_instance_id)
        return cls(nvml, list(gpus.values()), instances, missing)

    def columns(self) -> list[str]:
        """The names of the numbers `read` returns, in order."""
        names = []
        for gpu in self._gpus:
            names += [f"gpu{gpu.index}:{what}" for what in gpu.readers]
        for instance in self._instances:
            names.append(f"{instance.name}:memory_mib")
            gpu = self._gpu(instance.gpu)
            if gpu.gpm and instance.gpu_instance_id is not None:
                names += [f"{instance.name}:{metric}" for metric in GPM_METRICS]
        return names

    def gpus(self) -> list[dict[str, Any]]:
        """Each GPU's index, name, and what it measures (per-instance SM activity by GPM or not)."""
        return [
            {
                "index": g.index,
                "name": g.name,
                "mig": g.mig,
                "measured": list(g.readers),
                "gpm": "supported"
                if g.gpm
                else self.missing.get(f"gpu{g.index}:gpm", "not supported"),
            }
            for g in self._gpus
        ]

    def instance_gpu(self) -> dict[str, int]:
        """The NVML index of each instance's GPU."""
        return {i.name: i.gpu for i in self._instances}

    def _gpu(self, index: int) -> _Gpu:
        return next(g for g in self._gpus if g.index == index)

    def read(self) -> dict[str, float | None]:
        """One reading of every column; None where NVML failed this time."""
        row: dict[str, float | None] = {}
        for gpu in self._gpus:
            for what, reader in gpu.readers.items():
                row[f"gpu{gpu.index}:{what}"] = self._try(reader)
        for instance in self._instances:
            used = self._try(partial(_memory_used, self._nvml, instance.handle))
            row[f"{instance.name}:memory_mib"] = None if used is None else used / 2**20
            gpu = self._gpu(instance.gpu)
            if gpu.gpm and instance.gpu_instance_id is not None:
                row.update(self._gpm(gpu, instance, instance.gpu_instance_id))
        return row

    def _try(self, reader: Callable[[], NvmlValue]) -> float | None:
        try:
            return float(reader())
        except pynvml.NVMLError as exc:
            self.errors += 1
            log.debug("NVML reading failed: %s", error_name(exc))
            return None

    def _gpm(self, gpu: _Gpu, instance: _Instance, gpu_instance_id: int) -> dict[str, float | None]:
        """The GPM metrics between the previous sample of the GPU instance (`gpu_instance_id`, the
        instance's own) and a new one."""
        names = [f"{instance.name}:{metric}" for metric in GPM_METRICS]
        try:
            sample = _gpm_sample(self._nvml, gpu.handle, gpu_instance_id)
        except pynvml.NVMLError:
            self.errors += 1
            return dict.fromkeys(names)
        previous, instance.previous_gpm = instance.previous_gpm, sample
        try:
            request = pynvml.c_nvmlGpmMetricsGet_t()
            request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
            request.numMetrics = len(GPM_METRICS)
            request.sample1, request.sample2 = previous, sample
            for slot, metric in enumerate(GPM_METRICS.values()):
                request.metrics[slot].metricId = metric
            result = self._nvml.nvmlGpmMetricsGet(request)
        except pynvml.NVMLError:
            self.errors += 1
            return dict.fromkeys(names)
        finally:
            self._nvml.nvmlGpmSampleFree(previous)
        return {
            name: float(result.metrics[slot].value)
            if result.metrics[slot].nvmlReturn == pynvml.NVML_SUCCESS
            else None
            for slot, name in enumerate(names)
        }

    def close(self) -> None:
        """Free the GPM samples and shut NVML down (NVML counts its initialisations)."""
        for instance in self._instances:
            if instance.previous_gpm is not None:
                self._nvml.nvmlGpmSampleFree(instance.previous_gpm)
                instance.previous_gpm = None
        self._nvml.nvmlShutdown()


def _memory_used(nvml: NvmlModule, handle: NvmlHandle) -> NvmlValue:
    """The bytes of memory in use on a (MIG) device."""
    return nvml.nvmlDeviceGetMemoryInfo(handle).used


def _gpm_sample(nvml: NvmlModule, gpu_handle: NvmlHandle, gpu_instance_id: int) -> GpmSample:
    sample = nvml.nvmlGpmSampleAlloc()
    try:
        return nvml.nvmlGpmMigSampleGet(gpu_handle, gpu_instance_id, sample)
    except BaseException:
        nvml.nvmlGpmSampleFree(sample)
        raise


def _open_gpu(nvml: NvmlModule, index: int, handle: NvmlHandle, missing: dict[str, str]) -> _Gpu:
    """A GPU with a reader for each quantity it answers; the others recorded in `missing`."""
    try:
        mig = (nvml.nvmlDeviceGetMigMode(handle) or [0])[0] == pynvml.NVML_DEVICE_MIG_ENABLE
    except _ABSENT:
        mig = False
    gpu = _Gpu(index=index, name=_text(nvml.nvmlDeviceGetName(handle)), handle=handle, mig=mig)
    wanted: dict[str, Callable[[], NvmlValue]] = {
        "power_w": lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
        "energy_j": lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1000.0,
        "sm_clock_mhz": lambda: nvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
        "mem_clock_mhz": lambda: nvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM),
        "temperature_c": lambda: nvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
        "clock_events": _clock_event_reader(nvml, handle),
    }
    if not mig:  # NOT_SUPPORTED on MIG-enabled GPUs: each instance is measured by GPM instead
        wanted["util_pct"] = lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu
    else:
        missing[f"gpu{index}:util_pct"] = "NOT_SUPPORTED on MIG-enabled GPUs (per instance by GPM)"
    for what, reader in wanted.items():
        try:
            reader()
        except pynvml.NVMLError as exc:
            missing[f"gpu{index}:{what}"] = error_name(exc)
            continue
        gpu.readers[what] = reader
    try:
        gpu.gpm = bool(nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
        if not gpu.gpm:
            missing[f"gpu{index}:gpm"] = "not supported by this GPU (GPM needs Hopper or later)"
    except pynvml.NVMLError as exc:
        missing[f"gpu{index}:gpm"] = f"not supported ({error_name(exc)})"
    return gpu


def _clock_event_reader(nvml: NvmlModule, handle: NvmlHandle) -> Callable[[], int]:
    """`nvmlDeviceGetCurrentClocksEventReasons`, or its older name on drivers without it."""

    def read() -> int:
        try:
            return nvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
        except pynvml.NVMLError_FunctionNotFound:
            return nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)

    return read
