"""What this machine can measure, and a short live recording in the replay format.

`capabilities(nvml)` asks NVML (or a replayed state) per GPU whether it reports board power, the
energy counter, clock-event reasons and GPM per GPU instance, and says whether DCGM's Python
bindings import and whether the CPU package's RAPL energy is readable. `record_telemetry(nvml)`
samples every GPU and MIG device for a moment into the "telemetry" section that
`RecordedTelemetry` replays (doctor --record puts it in the bundle's nvml-state.json, so that a
GPU's real sequences become a test fixture).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pynvml

from mlperf_mig.registry.nvml_state import gpu_lost
from mlperf_mig.telemetry.host import PackageEnergy
from mlperf_mig.telemetry.nvml import GPM_METRICS, Device, NvmlReadings, error_name
from mlperf_mig.telemetry.recorder import dcgm_bindings

if TYPE_CHECKING:
    from mlperf_mig.registry.nvml_state import NvmlModule

_GPU_KEYS = {  # reading column -> the replay format's key and its unit factor back to NVML's
    "power_w": ("power_mw", 1000.0),
    "sm_clock_mhz": ("sm_clock_mhz", 1.0),
    "mem_clock_mhz": ("mem_clock_mhz", 1.0),
    "temperature_c": ("temperature_c", 1.0),
    "clock_events": ("clock_events", 1.0),
    "util_pct": ("utilization_pct", 1.0),
}


def _devices(nvml: NvmlModule) -> list[Device]:
    """Every GPU of the machine, or its MIG devices where MIG is on, as sampler devices; a lost
    GPU (discovery reports it) is left out."""
    devices = []
    for index in range(nvml.nvmlDeviceGetCount()):
        try:
            devices += _gpu_devices(nvml, index)
        except pynvml.NVMLError as exc:
            if not gpu_lost(exc):
                raise
    return devices


def _gpu_devices(nvml: NvmlModule, index: int) -> list[Device]:
    """GPU `index`, or its MIG devices where MIG is on, as sampler devices."""
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    migs = []
    for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            migs.append(nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot))
        except (pynvml.NVMLError_NotFound, pynvml.NVMLError_InvalidArgument):
            continue
    if not migs:
        return [Device(f"gpu{index}", _text(nvml.nvmlDeviceGetUUID(handle)))]
    return [
        Device(f"gpu{index}-mig{k}", _text(nvml.nvmlDeviceGetUUID(m))) for k, m in enumerate(migs)
    ]


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _open(nvml: NvmlModule) -> tuple[NvmlReadings | None, list[Device], str | None]:
    try:
        nvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return None, [], f"NVML not available ({error_name(exc)}): no GPU telemetry on this machine"
    try:
        devices = _devices(nvml)
    finally:
        nvml.nvmlShutdown()
    if not devices:
        return None, [], "NVML finds no GPU: no GPU telemetry on this machine"
    return NvmlReadings.open(nvml, devices), devices, None


def capabilities(nvml: NvmlModule = pynvml) -> dict[str, Any]:
    """What can be measured here, per GPU, with the reason for each thing that cannot."""
    package = PackageEnergy()
    found: dict[str, Any] = {
        "gpus": [],
        "dcgm_bindings": dcgm_bindings(),
        "cpu_package_energy": package.source
        if package.available
        else f"not measured: {package.why_not}",
    }
    state = getattr(nvml, "state", None)
    if isinstance(state, dict) and not state.get("telemetry"):
        found["gpu_note"] = (
            "the recorded NVML state holds no telemetry: what its GPUs measure is not known"
        )
        return found
    readings, _, why = _open(nvml)
    if readings is None:
        found["gpu_note"] = why
        return found
    try:
        for gpu in readings.gpus():
            prefix = f"gpu{gpu['index']}:"
            found["gpus"].append(
                {
                    "index": gpu["index"],
                    "name": gpu["name"],
                    "measured": gpu["measured"],
                    "gpm": gpu["gpm"],
                    "not_measured": {
                        k.removeprefix(prefix): v
                        for k, v in readings.missing.items()
                        if k.startswith(prefix)
                    },
                }
            )
    finally:
        readings.close()
    return found


def capability_lines(found: dict[str, Any]) -> list[str]:
    """The capabilities in words, one line per GPU and one for the host."""
    lines = [found["gpu_note"]] if found.get("gpu_note") else []
    for gpu in found["gpus"]:
        measured = ", ".join(gpu["measured"]) or "nothing"
        missing = "; ".join(f"{k}: {v}" for k, v in gpu["not_measured"].items() if k != "gpm")
        lines.append(
            f"GPU {gpu['index']} {gpu['name']}: measures {measured}; SM activity per MIG instance by GPM: "
            f"{gpu['gpm']}" + (f"; not measured: {missing}" if missing else "")
        )
    lines.append(
        f"DCGM Python bindings: {found['dcgm_bindings']}; CPU package energy: {found['cpu_package_energy']}"
    )
    return lines


def record_telemetry(
    nvml: NvmlModule = pynvml,
    seconds: float = 2.0,
    interval_s: float = 0.1,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any] | None:
    """A short recording of every GPU and MIG device in the replay format (None without a GPU)."""
    readings, devices, _ = _open(nvml)
    if readings is None:
        return None
    rows = []
    try:
        for _ in range(max(2, round(seconds / interval_s))):
            rows.append(readings.read())
            sleep(interval_s)
        gpus = readings.gpus()
    finally:
        readings.close()
    telemetry: dict[str, Any] = {"interval_s": interval_s, "gpus": {}, "mig_devices": {}}
    for gpu in gpus:
        prefix = f"gpu{gpu['index']}:"
        entry: dict[str, Any] = {"gpm": gpu["gpm"] == "supported"}
        for column, (key, factor) in _GPU_KEYS.items():
            values = [r.get(prefix + column) for r in rows]
            if all(v is not None for v in values):
                entry[key] = [round(v * factor) for v in values]  # type: ignore[operator]
        energy = rows[0].get(prefix + "energy_j")
        if energy is not None:
            entry["energy_mj_at_init"] = round(energy * 1000)
        telemetry["gpus"][str(gpu["index"])] = entry
    for device in devices:
        if not device.instance.count("mig"):
            continue
        series = {"memory_used_mib": [r.get(f"{device.instance}:memory_mib") for r in rows]}
        series.update(
            {metric: [r.get(f"{device.instance}:{metric}") for r in rows] for metric in GPM_METRICS}
        )
        telemetry["mig_devices"][device.uuid] = {
            k: v for k, v in series.items() if all(x is not None for x in v)
        }
    return telemetry
