"""The recorded NVML state: its format, and `read_nvml_state`, which writes it from NVML.

Discovery (`detect`) interprets a state; `RecordedNvml` (registry/replay.py) replays one through
the calls nvidia-ml-py offers. Both read this module; it reads neither.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any, TypeVar

import pynvml

from mlperf_mig.errors import DiscoveryError

STATE_FORMAT = "mlperf-mig nvml state v1"

# pynvml ships no type information; these names say which of its objects a signature takes.
NvmlModule = Any  # the pynvml module, or a stand-in with its functions (replay.RecordedNvml)
NvmlHandle = Any  # NVML's opaque device handle (or a stand-in's), from nvmlDeviceGetHandleByIndex
NvmlProfileInfo = Any  # a pynvml c_nvmlGpuInstanceProfileInfo_v2_t or the v3 struct below
NvmlOut = Any  # an out-parameter NVML fills: a ctypes array or ctypes.byref(...)
NvmlValue = Any  # what an NVML query returns (a number or text), or its recorded JSON value
_T = TypeVar("_T")

PROFILE_INFO_FIELDS = (
    "id",
    "sliceCount",
    "instanceCount",
    "multiprocessorCount",
    "copyEngineCount",
    "decoderCount",
    "encoderCount",
    "jpegCount",
    "ofaCount",
    "memorySizeMB",
)
ATTRIBUTE_FIELDS = (
    "multiprocessorCount",
    "sharedCopyEngineCount",
    "sharedDecoderCount",
    "sharedEncoderCount",
    "sharedJpegCount",
    "sharedOfaCount",
    "gpuInstanceSliceCount",
    "computeInstanceSliceCount",
    "memorySizeMB",
)
_NVML_GONE = (pynvml.NVMLError_NotSupported, pynvml.NVMLError_NoPermission)
# Every GPU-instance profile constant is asked, up to NVML_GPU_INSTANCE_PROFILE_COUNT (0x12 in
# the CUDA 13.2 header, after 3_SLICE_GFX = 0x11), even where the installed pynvml knows fewer.
GI_PROFILE_CONSTANT_COUNT = max(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT, 0x12)
GI_PROFILE_CAPS_P2P = 0x1  # NVML_GPU_INSTANCE_PROFILE_CAPS_P2P
GI_PROFILE_CAPS_GFX = 0x2  # NVML_GPU_INSTANCE_PROFILE_CAPS_GFX (nvml.h since NVML 12.3)


class c_nvmlGpuInstanceProfileInfo_v3_t(pynvml._PrintableStructure):
    """nvmlGpuInstanceProfileInfo_v3_t of nvml.h: v2 without isP2pSupported, plus capabilities
    (CAPS_P2P, CAPS_GFX). nvidia-ml-py 13.615 wraps only v2, so the v3 call is made here."""

    _fields_ = (
        ("version", ctypes.c_uint),
        ("id", ctypes.c_uint),
        ("sliceCount", ctypes.c_uint),
        ("instanceCount", ctypes.c_uint),
        ("multiprocessorCount", ctypes.c_uint),
        ("copyEngineCount", ctypes.c_uint),
        ("decoderCount", ctypes.c_uint),
        ("encoderCount", ctypes.c_uint),
        ("jpegCount", ctypes.c_uint),
        ("ofaCount", ctypes.c_uint),
        ("memorySizeMB", ctypes.c_ulonglong),
        ("name", ctypes.c_char * pynvml.NVML_DEVICE_NAME_V2_BUFFER_SIZE),
        ("capabilities", ctypes.c_uint),
    )

    def __init__(self) -> None:
        # NVML_STRUCT_VERSION(GpuInstanceProfileInfo, 3) = sizeof(struct) | 3 << 24
        super().__init__(version=ctypes.sizeof(c_nvmlGpuInstanceProfileInfo_v3_t) | 3 << 24)


def gpu_instance_profile_info_v3(
    handle: NvmlHandle, constant: int
) -> c_nvmlGpuInstanceProfileInfo_v3_t:
    """nvmlDeviceGetGpuInstanceProfileInfoV with the v3 struct (there is no "...InfoV3" symbol)."""
    info = c_nvmlGpuInstanceProfileInfo_v3_t()
    function = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetGpuInstanceProfileInfoV")
    pynvml._nvmlCheckReturn(function(handle, constant, ctypes.byref(info)))
    return info


def nvml_error_name(exc: pynvml.NVMLError) -> str:
    """The name of a pynvml error's code ("NOT_SUPPORTED"), the inverse of `nvml_error`."""
    for attribute in dir(pynvml):
        if attribute.startswith("NVML_ERROR_") and getattr(pynvml, attribute) == exc.value:
            return attribute.removeprefix("NVML_ERROR_")
    return str(exc.value)


