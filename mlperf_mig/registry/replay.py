"""A recorded NVML state replayed through the same calls nvidia-ml-py offers.

`RecordedNvml` answers the subset of `pynvml` functions that discovery uses, with pynvml's own
shapes: ctypes structures, caller-allocated placement arrays filled through `byref` counts, a
ctypes `c_uint` from `nvmlDeviceIsMigDeviceHandle`, and `pynvml.NVMLError` subclasses. Tests pass
it to `detect(source=...)`; `read_nvml_state(pynvml)` writes the same format from a live GPU.
A GPU recorded in an error state (`error`, `failed_query`: a lost GPU) answers its error to the
failed query and to every query whose answer was not recorded, as the driver did.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import pynvml

from mlperf_mig._io import read_json
from mlperf_mig.errors import DataFileError
from mlperf_mig.registry.nvml_state import (
    ATTRIBUTE_FIELDS,
    PROFILE_INFO_FIELDS,
    STATE_FORMAT,
    NvmlOut,
    NvmlProfileInfo,
    NvmlValue,
    c_nvmlGpuInstanceProfileInfo_v3_t,
    check_state,
    read_nvml_state,
)


def nvml_error(name: str) -> pynvml.NVMLError:
    """The pynvml exception for error `name` (e.g. "NOT_SUPPORTED"), as pynvml itself raises it."""
    return pynvml.NVMLError(getattr(pynvml, f"NVML_ERROR_{name}"))


@attrs.frozen
class _GpuHandle:
    index: int


@attrs.frozen
class _MigHandle:
    gpu: int
    index: int


@attrs.frozen
class _GpuInstanceHandle:
    gpu: int
    gpu_instance_id: int


@attrs.frozen
class RecordedNvml:
    """Replays one recorded NVML state (the JSON written by `read_nvml_state`)."""

    state: Mapping[str, Any]

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> RecordedNvml:
        """Read a recorded state; DataFileError names the file when it is not one."""
        file = Path(path)
        try:
            state = read_json(file, "results")
        except (OSError, ValueError) as exc:
            raise DataFileError(
                f"{file}: not a readable NVML state ({exc}); record it again"
            ) from None
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise DataFileError(
                f"{file}: field format is not {STATE_FORMAT!r}; record the state with "
                "`mlperf-mig detect --record FILE`"
            )
        try:
            check_state(state)
        except ValueError as exc:
            raise DataFileError(
                f"{file}: not a recorded NVML state ({exc}); record it again with "
                "`mlperf-mig detect --record FILE`"
            ) from None
        recorded = cls(state)
        try:
            read_nvml_state(recorded)  # a field missing from a hand-edited file fails here, named
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            raise DataFileError(
                f"{file}: the recorded NVML state is incomplete ({type(exc).__name__}: {exc}); "
                "record it again with `mlperf-mig detect --record FILE`"
            ) from None
        return recorded

    # --- system -------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        if self.state.get("init_error"):
            raise nvml_error(self.state["init_error"])

    def nvmlShutdown(self) -> None:
        return None

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.state["driver_version"]

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self._system("cuda_driver_version")

    def nvmlSystemGetNVMLVersion(self) -> str:
        return self._system("nvml_version")

    def _system(self, field: str) -> NvmlValue:
        if self.state.get(field) is None:  # not recorded (older states)
            raise nvml_error("NOT_SUPPORTED")
        return self.state[field]

    def nvmlDeviceGetCount(self) -> int:
        return len(self.state["gpus"])

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _GpuHandle:
        if not 0 <= index < len(self.state["gpus"]):
            raise nvml_error("INVALID_ARGUMENT")
        gpu = self.state["gpus"][index]
        if gpu.get("error") and gpu.get("failed_query") == "nvmlDeviceGetHandleByIndex":
            raise nvml_error(gpu["error"])
        return _GpuHandle(index)

    # --- one GPU ------------------------------------------------------------------------
    def _gpu(
        self, handle: _GpuHandle | _MigHandle | _GpuInstanceHandle, field: str | None = None
    ) -> Mapping[str, Any]:
        """The recorded GPU; a GPU in an error state raises its error where `field`, the answer
        a query needs, was not recorded (it was lost before that query)."""
        index = handle.index if isinstance(handle, _GpuHandle) else handle.gpu
        gpu = self.state["gpus"][index]
        if gpu.get("error") and (field is None or field not in gpu):
            raise nvml_error(gpu["error"])
        return gpu

    def nvmlDeviceGetName(self, handle: _GpuHandle) -> str:
        return self._gpu(handle, "name")["name"]

    def nvmlDeviceGetUUID(self, handle: _GpuHandle | _MigHandle) -> str:
        if isinstance(handle, _MigHandle):
            return self._mig(handle)["uuid"]
        return self._gpu(handle, "uuid")["uuid"]

    def nvmlDeviceGetPciInfo(self, handle: _GpuHandle) -> pynvml.nvmlPciInfo_t:
        gpu = self._gpu(handle, "pci_device_id")
        info = pynvml.nvmlPciInfo_t()
        info.pciDeviceId = int(gpu["pci_device_id"], 16)
        info.pciSubSystemId = int(gpu.get("pci_subsystem_id", "0x0"), 16)
        return info

    def nvmlDeviceGetMemoryInfo(self, handle: _GpuHandle) -> pynvml.c_nvmlMemory_t:
        info = pynvml.c_nvmlMemory_t()
        info.total = self._gpu(handle, "memory_total_bytes")["memory_total_bytes"]
        return info

    def nvmlDeviceGetVirtualizationMode(self, handle: _GpuHandle) -> int:
        mode = self._gpu(handle, "virtualization_mode").get("virtualization_mode")
        if mode is None:  # not recorded (older states) or not supported by that driver
            raise nvml_error("NOT_SUPPORTED")
        return mode

    def nvmlDeviceGetMigMode(self, handle: _GpuHandle) -> list[int]:
        mode = self._gpu(handle, "mig_mode").get("mig_mode")
        if mode is None:
            raise nvml_error("NOT_SUPPORTED")
        return list(mode)

    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, handle: _GpuHandle, profile: int, version: int = 2
    ) -> pynvml.c_nvmlGpuInstanceProfileInfo_v2_t | c_nvmlGpuInstanceProfileInfo_v3_t:
        """The v2 struct, or with version=3 the v3 struct when the recording has `capabilities`
        (a state recorded without them replays as a driver that refuses v3)."""
        gpu = self._gpu(handle, "gi_profiles")
        if profile in gpu.get("invalid_profile_constants", ()):
            raise nvml_error("INVALID_ARGUMENT")
        if gpu.get("gi_profile_error"):
            raise nvml_error(gpu["gi_profile_error"])
        entry = next((p for p in gpu.get("gi_profiles", []) if p["constant"] == profile), None)
        if version == 3 and not any("capabilities" in p for p in gpu.get("gi_profiles", [])):
            raise nvml_error("ARGUMENT_VERSION_MISMATCH")
        if entry is None:
            raise nvml_error("NOT_SUPPORTED")
        info: NvmlProfileInfo = (
            c_nvmlGpuInstanceProfileInfo_v3_t()
            if version == 3
            else pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
        )
        for field in PROFILE_INFO_FIELDS:
            setattr(info, field, entry[field])
        info.name = entry["name"].encode()
        if version == 3:
            info.capabilities = entry["capabilities"]
        return info

    def nvmlDeviceGetGpuInstancePossiblePlacements(
        self, handle: _GpuHandle, profile_id: int, placements: NvmlOut, count_ref: NvmlOut
    ) -> int:
        entry = next(
            (
                p
                for p in self._gpu(handle, "gi_profiles").get("gi_profiles", [])
                if p["id"] == profile_id
            ),
            None,
        )
        if entry is None:
            raise nvml_error("INVALID_ARGUMENT")
        if entry.get("placements") is None:
            raise nvml_error(entry.get("placements_error", "NO_PERMISSION"))
        count = count_ref._obj
        wanted = entry["placements"]
        if placements is None:
            count.value = len(wanted)
            return pynvml.NVML_SUCCESS
        if count.value < len(wanted) or len(placements) < len(wanted):
            count.value = len(wanted)
            raise nvml_error("INSUFFICIENT_SIZE")
        for slot, (start, size) in zip(placements, wanted):
            slot.start, slot.size = start, size
        count.value = len(wanted)
        return pynvml.NVML_SUCCESS

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: _GpuHandle) -> int:
        gpu = self._gpu(handle, "max_mig_device_count")
        return gpu.get("max_mig_device_count", 0) if (gpu.get("mig_mode") or [0])[0] else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: _GpuHandle, index: int) -> _MigHandle:
        if not any(
            m["index"] == index for m in self._gpu(handle, "mig_devices").get("mig_devices", [])
        ):
            raise nvml_error("NOT_FOUND")
        return _MigHandle(handle.index, index)

    def nvmlDeviceGetGpuInstanceById(
        self, handle: _GpuHandle, gpu_instance_id: int
    ) -> _GpuInstanceHandle:
        gpu = self._gpu(handle, "gpu_instances")
        if gpu.get("gpu_instance_error"):
            raise nvml_error(gpu["gpu_instance_error"])
        if not any(g["id"] == gpu_instance_id for g in gpu.get("gpu_instances", [])):
            raise nvml_error("NOT_FOUND")
        return _GpuInstanceHandle(handle.index, gpu_instance_id)

    def nvmlGpuInstanceGetInfo(self, handle: _GpuInstanceHandle) -> pynvml.c_nvmlGpuInstanceInfo_t:
        entry = next(
            g
            for g in self._gpu(handle, "gpu_instances")["gpu_instances"]
            if g["id"] == handle.gpu_instance_id
        )
        info = pynvml.c_nvmlGpuInstanceInfo_t()
        info.id, info.profileId = entry["id"], entry["profile_id"]
        info.placement.start, info.placement.size = entry["start"], entry["size"]
        return info

    # --- MIG devices --------------------------------------------------------------------
    def _mig(self, handle: _MigHandle) -> Mapping[str, Any]:
        return next(
            m for m in self._gpu(handle, "mig_devices")["mig_devices"] if m["index"] == handle.index
        )

    def nvmlDeviceIsMigDeviceHandle(self, handle: _GpuHandle | _MigHandle) -> ctypes.c_uint:
        return ctypes.c_uint(int(isinstance(handle, _MigHandle)))

    def nvmlDeviceGetGpuInstanceId(self, handle: _MigHandle) -> int:
        return self._mig(handle)["gpu_instance_id"]

    def nvmlDeviceGetComputeInstanceId(self, handle: _MigHandle) -> int:
        return self._mig(handle)["compute_instance_id"]

    def nvmlDeviceGetAttributes(self, handle: _MigHandle) -> pynvml.c_nvmlDeviceAttributes:
        attributes = pynvml.c_nvmlDeviceAttributes()
        for field in ATTRIBUTE_FIELDS:
            setattr(attributes, field, self._mig(handle)[field])
        return attributes
