"""The recorded NVML state: its format, and `read_nvml_state`, which writes it from NVML.

Discovery (`detect`) interprets a state; `RecordedNvml` (registry/replay.py) replays one through
the calls nvidia-ml-py offers. Both read this module; it reads neither.

A GPU that answers GPU_IS_LOST, UNKNOWN or NOT_FOUND (one that fell off the bus while
`nvidia-smi` still lists the others) is recorded as it was read up to then, with `error` (the
answer) and `failed_query` (the NVML function that got it); the other GPUs are read as usual.
A replay answers that error to the failed query and to every query whose answer is not recorded.
A state read back from a file is untrusted: `check_state` names the first field of the wrong kind.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Callable, Mapping
from typing import Any, NoReturn, TypeVar

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
# What a GPU answers once it cannot be read at all (it fell off the bus, the driver lost it, it
# went away after NVML counted it): that GPU is recorded in an error state, the others are read.
GPU_LOST_ERRORS = ("GPU_IS_LOST", "UNKNOWN", "NOT_FOUND")
# The NVML functions discovery asks of one GPU, in the order it asks them (a `failed_query`).
GPU_QUERIES = (
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetPciInfo",
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetVirtualizationMode",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetGpuInstanceProfileInfo",
    "nvmlDeviceGetGpuInstanceProfileInfoV",
    "nvmlDeviceGetGpuInstancePossiblePlacements",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceIsMigDeviceHandle",
    "nvmlDeviceGetAttributes",
    "nvmlDeviceGetGpuInstanceId",
    "nvmlDeviceGetComputeInstanceId",
    "nvmlDeviceGetGpuInstanceById",
    "nvmlGpuInstanceGetInfo",
)
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
            "gpus": [_read_gpu_or_its_error(nvml, i) for i in range(nvml.nvmlDeviceGetCount())],
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


def gpu_lost(exc: pynvml.NVMLError) -> bool:
    """Whether an NVML error says the GPU cannot be read at all (GPU_LOST_ERRORS)."""
    return nvml_error_name(exc) in GPU_LOST_ERRORS


class _Watched:
    """An NVML module that remembers the last function asked of it: the query a lost GPU failed."""

    def __init__(self, module: NvmlModule) -> None:
        self.module = module
        self.last = ""

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.module, name)
        if not callable(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            self.last = name
            return value(*args, **kwargs)

        return call


def _read_gpu_or_its_error(nvml: NvmlModule, index: int) -> dict[str, Any]:
    """One GPU's state; a GPU that answers one of GPU_LOST_ERRORS keeps what was read before,
    with the error and the query that got it, so that the other GPUs are still read."""
    watched = _Watched(nvml)
    gpu: dict[str, Any] = {}
    try:
        _read_gpu(watched, index, gpu)
    except pynvml.NVMLError as exc:
        if not gpu_lost(exc):
            raise
        return {
            **_in_order(_answered_before(gpu)),
            "error": nvml_error_name(exc),
            "failed_query": watched.last,
        }
    return _in_order(gpu)


_FIRST_FIELDS = (
    "name",
    "uuid",
    "pci_device_id",
    "memory_total_bytes",
    "virtualization_mode",
    "pci_subsystem_id",
)


def _in_order(gpu: dict[str, Any]) -> dict[str, Any]:
    """The GPU's fields in the order states have always been written (name first), the rest as
    read: a state recorded again is the same text."""
    first = {k: gpu[k] for k in _FIRST_FIELDS if k in gpu}
    return {**first, **{k: v for k, v in gpu.items() if k not in first}}


def _answered_before(gpu: dict[str, Any]) -> dict[str, Any]:
    """The fields of a GPU read before it was lost, without a half-read list of profiles or
    MIG devices (a replay answers the error to the query of a field that is not recorded)."""
    partial = ("gi_profiles", "gi_profile_error", "invalid_profile_constants")
    return {k: v for k, v in gpu.items() if k not in partial}


def _read_gpu(nvml: NvmlModule, index: int, gpu: dict[str, Any]) -> None:
    """Fill `gpu` field by field, so that a GPU lost midway keeps what it answered."""
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    pci = nvml.nvmlDeviceGetPciInfo(handle)
    gpu["pci_device_id"] = f"0x{pci.pciDeviceId:08X}"
    if pci.pciSubSystemId:  # tells boards with one device ID apart (RTX PRO 5000 48GB / 72GB)
        gpu["pci_subsystem_id"] = f"0x{pci.pciSubSystemId:08X}"
    gpu["name"] = _text(nvml.nvmlDeviceGetName(handle))
    gpu["uuid"] = _text(nvml.nvmlDeviceGetUUID(handle))
    gpu["memory_total_bytes"] = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
    gpu["virtualization_mode"] = _virtualization_mode(nvml, handle)
    try:
        gpu["mig_mode"] = [int(m) for m in nvml.nvmlDeviceGetMigMode(handle)]
    except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):
        gpu["mig_mode"] = None  # not MIG-capable (or a driver without MIG)
        return
    profiles, invalid, error = _read_profiles(nvml, handle)
    gpu["gi_profiles"] = profiles
    if error is not None:
        gpu["gi_profile_error"] = error
    if invalid:
        gpu["invalid_profile_constants"] = invalid
    if gpu["mig_mode"][0] == pynvml.NVML_DEVICE_MIG_ENABLE:
        gpu.update(_read_mig_devices(nvml, handle))


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
            if gpu_lost(exc):
                raise  # the GPU, not this profile, is gone
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
            if isinstance(nvml, _Watched) and nvml.module is pynvml:
                nvml.last = "nvmlDeviceGetGpuInstanceProfileInfoV"
                info = gpu_instance_profile_info_v3(handle, constant)
            elif nvml is pynvml:
                info = gpu_instance_profile_info_v3(handle, constant)
            else:
                info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, constant, version=3)
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
        if gpu_lost(exc):
            raise
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


# --- checking a state read back from a file -------------------------------------------------
_HEX_RE = re.compile(r"0x[0-9A-Fa-f]{1,8}")
_ERROR_NAME_RE = re.compile(r"[A-Z][A-Z0-9_]{0,39}")
_TEXT_LIMIT = 256  # NVML's longest strings (names, UUIDs, versions) are under 100 characters
_UINT_LIMIT = 2**64
_MIG_DEVICE_FIELDS = ("index", "gpu_instance_id", "compute_instance_id", *ATTRIBUTE_FIELDS)
_GPU_INSTANCE_FIELDS = ("id", "profile_id", "start", "size")


def check_state(state: object) -> None:
    """Check a recorded state read from a file (untrusted input): every field discovery reads is
    of its kind and in range. ValueError names the first field that is not ('gpus[1].name:
    expected text, got 3'); strings are not vetted for control characters here (discovery shows
    them escaped)."""
    top = _mapping(state, "the state")
    _if_there(top, "init_error", _error_name, "the state")
    if top.get("init_error"):
        return
    _text_field(top, "driver_version", "the state", required=True)
    _if_there(top, "nvml_version", _text_value, "the state")
    _if_there(top, "cuda_driver_version", _uint, "the state")
    for i, gpu in enumerate(_sequence(top.get("gpus"), "gpus")):
        _check_gpu(_mapping(gpu, f"gpus[{i}]"), f"gpus[{i}]")


def _check_gpu(gpu: Mapping[str, Any], where: str) -> None:
    lost = "error" in gpu
    if lost:
        if gpu["error"] not in GPU_LOST_ERRORS:
            _refuse(f"{where}.error", f"one of {', '.join(GPU_LOST_ERRORS)}", gpu["error"])
        if gpu.get("failed_query") not in GPU_QUERIES:
            _refuse(
                f"{where}.failed_query", "an NVML function discovery asks", gpu.get("failed_query")
            )
    for field in ("name", "uuid"):
        _text_field(gpu, field, where, required=not lost)
    for field in ("pci_device_id", "pci_subsystem_id"):
        if field in gpu or (field == "pci_device_id" and not lost):
            _hex(gpu.get(field), f"{where}.{field}")
    if "memory_total_bytes" in gpu or not lost:
        _uint(gpu.get("memory_total_bytes"), f"{where}.memory_total_bytes")
    _if_there(gpu, "virtualization_mode", _uint, where)
    mode = gpu.get("mig_mode")
    if mode is not None and (
        not isinstance(mode, list)
        or len(mode) != 2
        or any(isinstance(m, bool) or m not in (0, 1) for m in mode)
    ):
        _refuse(f"{where}.mig_mode", "null or [current, pending] of 0 and 1", mode)
    _if_there(gpu, "gi_profile_error", _error_name, where)
    for k, constant in enumerate(
        _sequence(gpu.get("invalid_profile_constants", []), f"{where}.invalid_profile_constants")
    ):
        _uint(constant, f"{where}.invalid_profile_constants[{k}]")
    for k, entry in enumerate(_sequence(gpu.get("gi_profiles", []), f"{where}.gi_profiles")):
        _check_profile(_mapping(entry, f"{where}.gi_profiles[{k}]"), f"{where}.gi_profiles[{k}]")
    _if_there(gpu, "max_mig_device_count", _uint, where)
    _if_there(gpu, "gpu_instance_error", _error_name, where)
    for k, device in enumerate(_sequence(gpu.get("mig_devices", []), f"{where}.mig_devices")):
        at = f"{where}.mig_devices[{k}]"
        device = _mapping(device, at)
        _text_field(device, "uuid", at, required=True)
        for field in _MIG_DEVICE_FIELDS:
            _uint(device.get(field), f"{at}.{field}")
    for k, instance in enumerate(_sequence(gpu.get("gpu_instances", []), f"{where}.gpu_instances")):
        at = f"{where}.gpu_instances[{k}]"
        instance = _mapping(instance, at)
        for field in _GPU_INSTANCE_FIELDS:
            _uint(instance.get(field), f"{at}.{field}")


def _check_profile(entry: Mapping[str, Any], where: str) -> None:
    _text_field(entry, "name", where, required=True)
    for field in ("constant", *PROFILE_INFO_FIELDS):
        _uint(entry.get(field), f"{where}.{field}")
    _if_there(entry, "capabilities", _uint, where)
    _if_there(entry, "placements_error", _error_name, where)
    placements = entry.get("placements")
    if placements is None:
        return
    for k, pair in enumerate(_sequence(placements, f"{where}.placements")):
        if not isinstance(pair, list) or len(pair) != 2:
            _refuse(f"{where}.placements[{k}]", "[start, size]", pair)
        _uint(pair[0], f"{where}.placements[{k}][0]")
        _uint(pair[1], f"{where}.placements[{k}][1]")


def _refuse(where: str, expected: str, value: object) -> NoReturn:
    shown = repr(value)
    raise ValueError(
        f"{where}: expected {expected}, got {shown[:60] + '...' if len(shown) > 60 else shown}"
    )


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        _refuse(where, "an object", value)
    return value


def _sequence(value: object, where: str) -> list[Any]:
    if not isinstance(value, list):
        _refuse(where, "a list", value)
    return value


def _uint(value: object, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < _UINT_LIMIT:
        _refuse(where, "a whole number from 0", value)


def _text_value(value: object, where: str) -> None:
    if not isinstance(value, str) or len(value) > _TEXT_LIMIT:
        _refuse(where, f"text of at most {_TEXT_LIMIT} characters", value)


def _text_field(data: Mapping[str, Any], field: str, where: str, *, required: bool) -> None:
    if field in data or required:
        _text_value(data.get(field), f"{where}.{field}")


def _hex(value: object, where: str) -> None:
    if not isinstance(value, str) or _HEX_RE.fullmatch(value) is None:
        _refuse(where, "a hex number such as 0x233010DE", value)


def _error_name(value: object, where: str) -> None:
    if not isinstance(value, str) or _ERROR_NAME_RE.fullmatch(value) is None:
        _refuse(where, "an NVML error name such as NOT_SUPPORTED", value)


def _if_there(
    data: Mapping[str, Any], field: str, check: Callable[[object, str], None], where: str
) -> None:
    """Check `data[field]` where it is there and not null."""
    if data.get(field) is not None:
        check(data[field], f"{where}.{field}")
