"""Recorded telemetry replayed through nvidia-ml-py's own calls: `RecordedTelemetry`.

It extends the registry's `RecordedNvml` (which replays a recorded GPU state for discovery) with
the calls the sampler makes, keeping NVML's conventions: board power in mW, the energy counter in
mJ since the driver loaded (it grows with the power; `energy_reset_at_step` restarts it, as a
driver reload does; from `energy_stuck_from_step` on it stops moving, as a broken counter did
while board power read 403-493 W), clocks in MHz, the clock-event reasons as a bit mask, whole-GPU utilisation
NOT_SUPPORTED on a MIG-enabled GPU, GPM samples as opaque `c_nvmlGpmSample_t` pointers from
`nvmlGpmSampleAlloc`, filled per GPU instance by `nvmlGpmMigSampleGet`, and metrics only between
two of them (`nvmlGpmMetricsGet`). A quantity recorded as an error name ("NOT_SUPPORTED") raises
that error; one not recorded raises NOT_SUPPORTED.

The state's "telemetry" section holds sequences, one value per `interval_s` step of time since
`nvmlInit` (the replay's `clock`), repeated when the run is longer:
    {"interval_s": 0.1,
     "gpus": {"0": {"power_mw": [...], "energy_mj_at_init": 123456789, "energy_reset_at_step": 40,
                    "energy_stuck_from_step": 0,
                    "idle_power_mw": 90000, "load_from_step": 10,
                    "sm_clock_mhz": [...], "mem_clock_mhz": [...], "temperature_c": [...],
                    "clock_events": [...], "utilization_pct": [...], "gpm": true}},
     "mig_devices": {"MIG-<uuid>": {"memory_used_mib": [...], "sm_active_pct": [...],
                                    "sm_occupancy_pct": [...], "dram_bw_pct": [...]}}}
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs
import pynvml

from mlperf_mig.registry.replay import RecordedNvml, _GpuHandle, _MigHandle, nvml_error
from mlperf_mig.telemetry.nvml import GPM_METRICS, GpmSample

if TYPE_CHECKING:
    from mlperf_mig.registry.nvml_state import NvmlValue

_GPM_KEYS = {metric: name for name, metric in GPM_METRICS.items()}


@attrs.define
class _GpmRecord:
    buffer: ctypes.Array[ctypes.c_char]  # the sample's memory, kept alive while it is allocated
    gpu: int | None = None
    gpu_instance_id: int | None = None
    step: int | None = None


@attrs.frozen
class RecordedTelemetry(RecordedNvml):
    """A recorded NVML state with telemetry sequences; `clock` drives the replay's time."""

    clock: Callable[[], float] = attrs.field(default=time.monotonic, eq=False)
    _live: dict[str, Any] = attrs.field(factory=dict, eq=False, alias="_live")

    @property
    def telemetry(self) -> Mapping[str, Any]:
        return self.state.get("telemetry") or {}

    # --- time ---------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        super().nvmlInit()
        self._live.setdefault("origin", self.clock())

    def _step(self) -> int:
        interval = float(self.telemetry.get("interval_s", 0.1))
        return max(0, int((self.clock() - self._live.get("origin", self.clock())) / interval))

    def _value(
        self, record: Mapping[str, Any] | None, key: str, step: int | None = None
    ) -> NvmlValue:
        sequence = None if record is None else record.get(key)
        if sequence is None:
            raise nvml_error("NOT_SUPPORTED")
        if isinstance(sequence, str):
            raise nvml_error(sequence)
        return sequence[(self._step() if step is None else step) % len(sequence)]

    def _gpu_record(self, handle: _GpuHandle) -> Mapping[str, Any] | None:
        self._gpu(handle)  # a lost GPU answers its error to every reading
        return (self.telemetry.get("gpus") or {}).get(str(handle.index))

    def _mig_record(self, handle: _MigHandle) -> Mapping[str, Any] | None:
        return (self.telemetry.get("mig_devices") or {}).get(self._mig(handle)["uuid"])

    # --- handles ------------------------------------------------------------------------
    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> _GpuHandle | _MigHandle:
        text = uuid.decode() if isinstance(uuid, bytes) else uuid
        for index, gpu in enumerate(self.state["gpus"]):
            if gpu.get("uuid") == text:
                return _GpuHandle(index)
            for mig in gpu.get("mig_devices", []):
                if mig["uuid"] == text:
                    return _MigHandle(index, mig["index"])
        raise nvml_error("NOT_FOUND")

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: _MigHandle) -> _GpuHandle:
        if not isinstance(handle, _MigHandle):
            raise nvml_error("INVALID_ARGUMENT")
        return _GpuHandle(handle.gpu)

    def nvmlDeviceGetIndex(self, handle: _GpuHandle) -> int:
        return handle.index

    # --- per GPU ------------------------------------------------------------------------
    def _power_mw(self, record: Mapping[str, Any] | None, step: int) -> float:
        """Board power at `step`: `idle_power_mw` before `load_from_step` (the idle readings
        before a run), then the `power_mw` sequence."""
        if record is not None and step < record.get("load_from_step", 0):
            return float(record["idle_power_mw"])
        return float(self._value(record, "power_mw", step))

    def nvmlDeviceGetPowerUsage(self, handle: _GpuHandle) -> int:
        return int(self._power_mw(self._gpu_record(handle), self._step()))

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: _GpuHandle) -> int:
        """mJ since the driver loaded: the counter at init plus the power over the steps since,
        restarted from 0 at `energy_reset_at_step` (a driver reload), frozen from
        `energy_stuck_from_step` on (a counter that does not move)."""
        record = self._gpu_record(handle)
        power = None if record is None else record.get("power_mw")
        if (
            record is None
            or isinstance(record.get("energy_mj_at_init"), str)
            or "energy_mj_at_init" not in record
        ):
            raise nvml_error(
                record.get("energy_mj_at_init", "NOT_SUPPORTED") if record else "NOT_SUPPORTED"
            )
        if not isinstance(power, list):
            raise nvml_error("NOT_SUPPORTED")
        interval = float(self.telemetry.get("interval_s", 0.1))
        step = self._step()
        stuck = record.get("energy_stuck_from_step")
        if stuck is not None:
            step = min(step, stuck)
        reset = record.get("energy_reset_at_step")
        first, base = (
            (reset, 0) if reset is not None and step >= reset else (0, record["energy_mj_at_init"])
        )
        used = sum(self._power_mw(record, k) for k in range(first, step)) * interval  # mW x s = mJ
        return int(base + used)

    def nvmlDeviceGetClockInfo(self, handle: _GpuHandle, clock: int) -> int:
        key = {pynvml.NVML_CLOCK_SM: "sm_clock_mhz", pynvml.NVML_CLOCK_MEM: "mem_clock_mhz"}.get(
            clock
        )
        if key is None:
            raise nvml_error("NOT_SUPPORTED")
        return int(self._value(self._gpu_record(handle), key))

    def nvmlDeviceGetTemperature(self, handle: _GpuHandle, sensor: int) -> int:
        return int(self._value(self._gpu_record(handle), "temperature_c"))

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: _GpuHandle) -> int:
        return int(self._value(self._gpu_record(handle), "clock_events"))

    def nvmlDeviceGetUtilizationRates(self, handle: _GpuHandle) -> pynvml.c_nvmlUtilization_t:
        if (self._gpu(handle, "mig_mode").get("mig_mode") or [0])[
            0
        ] == pynvml.NVML_DEVICE_MIG_ENABLE:
            raise nvml_error("NOT_SUPPORTED")  # NVML's answer on every MIG-enabled GPU
        rates = pynvml.c_nvmlUtilization_t()
        rates.gpu = int(self._value(self._gpu_record(handle), "utilization_pct"))
        return rates

    def nvmlDeviceGetMemoryInfo(self, handle: _GpuHandle | _MigHandle) -> pynvml.c_nvmlMemory_t:
        if isinstance(handle, _GpuHandle):
            info = super().nvmlDeviceGetMemoryInfo(handle)
            record = self._gpu_record(handle)
            if record is not None and "memory_used_mib" in record:
                info.used = int(self._value(record, "memory_used_mib") * 2**20)
            return info
        info = pynvml.c_nvmlMemory_t()
        info.total = self._mig(handle)["memorySizeMB"] * 2**20
        info.used = int(self._value(self._mig_record(handle), "memory_used_mib") * 2**20)
        info.free = info.total - info.used
        return info

    # --- GPM ----------------------------------------------------------------------------
    def nvmlGpmQueryDeviceSupport(self, handle: _GpuHandle) -> pynvml.c_nvmlGpmSupport_t:
        support = pynvml.c_nvmlGpmSupport_t()
        support.version = pynvml.NVML_GPM_SUPPORT_VERSION
        record = self._gpu_record(handle)
        support.isSupportedDevice = int(bool(record and record.get("gpm")))
        return support

    def nvmlGpmSampleAlloc(self) -> GpmSample:
        buffer = (ctypes.c_char * 8)()
        pointer = ctypes.cast(buffer, pynvml.c_nvmlGpmSample_t)
        self._live.setdefault("gpm", {})[ctypes.addressof(buffer)] = _GpmRecord(buffer)
        return pointer

    def _gpm_record(self, pointer: GpmSample) -> _GpmRecord:
        record = self._live.get("gpm", {}).get(ctypes.cast(pointer, ctypes.c_void_p).value)
        if record is None:
            raise nvml_error("INVALID_ARGUMENT")  # not a sample of nvmlGpmSampleAlloc, or freed
        return record

    def nvmlGpmSampleFree(self, pointer: GpmSample) -> None:
        record = self._gpm_record(pointer)
        self._live["gpm"].pop(ctypes.addressof(record.buffer))

    def nvmlGpmMigSampleGet(
        self, handle: _GpuHandle, gpu_instance_id: int, pointer: GpmSample
    ) -> GpmSample:
        record = self._gpu_record(handle)
        if not (record and record.get("gpm")):
            raise nvml_error("NOT_SUPPORTED")
        if not any(
            m["gpu_instance_id"] == gpu_instance_id
            for m in self._gpu(handle, "mig_devices").get("mig_devices", [])
        ):
            raise nvml_error("NOT_FOUND")
        sample = self._gpm_record(pointer)
        sample.gpu, sample.gpu_instance_id, sample.step = (
            handle.index,
            gpu_instance_id,
            self._step(),
        )
        return pointer

    def nvmlGpmMetricsGet(
        self, request: pynvml.c_nvmlGpmMetricsGet_t
    ) -> pynvml.c_nvmlGpmMetricsGet_t:
        """Metrics between two filled samples of one GPU instance (one sample alone is none)."""
        first, second = self._gpm_record(request.sample1), self._gpm_record(request.sample2)
        same = (first.gpu, first.gpu_instance_id) == (second.gpu, second.gpu_instance_id)
        if first.step is None or second.step is None or not same or first is second:
            raise nvml_error("INVALID_ARGUMENT")
        mig = next(
            m
            for m in self.state["gpus"][second.gpu]["mig_devices"]
            if m["gpu_instance_id"] == second.gpu_instance_id
        )
        series = (self.telemetry.get("mig_devices") or {}).get(mig["uuid"]) or {}
        for slot in range(request.numMetrics):
            metric = request.metrics[slot]
            key = _GPM_KEYS.get(metric.metricId)
            values = series.get(key) if key else None
            if not isinstance(values, list):
                metric.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
                continue
            metric.nvmlReturn = pynvml.NVML_SUCCESS
            metric.value = float(values[second.step % len(values)])
        return request
