"""CUDA for the TensorRT backend through cuda-python: device identity, streams, host/device buffers.

cuda-python (`cuda.bindings.runtime`) ships wheels, unlike pycuda, which has to be compiled
against a CUDA toolkit. Every one of its calls returns a tuple whose first item is a
`cudaError_t` and whose other items are the results; `cuda_call` turns a failure into an
exception that names the call and the CUDA error.

Nothing here imports cuda-python at module level: callers pass the runtime module in, which keeps
this module importable anywhere and lets the tests hand in a recording fake.
"""

from __future__ import annotations

import ctypes
import importlib
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

import attrs
import numpy as np

from mlperf_mig.errors import BackendUnavailableError

log = logging.getLogger(__name__)

CUDA_RUNTIME_MODULE = "cuda.bindings.runtime"

# cuda-python is imported at run time only; these names say which of its objects a signature takes.
CudaError = Any  # a cudaError_t value
CudaStreamHandle = Any  # a cudaStream_t (or another cuda-python handle object)
CudaValues = Any  # what a cuda-python call gives after its error: None, one value or a tuple


def import_cuda_runtime(
    import_module: Callable[[str], ModuleType] = importlib.import_module,
) -> ModuleType:
    """Return cuda-python's runtime module (`cuda.bindings.runtime`, cuda-python 12.6 and later)."""
    return import_module(CUDA_RUNTIME_MODULE)


def cuda_error_name(cudart: ModuleType, err: CudaError) -> str:
    """The CUDA name of `err` ("cudaErrorMemoryAllocation"), or its repr if CUDA cannot name it."""
    status, name = cudart.cudaGetErrorName(err)
    if status != cudart.cudaError_t.cudaSuccess:
        return repr(err)
    return name.decode() if isinstance(name, bytes) else str(name)


def cuda_call(cudart: ModuleType, result: tuple[Any, ...], what: str) -> CudaValues:
    """Check the `(err, *values)` tuple of a cuda-python call; return None, the value, or the values."""
    err, *values = result
    if err != cudart.cudaError_t.cudaSuccess:
        raise BackendUnavailableError(
            f"CUDA call {what} failed with {cuda_error_name(cudart, err)}; check that the GPU or "
            "MIG device in CUDA_VISIBLE_DEVICES exists, is healthy and has free memory"
        )
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


# --- device identity ------------------------------------------------------------------------
@attrs.frozen(kw_only=True)
class DeviceIdentity:
    """The CUDA device this process runs on, as CUDA reports it.

    On a MIG instance CUDA names the device "<GPU> MIG <profile>" (for example
    "NVIDIA H200 MIG 1g.18gb"); `gpu` and `mig_profile` are the two halves, with the "NVIDIA "
    prefix dropped as the registry does. `mig_profile` is None on a whole GPU.
    """

    name: str
    gpu: str
    mig_profile: str | None
    uuid: str  # "MIG-..." on a MIG instance, "GPU-..." on a whole GPU
    ordinal: int
    compute_capability: str

    @classmethod
    def from_properties(
        cls,
        *,
        name: str | bytes,
        uuid: bytes | Sequence[int],
        major: int,
        minor: int,
        ordinal: int,
        visible_devices: str | None,
    ) -> DeviceIdentity:
        """Build the identity from `cudaDeviceProp` fields and CUDA_VISIBLE_DEVICES."""
        text = name.decode(errors="replace") if isinstance(name, bytes) else name
        text = text.split("\x00", 1)[0].strip()
        gpu, mig_profile = split_device_name(text)
        return cls(
            name=text,
            gpu=gpu,
            mig_profile=mig_profile,
            uuid=device_uuid(
                uuid, mig=mig_profile is not None, ordinal=ordinal, visible_devices=visible_devices
            ),
            ordinal=ordinal,
            compute_capability=f"{major}.{minor}",
        )

    @classmethod
    def detect(cls, cudart: ModuleType, environ: Mapping[str, str] = os.environ) -> DeviceIdentity:
        """Ask CUDA which device this process uses (cudaGetDevice + cudaGetDeviceProperties)."""
        ordinal = int(cuda_call(cudart, cudart.cudaGetDevice(), "cudaGetDevice"))
        props = cuda_call(
            cudart, cudart.cudaGetDeviceProperties(ordinal), "cudaGetDeviceProperties"
        )
        return cls.from_properties(
            name=props.name,
            uuid=props.uuid.bytes,
            major=int(props.major),
            minor=int(props.minor),
            ordinal=ordinal,
            visible_devices=environ.get("CUDA_VISIBLE_DEVICES"),
        )

    def describe(self) -> str:
        """'H200 MIG 1g.18gb' or 'H200 (whole GPU)'."""
        if self.mig_profile is None:
            return f"{self.gpu} (whole GPU)"
        return f"{self.gpu} MIG {self.mig_profile}"


