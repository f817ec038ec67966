"""`diagnose()`: everything doctor finds, as one plain record; its text; its bundle.

Read-only: NVML is only queried, MIG state is never changed; engines go to the usual cache.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from mlperf_mig._io import JsonData
from mlperf_mig._text import printable
from mlperf_mig.doctor.install import (
    WheelProblem,
    check_backends,
    installed_versions,
    wheel_problems,
)
from mlperf_mig.doctor.reconcile import GpuCheck, check_gpu
from mlperf_mig.doctor.smoke import SmokeDevice, SmokeResult, smoke_all
from mlperf_mig.engines.backend import InstallStatus
from mlperf_mig.registry.catalog import Catalog, default_catalog
from mlperf_mig.registry.devices import usable_devices
from mlperf_mig.registry.discovery import Detection, detection_from_state, read_nvml_state
from mlperf_mig.registry.nvml_state import NvmlModule

log = logging.getLogger(__name__)

BUNDLE_STATE = "nvml-state.json"
BUNDLE_REPORT = "doctor.json"
_UUID_RE = re.compile(
    r"(?:MIG-GPU-|MIG-|GPU-)[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}(?:/\d+/\d+)?",
    re.I,
)


@attrs.frozen(kw_only=True)
class DoctorReport:
    """What doctor found on one machine (or in one recorded state)."""

    message: str  # why there is no GPU; "" when there are GPUs
    driver_version: str | None
    cuda_driver_version: str | None  # "12.4"
    nvml_version: str | None
    gpus: tuple[GpuCheck, ...] = attrs.field(converter=tuple[GpuCheck, ...])
    backends: tuple[InstallStatus, ...] = attrs.field(converter=tuple[InstallStatus, ...])
    wheel_problems: tuple[WheelProblem, ...] = attrs.field(converter=tuple[WheelProblem, ...])
    smoke: tuple[SmokeResult, ...] = attrs.field(converter=tuple[SmokeResult, ...])
    smoke_note: str  # why (part of) the smoke test did not run; "" when it all ran
    versions: Mapping[str, str]
    state: Mapping[str, Any]  # the NVML state in the replay format
    # what telemetry can measure here (mlperf_mig/telemetry/record.py `capabilities`)
    telemetry: Mapping[str, Any] = attrs.field(factory=dict)

    @property
    def ok(self) -> bool:
        """No GPU is lost and no smoke test failed (catalog differences are findings, not
        failures)."""
        return not any(gpu.lost for gpu in self.gpus) and all(result.ok for result in self.smoke)

    def to_dict(self) -> dict[str, Any]:
        return {
            "message": self.message,
            "driver_version": self.driver_version,
            "cuda_driver_version": self.cuda_driver_version,
            "nvml_version": self.nvml_version,
            "gpus": [g.to_dict() for g in self.gpus],
            "backends": [b.to_dict() for b in self.backends],
            "wheel_problems": [w.to_dict() for w in self.wheel_problems],
            "smoke": [s.to_dict() for s in self.smoke],
            "smoke_note": self.smoke_note,
            "versions": dict(self.versions),
            "telemetry": dict(self.telemetry),
            "ok": self.ok,
        }

    def text(self) -> str:
        """The report for people: one line per finding; text NVML or a replayed file gave is
        shown escaped (`printable`)."""
        lines = []
        if self.message:
            lines.append(self.message)
        else:
            lines.append(
                f"driver {self.driver_version}, CUDA {self.cuda_driver_version or 'unknown'}, "
                f"NVML {self.nvml_version or 'unknown'}"
            )
        for gpu in self.gpus:
            lines.extend(_gpu_lines(gpu))
        for backend in self.backends:
            state = "ok" if backend.ok else "not usable"
            fix = f"; fix: {backend.fix}" if backend.fix else ""
            lines.append(f"{backend.name} {backend.version or '-'}: {state}, {backend.detail}{fix}")
        lines.extend(f"install problem: {w.problem}; fix: {w.fix}" for w in self.wheel_problems)
        lines.extend(f"smoke: {result.line()}" for result in self.smoke)
        if self.smoke_note:
            lines.append(f"smoke: {self.smoke_note}")
        if self.telemetry:
            from mlperf_mig.telemetry.record import capability_lines

            lines.extend(f"telemetry: {line}" for line in capability_lines(dict(self.telemetry)))
        return "\n".join(printable(line) for line in lines)


def _gpu_lines(gpu: GpuCheck) -> list[str]:
    if gpu.lost:
        return [gpu.problem]
    mig = {None: "not capable", True: "on", False: "off"}
    head = (
        f"GPU {gpu.index} {gpu.name} ({gpu.catalog_gpu or 'not in the catalog'}): MIG "
        f"{mig[gpu.mig_current]} now, {mig[gpu.mig_pending]} pending"
    )
    if gpu.vgpu is not None:
        vgpu = gpu.vgpu
        what = (
            f"time-sliced share of one {vgpu['shared_instance']} MIG instance (not isolated)"
            if vgpu["time_sliced"] and vgpu.get("shared_instance")
            else "time-sliced (not MIG)"
            if vgpu["time_sliced"]
            else f"MIG-backed, one {vgpu['profile']} instance of {vgpu['parent_gpu']}"
            if vgpu["profile"]
            else "of no known type"
        )
        head += f"; inside a VM: vGPU {vgpu['type_name']}, {what}"
    lines = [head, f"GPU {gpu.index}: {gpu.verdict}"]
    lines.extend(f"GPU {gpu.index}: note: {note}" for note in gpu.notes)
    if gpu.prerequisites:
        lines.append(
            f"GPU {gpu.index}: before MIG can be enabled on {gpu.catalog_gpu}: {gpu.prerequisites}"
        )
    return lines


def diagnose(
    source: NvmlModule | None = None,
    *,
    catalog: Catalog | None = None,
    smoke: bool = True,
    versions: Mapping[str, str] | None = None,
) -> DoctorReport:
    """Run every check. `source` replaces pynvml (a RecordedNvml); its devices are not on this
    machine, so a replayed state gets no GPU smoke test. `versions` replaces the installed ones."""
    import pynvml

    catalog = catalog or default_catalog()
    state: Mapping[str, Any] = read_nvml_state(pynvml if source is None else source)
    detection = detection_from_state(state, catalog)
    cuda = detection.cuda_version
    installed = installed_versions() if versions is None else dict(versions)
    has_gpu = any(not gpu.lost for gpu in detection.gpus)
    backends = check_backends(
        has_gpu=has_gpu and source is None, cuda_major=cuda[0] if cuda else None
    )
    results, note = _smoke(detection, backends, replayed=source is not None, enabled=smoke)
    telemetry, state = _telemetry(source, state, record=has_gpu and source is None)
    return DoctorReport(
        message=detection.message,
        driver_version=detection.driver_version,
        cuda_driver_version=f"{cuda[0]}.{cuda[1]}" if cuda else None,
        nvml_version=detection.nvml_version,
        gpus=[check_gpu(g) for g in detection.gpus],
        backends=backends,
        wheel_problems=wheel_problems(cuda, installed),
        smoke=results,
        smoke_note=note,
        versions={"python": platform.python_version(), **installed, **_own_version()},
        state=state,
        telemetry=telemetry,
    )


def _telemetry(
    source: NvmlModule | None, state: Mapping[str, Any], *, record: bool
) -> tuple[dict[str, Any], Mapping[str, Any]]:
    """What telemetry can measure, and the state with a short live telemetry recording added
    (on a live GPU: the bundle's nvml-state.json then replays it as RecordedTelemetry)."""
    import pynvml

    from mlperf_mig.telemetry.record import capabilities, record_telemetry

    found = capabilities(pynvml if source is None else source)
    if record:
        sample = record_telemetry(pynvml, seconds=2.0)
        if sample is not None:
            state = {**state, "telemetry": sample}
    return found, state


def _own_version() -> dict[str, str]:
    import importlib.metadata

    try:
        return {"mlperf-mig": importlib.metadata.version("mlperf-mig")}
    except importlib.metadata.PackageNotFoundError:
        return {}


def smoke_devices(detection: Detection) -> list[SmokeDevice]:
    """One smoke device per usable device: each GPU instance, the VM's vGPU, or a whole GPU."""
    devices = []
    for state in detection.gpus:
        for device in usable_devices(state):
            if state.catalog_gpu is None:
                continue  # the engine recipe needs a catalog GPU
            profile = device.profile.name if device.profile else None
            where = f" {profile}" if profile else ""
            devices.append(
                SmokeDevice(
                    label=f"GPU {state.index} {device.kind}{where}"
                    + (f"@{device.placement_start}" if device.placement_start is not None else ""),
                    gpu=state.catalog_gpu.name,
                    profile=profile,
                    uuid=device.uuid,
                )
            )
    return devices


def _smoke(
    detection: Detection, backends: list[InstallStatus], *, replayed: bool, enabled: bool
) -> tuple[list[SmokeResult], str]:
    if not enabled:
        return [], "skipped (--no-smoke)"
    gpu_backends = [b.name for b in backends if b.runs_on_gpu]
    if replayed:
        return smoke_all(
            [], []
        ), "GPU part skipped: the GPUs of a replayed state are not on this machine"
    if not detection.gpus:
        return smoke_all([], []), "GPU part skipped: no GPU on this machine; the CPU reference ran"
    if all(gpu.lost for gpu in detection.gpus):
        return smoke_all([], []), "GPU part skipped: every GPU is lost; the CPU reference ran"
    devices = smoke_devices(detection)
    note = (
        "" if gpu_backends else "GPU part skipped: no GPU backend is usable (see the fixes above)"
    )
    if not devices:
        note = "GPU part skipped: no usable device (MIG on without instances, or a GPU not in the catalog)"
    return smoke_all(devices, gpu_backends), note


# --- the bundle -----------------------------------------------------------------------------
def write_bundle(
    report: DoctorReport, folder: str | os.PathLike[str], *, include_ids: bool
) -> Path:
    """Write the NVML state (replay format: a new tests/registry/fixtures/ case) and the report.

    Doctor records no host name. Without `include_ids`, GPU and MIG UUIDs become placeholders
    (consistently, so the state still replays) and the home folder (in error lines) becomes `~`.
    """
    from mlperf_mig._io import atomic_write_json, ensure_writable_dir

    path = Path(folder)
    ensure_writable_dir(path)
    state, data = dict(report.state), report.to_dict()
    if not include_ids:
        mapping = _placeholders(json.dumps(state) + json.dumps(data))
        state, data = _redact(state, mapping), _redact(data, mapping)
    state["note"] = "recorded by `mlperf-mig doctor --record`" + (
        "" if include_ids else "; UUIDs replaced by placeholders, the home folder by ~"
    )
    atomic_write_json(path / BUNDLE_STATE, state)
    atomic_write_json(path / BUNDLE_REPORT, data)
    return path


def _placeholders(text: str) -> dict[str, str]:
    mapping: dict[str, str] = {}
    for found in dict.fromkeys(_UUID_RE.findall(text)):
        n = len(mapping)
        if found.upper().startswith("MIG-GPU-"):
            mapping[found] = (
                f"MIG-GPU-{n:08x}-0000-0000-0000-000000000000/{found.rsplit('/', 2)[-2]}/{found.rsplit('/', 1)[-1]}"
            )
        elif found.upper().startswith("MIG-"):
            mapping[found] = f"MIG-{n:08x}-0000-0000-0000-000000000000"
        else:
            mapping[found] = f"GPU-{n:08x}-0000-0000-0000-000000000000"
    home = str(Path.home())
    if len(home) > 1:  # a home of "/" would rewrite every path
        mapping[home] = "~"
    return dict(sorted(mapping.items(), key=lambda item: -len(item[0])))


def _redact(value: JsonData, mapping: Mapping[str, str]) -> JsonData:
    if isinstance(value, str):
        for old, new in mapping.items():
            value = value.replace(old, new)
        return value
    if isinstance(value, Mapping):
        return {k: _redact(v, mapping) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact(v, mapping) for v in value]
    return value