# --- reading NVML ---------------------------------------------------------------------------
def read_nvml_state(nvml: NvmlModule = pynvml) -> dict[str, Any]:
    """Ask NVML (or an injected stand-in) for everything discovery needs, as plain JSON data."""
    try:
        nvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return {"format": STATE_FORMAT, "init_error": nvml_error_name(exc), "gpus": []}
    try:
        return {
            "format": STATE_FORMAT,
            "init_error": None,
            "driver_version": _text(nvml.nvmlSystemGetDriverVersion()),
            "cuda_driver_version": _optional(nvml.nvmlSystemGetCudaDriverVersion),
            "nvml_version": _optional(lambda: _text(nvml.nvmlSystemGetNVMLVersion())),
            "gpus": [_read_gpu(nvml, i) for i in range(nvml.nvmlDeviceGetCount())],
        }
    except pynvml.NVMLError as exc:
        raise DiscoveryError(
            f"NVML failed while reading the GPUs ({exc}); check `nvidia-smi` and the driver "
            "(a lost GPU or a driver/library mismatch needs a reset or reboot)"
        ) from exc
    finally:
        nvml.nvmlShutdown()


def _optional(call: Callable[[], _T]) -> _T | None:
    """`call()`, or None where the driver does not offer it (older drivers, recorded states)."""
    try:
        return call()
    except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):
        return None


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _read_gpu(nvml: NvmlModule, index: int) -> dict[str, Any]:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    pci = nvml.nvmlDeviceGetPciInfo(handle)
    gpu: dict[str, Any] = {
        "name": _text(nvml.nvmlDeviceGetName(handle)),
        "uuid": _text(nvml.nvmlDeviceGetUUID(handle)),
        "pci_device_id": f"0x{pci.pciDeviceId:08X}",
        "memory_total_bytes": int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
        "virtualization_mode": _virtualization_mode(nvml, handle),
    }
    if pci.pciSubSystemId:  # tells boards with one device ID apart (RTX PRO 5000 48GB / 72GB)
        gpu["pci_subsystem_id"] = f"0x{pci.pciSubSystemId:08X}"
    try:
        gpu["mig_mode"] = [int(m) for m in nvml.nvmlDeviceGetMigMode(handle)]
    except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):
        gpu["mig_mode"] = None  # not MIG-capable (or a driver without MIG)
        return gpu
    gpu["gi_profiles"], invalid, error = _read_profiles(nvml, handle)
    if error is not None:
        gpu["gi_profile_error"] = error
    if invalid:
        gpu["invalid_profile_constants"] = invalid
    if gpu["mig_mode"][0] == pynvml.NVML_DEVICE_MIG_ENABLE:
        gpu.update(_read_mig_devices(nvml, handle))
    return gpu


def _virtualization_mode(nvml: NvmlModule, handle: NvmlHandle) -> int | None:
    """NVML's virtualization mode (2 = a vGPU inside a VM), or None where the driver cannot say."""
    try:
        return int(nvml.nvmlDeviceGetVirtualizationMode(handle))
    except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):
        return None


def _read_profiles(
    nvml: NvmlModule, handle: NvmlHandle
) -> tuple[list[dict[str, Any]], list[int], str | None]:
    """GPU-instance profiles by NVML constant, the constants the driver called invalid, and the
    error that every constant gave when none answered (MIG off on a driver that cannot say).

    Every constant is asked: a driver may reject one in the middle of the range (INVALID_ARGUMENT)
    and still know later ones, so an invalid constant is recorded, not taken as the end. Each is
    asked with the v3 struct first (its `capabilities` say +gfx); a driver without it gets v2.
    """
    profiles, errors, invalid = [], set(), []
    v3 = [True]  # whether this driver takes the v3 struct; cleared on its first refusal
    for constant in range(GI_PROFILE_CONSTANT_COUNT):
        try:
            info, capabilities = _profile_info(nvml, handle, constant, v3)
        except pynvml.NVMLError_InvalidArgument:
            invalid.append(constant)  # unknown to this driver; later constants may still answer
            continue
        except pynvml.NVMLError as exc:
            errors.add(nvml_error_name(exc))  # not on this GPU
            continue
        entry = {"constant": constant, "name": _text(info.name)}
        entry.update({field: int(getattr(info, field)) for field in PROFILE_INFO_FIELDS})
        if capabilities is not None:
            entry["capabilities"] = capabilities
        entry.update(_read_placements(nvml, handle, info.id))
        profiles.append(entry)
    error = errors.pop() if not profiles and len(errors) == 1 else None
    return profiles, invalid, error