def split_device_name(name: str) -> tuple[str, str | None]:
    """'NVIDIA H200 MIG 1g.18gb' -> ('H200', '1g.18gb'); 'NVIDIA H200' -> ('H200', None)."""
    base, sep, profile = name.partition(" MIG ")
    gpu = base.strip().removeprefix("NVIDIA ").strip()
    return gpu, (profile.strip() or None) if sep else None


def format_uuid(raw: bytes | Sequence[int], prefix: str) -> str:
    """16 UUID bytes -> 'GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx' (the NVML/nvidia-smi spelling)."""
    data = bytes(b & 0xFF for b in raw)  # some cuda-python versions give signed chars
    if len(data) != 16:
        raise ValueError(f"a CUDA UUID has 16 bytes, got {len(data)}")
    h = data.hex()
    return f"{prefix}-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def device_uuid(
    raw: bytes | Sequence[int], *, mig: bool, ordinal: int, visible_devices: str | None
) -> str:
    """The UUID of device `ordinal`: the MIG UUID from CUDA_VISIBLE_DEVICES when it names one.

    The runner starts one worker per MIG instance with CUDA_VISIBLE_DEVICES=MIG-<uuid>; that
    string is what NVML and nvidia-smi call the instance, so it is reported as it is.
    """
    entries = [e.strip() for e in (visible_devices or "").split(",") if e.strip()]
    if ordinal < len(entries) and entries[ordinal].startswith("MIG-"):
        return entries[ordinal]
    return format_uuid(raw, "MIG" if mig else "GPU")


def cuda_device_count_reason(cudart: ModuleType) -> str | None:
    """None when CUDA sees at least one device, else why not (no driver, no device)."""
    err, count = cudart.cudaGetDeviceCount()
    if err != cudart.cudaError_t.cudaSuccess:
        return f"no CUDA device ({cuda_error_name(cudart, err)})"
    if count < 1:
        return "no CUDA device (CUDA reports 0 devices)"
    return None


# --- streams and buffers --------------------------------------------------------------------
def native_handle(
    obj: CudaStreamHandle, import_module: Callable[[str], ModuleType] = importlib.import_module
) -> int:
    """The address behind a cuda-python object such as a cudaStream_t, as an int.

    cuda-bindings 13 deprecated `int(obj)` for this in favour of
    `cuda.bindings.utils.get_cuda_native_handle`; older releases only have `int(obj)`.
    """
    try:
        utils = import_module("cuda.bindings.utils")
    except ImportError:
        return int(obj)
    try:
        return int(utils.get_cuda_native_handle(obj))
    except (AttributeError, TypeError):  # a release without the getter, or for this type
        return int(obj)


class CudaStream:
    """A CUDA stream; `handle` is the integer that TensorRT's execute_async_v3 takes."""

    def __init__(self, cudart: ModuleType, stream: CudaStreamHandle, handle: int) -> None:
        self._cudart = cudart
        self._stream: CudaStreamHandle = stream
        self._handle = handle

    @classmethod
    def create(cls, cudart: ModuleType) -> CudaStream:
        stream = cuda_call(cudart, cudart.cudaStreamCreate(), "cudaStreamCreate")
        return cls(cudart, stream, native_handle(stream))

    @property
    def stream(self) -> CudaStreamHandle:
        if self._stream is None:
            raise ValueError("the CUDA stream is closed")
        return self._stream

    @property
    def handle(self) -> int:
        """The stream as the integer TensorRT takes; like `stream`, refused once closed."""
        return self._handle if self.stream is not None else 0

    def synchronize(self) -> None:
        cuda_call(
            self._cudart, self._cudart.cudaStreamSynchronize(self.stream), "cudaStreamSynchronize"
        )

    def close(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            cuda_call(self._cudart, self._cudart.cudaStreamDestroy(stream), "cudaStreamDestroy")


class DeviceBuffer:
    """`nbytes` of device memory from cudaMalloc."""

    def __init__(self, cudart: ModuleType, ptr: int, nbytes: int) -> None:
        self._cudart = cudart
        self._ptr: int | None = ptr
        self.nbytes = nbytes

    @classmethod
    def allocate(cls, cudart: ModuleType, nbytes: int) -> DeviceBuffer:
        ptr = cuda_call(cudart, cudart.cudaMalloc(nbytes), f"cudaMalloc({nbytes})")
        return cls(cudart, int(ptr), nbytes)

    @property
    def ptr(self) -> int:
        if self._ptr is None:
            raise ValueError("the device buffer is freed")
        return self._ptr

    def close(self) -> None:
        if self._ptr is not None:
            ptr, self._ptr = self._ptr, None
            cuda_call(self._cudart, self._cudart.cudaFree(ptr), "cudaFree")


class HostBuffer:
    """Host memory for one tensor: page-locked (cudaMallocHost) or a plain numpy array.

    Page-locked memory lets cudaMemcpyAsync run truly asynchronously and faster; plain numpy
    memory works everywhere and costs no pinned memory, which is limited on some hosts.
    """

    def __init__(self, array: np.ndarray, free: Callable[[], None] | None) -> None:
        self._array: np.ndarray | None = array
        self._free = free

    @classmethod
    def allocate(cls, cudart: ModuleType, nbytes: int, *, pinned: bool) -> HostBuffer:
        if not pinned:
            return cls(np.empty(nbytes, dtype=np.uint8), None)
        ptr = int(cuda_call(cudart, cudart.cudaMallocHost(nbytes), f"cudaMallocHost({nbytes})"))
        array = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(ptr))

        def free() -> None:
            cuda_call(cudart, cudart.cudaFreeHost(ptr), "cudaFreeHost")

        return cls(array, free)

    @property
    def bytes_view(self) -> np.ndarray:
        """The whole buffer as uint8; views of it are valid until close()."""
        if self._array is None:
            raise ValueError("the host buffer is freed")
        return self._array

    @property
    def ptr(self) -> int:
        return int(self.bytes_view.ctypes.data)

    def view(self, dtype: np.dtype[Any], shape: tuple[int, ...]) -> np.ndarray:
        """The first bytes of the buffer seen as an array of `dtype` and `shape`."""
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        return self.bytes_view[: count * dtype.itemsize].view(dtype).reshape(shape)

    def close(self) -> None:
        if self._array is not None:
            self._array = None
            if self._free is not None:
                self._free()


@attrs.define(kw_only=True)
class TensorBuffers:
    """The host and device buffers of one engine input or output, sized for its largest shape."""

    name: str
    dtype: np.dtype[Any]
    is_input: bool
    host: HostBuffer
    device: DeviceBuffer

    @property
    def nbytes(self) -> int:
        return self.device.nbytes


class BufferAllocator:
    """Allocates the host/device buffer pairs of an engine and frees all of them in close().

    Kept apart from the runner so that allocation policy (pinned or not) and its clean-up are
    one object's business, as in NVIDIA's own harness.
    """

    def __init__(self, cudart: ModuleType, *, pinned: bool = True) -> None:
        self._cudart = cudart
        self._pinned = pinned
        self._owned: list[HostBuffer | DeviceBuffer] = []

    def allocate(
        self, name: str, dtype: np.dtype[Any], max_shape: tuple[int, ...], *, is_input: bool
    ) -> TensorBuffers:
        dtype = np.dtype(dtype)
        nbytes = max(1, int(np.prod(max_shape, dtype=np.int64)) * dtype.itemsize)
        device = DeviceBuffer.allocate(self._cudart, nbytes)
        self._owned.append(device)
        host = HostBuffer.allocate(self._cudart, nbytes, pinned=self._pinned)
        self._owned.append(host)
        log.debug("allocated %d bytes for %s %s", nbytes, "input" if is_input else "output", name)
        return TensorBuffers(name=name, dtype=dtype, is_input=is_input, host=host, device=device)

    def copy_to_device(self, buffers: TensorBuffers, array: np.ndarray, stream: CudaStream) -> None:
        """Stage `array` in the host buffer (converting its dtype) and queue the copy to the device.

        Staging keeps the source alive until the asynchronous copy has read it, whatever the
        caller does with `array` afterwards.
        """
        shape = tuple(int(d) for d in np.shape(array))
        nbytes = int(np.prod(shape, dtype=np.int64)) * buffers.dtype.itemsize
        if nbytes > buffers.nbytes:
            raise ValueError(
                f"{buffers.name}: shape {shape} needs {nbytes} bytes, more than the "
                f"{buffers.nbytes}-byte buffer sized for the engine's largest shape"
            )
        staged = buffers.host.view(buffers.dtype, shape)
        np.copyto(staged, array, casting="same_kind")
        self._memcpy(buffers.device.ptr, int(staged.ctypes.data), nbytes, "HostToDevice", stream)

    def copy_to_host(
        self, buffers: TensorBuffers, shape: tuple[int, ...], stream: CudaStream
    ) -> np.ndarray:
        """Queue the copy of the first `shape` elements back; valid after stream.synchronize()."""
        target = buffers.host.view(buffers.dtype, shape)
        self._memcpy(
            int(target.ctypes.data), buffers.device.ptr, target.nbytes, "DeviceToHost", stream
        )
        return target

    def _memcpy(self, dst: int, src: int, nbytes: int, direction: str, stream: CudaStream) -> None:
        kind = getattr(self._cudart.cudaMemcpyKind, f"cudaMemcpy{direction}")
        cuda_call(
            self._cudart,
            self._cudart.cudaMemcpyAsync(dst, src, nbytes, kind, stream.stream),
            f"cudaMemcpyAsync({direction}, {nbytes} bytes)",
        )

    def close(self) -> None:
        """Free every buffer this allocator handed out; the first failure is raised at the end."""
        owned, self._owned = self._owned, []
        failure: BackendUnavailableError | None = None
        for buffer in reversed(owned):
            try:
                buffer.close()
            except BackendUnavailableError as exc:
                failure = failure or exc
        if failure is not None:
            raise failure