def _profile_info(
    nvml: NvmlModule, handle: NvmlHandle, constant: int, v3: list[bool]
) -> tuple[NvmlProfileInfo, int | None]:
    """(profile info, capabilities): the v3 struct where the driver takes it, else v2 and None.

    A driver without v3 answers ARGUMENT_VERSION_MISMATCH (or FUNCTION_NOT_FOUND); one that
    answers INVALID_ARGUMENT is asked again with v2 to tell an old struct from an unknown constant.
    """
    if v3[0]:
        try:
            info = (
                gpu_instance_profile_info_v3(handle, constant)
                if nvml is pynvml
                else nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, constant, version=3)
            )
            return info, int(info.capabilities)
        except (pynvml.NVMLError_ArgumentVersionMismatch, pynvml.NVMLError_FunctionNotFound):
            v3[0] = False
        except pynvml.NVMLError_InvalidArgument:
            info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, constant)  # raises if invalid
            v3[0] = False
            return info, None
    return nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, constant), None


def _read_placements(nvml: NvmlModule, handle: NvmlHandle, profile_id: int) -> dict[str, Any]:
    """Possible placements of a profile ID: count query, then a caller-allocated array."""
    count = ctypes.c_uint(0)
    try:
        nvml.nvmlDeviceGetGpuInstancePossiblePlacements(
            handle, profile_id, None, ctypes.byref(count)
        )
        array = (pynvml.c_nvmlGpuInstancePlacement_t * count.value)()
        nvml.nvmlDeviceGetGpuInstancePossiblePlacements(
            handle, profile_id, array, ctypes.byref(count)
        )
    except pynvml.NVMLError as exc:
        return {"placements": None, "placements_error": nvml_error_name(exc)}
    return {"placements": [[p.start, p.size] for p in array[: count.value]]}


def _read_mig_devices(nvml: NvmlModule, handle: NvmlHandle) -> dict[str, Any]:
    devices, instances, instance_error = [], {}, None
    slots = nvml.nvmlDeviceGetMaxMigDeviceCount(handle)
    for index in range(slots):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, index)
        except (pynvml.NVMLError_NotFound, pynvml.NVMLError_InvalidArgument):
            continue  # an empty slot
        if not bool(nvml.nvmlDeviceIsMigDeviceHandle(mig)):  # a ctypes c_uint, not an int
            continue
        attributes = nvml.nvmlDeviceGetAttributes(mig)
        device = {
            "index": index,
            "uuid": _text(nvml.nvmlDeviceGetUUID(mig)),
            "gpu_instance_id": int(nvml.nvmlDeviceGetGpuInstanceId(mig)),
            "compute_instance_id": int(nvml.nvmlDeviceGetComputeInstanceId(mig)),
        }
        device.update({field: int(getattr(attributes, field)) for field in ATTRIBUTE_FIELDS})
        devices.append(device)
        gi = device["gpu_instance_id"]
        if gi in instances or instance_error:
            continue
        try:
            info = nvml.nvmlGpuInstanceGetInfo(nvml.nvmlDeviceGetGpuInstanceById(handle, gi))
        except _NVML_GONE as exc:
            instance_error = nvml_error_name(exc)  # needs root on some drivers
            continue
        instances[gi] = {
            "id": gi,
            "profile_id": int(info.profileId),
            "start": int(info.placement.start),
            "size": int(info.placement.size),
        }
    state: dict[str, Any] = {
        "max_mig_device_count": slots,
        "mig_devices": devices,
        "gpu_instances": list(instances.values()),
    }
    if instance_error:
        state["gpu_instance_error"] = instance_error
    return state
