"""CUDA buffers, device identity and the engine runner, against fakes of cuda-python and TensorRT.

The fake CUDA runtime hands out real host memory for "device" allocations; like a real stream,
its asynchronous copies and the fake engine's kernel (which doubles its input) only run when the
stream is synchronised, so a result read before cudaStreamSynchronize is stale here as on a GPU.
The fake `trt.nptype` maps TensorRT data types to numpy types, as TensorRT's does. So the
runner's whole path (profile choice, staging, set_tensor_address, execute_async_v3, copy back,
synchronise, close) runs here without a GPU.
"""

from __future__ import annotations

import ctypes
import enum
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import attrs
import numpy as np
import pytest

from mlperf_mig.engines.backends.tensorrt.cuda import (
    BufferAllocator,
    CudaStream,
    DeviceIdentity,
    HostBuffer,
    cuda_call,
    cuda_device_count_reason,
    format_uuid,
    native_handle,
    split_device_name,
)
from mlperf_mig.engines.backends.tensorrt.engine_file import (
    EngineHeader,
    ShapeRange,
    write_engine_file,
)
from mlperf_mig.engines.backends.tensorrt.runner import TensorRTRunner, select_profile
from mlperf_mig.errors import BackendUnavailableError, EngineBuildError, EngineMismatchError

MIG_UUID = "MIG-2f1b7c2e-0d4e-5a7b-9c1d-3e5f7a9b1c2d"
UUID_BYTES = bytes(range(0xF0, 0x100))
GOOD_PLAN = b"GOOD-PLAN"


# --- a fake cuda.bindings.runtime -----------------------------------------------------------
class CudaError(enum.IntEnum):
    cudaSuccess = 0
    cudaErrorMemoryAllocation = 2
    cudaErrorInsufficientDriver = 35
    cudaErrorNoDevice = 100


class MemcpyKind(enum.IntEnum):
    cudaMemcpyHostToDevice = 1
    cudaMemcpyDeviceToHost = 2


class StreamHandle:
    def __init__(self, value: int) -> None:
        self.value = value

    def __int__(self) -> int:
        return self.value


class FakeCudaRuntime:
    """Records every call; 'device' memory is host memory, so copies really move bytes, but only
    when the stream is synchronised: work queued on a stream runs in order at
    cudaStreamSynchronize, as it may on a GPU any time before."""

    cudaError_t = CudaError
    cudaMemcpyKind = MemcpyKind

    def __init__(self, *, device_count: int = 1, name: bytes = b"NVIDIA H200 MIG 1g.18gb") -> None:
        self.device_count = device_count
        self.name = name
        self.live: dict[int, Any] = {}
        self.freed: list[str] = []
        self.copies: list[tuple[str, int]] = []
        self.fail: set[str] = set()
        self.streams_destroyed = 0
        self.queued: list[Callable[[], object]] = []

    def enqueue(self, stream: Any, work: Callable[[], object]) -> None:
        """Queue `work` on `stream`; it runs at the next cudaStreamSynchronize."""
        assert isinstance(stream, StreamHandle | int)
        self.queued.append(work)

    def _ok(self, call: str, *values: Any) -> tuple[Any, ...]:
        if call in self.fail:
            return (CudaError.cudaErrorMemoryAllocation, *(None for _ in values))
        return (CudaError.cudaSuccess, *values)

    def cudaGetErrorName(self, err: CudaError) -> tuple[Any, bytes]:
        return CudaError.cudaSuccess, err.name.encode()

    def cudaGetDeviceCount(self) -> tuple[Any, int]:
        if self.device_count < 0:
            return CudaError.cudaErrorInsufficientDriver, 0
        return CudaError.cudaSuccess, self.device_count

    def cudaGetDevice(self) -> tuple[Any, ...]:
        return self._ok("cudaGetDevice", 0)

    def cudaGetDeviceProperties(self, ordinal: int) -> tuple[Any, ...]:
        props = SimpleNamespace(
            name=self.name + b"\x00" * 16, uuid=SimpleNamespace(bytes=UUID_BYTES), major=9, minor=0
        )
        return self._ok("cudaGetDeviceProperties", props)

    def _allocate(self, call: str, nbytes: int) -> tuple[Any, ...]:
        if call in self.fail:
            return self._ok(call, None)
        block = (ctypes.c_uint8 * nbytes)()
        self.live[ctypes.addressof(block)] = block
        return self._ok(call, ctypes.addressof(block))

    def cudaMalloc(self, nbytes: int) -> tuple[Any, ...]:
        return self._allocate("cudaMalloc", nbytes)

    def cudaMallocHost(self, nbytes: int) -> tuple[Any, ...]:
        return self._allocate("cudaMallocHost", nbytes)

    def cudaFree(self, ptr: int) -> tuple[Any, ...]:
        del self.live[ptr]
        self.freed.append("device")
        return self._ok("cudaFree")

    def cudaFreeHost(self, ptr: int) -> tuple[Any, ...]:
        del self.live[ptr]
        self.freed.append("host")
        return self._ok("cudaFreeHost")

    def cudaMemcpyAsync(
        self, dst: int, src: int, nbytes: int, kind: Any, stream: Any
    ) -> tuple[Any, ...]:
        assert isinstance(stream, StreamHandle)
        self.enqueue(stream, lambda: ctypes.memmove(dst, src, nbytes))
        self.copies.append((kind.name, nbytes))
        return self._ok("cudaMemcpyAsync")

    def cudaStreamCreate(self) -> tuple[Any, ...]:
        return self._ok("cudaStreamCreate", StreamHandle(0x5000))

    def cudaStreamSynchronize(self, stream: Any) -> tuple[Any, ...]:
        work, self.queued = self.queued, []
        for item in work:
            item()
        return self._ok("cudaStreamSynchronize")

    def cudaStreamDestroy(self, stream: Any) -> tuple[Any, ...]:
        self.streams_destroyed += 1
        return self._ok("cudaStreamDestroy")


# --- a fake tensorrt whose engine doubles its input ------------------------------------------
class Severity(enum.Enum):
    ERROR = 1
    INFO = 3


class TensorIOMode(enum.Enum):
    INPUT = 1
    OUTPUT = 2


class DataType(enum.Enum):
    """TensorRT's tensor data types (a subset); not numpy types: trt.nptype converts them."""

    FLOAT = 0
    HALF = 1
    INT8 = 2
    INT32 = 3
    BOOL = 4
    BF16 = 7
    INT64 = 8


# tensorrt.nptype's table: types without a numpy equivalent (BF16, FP8, ...) raise TypeError
NUMPY_TYPES = {
    DataType.FLOAT: np.float32,
    DataType.HALF: np.float16,
    DataType.INT8: np.int8,
    DataType.INT32: np.int32,
    DataType.BOOL: np.bool_,
    DataType.INT64: np.int64,
}


class FakeILogger:
    def __init__(self) -> None:
        pass


def _view(address: int, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
    dtype = np.dtype(dtype)
    count = int(np.prod(shape))
    raw = (ctypes.c_uint8 * (count * dtype.itemsize)).from_address(address)
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


class FakeContext:
    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine
        self.profile: int | None = None
        self.profile_switches = 0
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.addresses: dict[str, int] = {}

    def set_optimization_profile_async(self, index: int, stream_handle: int) -> bool:
        assert isinstance(stream_handle, int)
        if self.engine.trt.fail_profile_switch:
            self.engine.trt.logger.log(Severity.ERROR, "profile switch while enqueue is pending")
            return False
        self.profile = index
        self.profile_switches += 1
        return True

    def set_input_shape(self, name: str, shape: tuple[int, ...]) -> bool:
        assert self.profile is not None
        if self.engine.trt.fail_input_shape:
            self.engine.trt.logger.log(Severity.ERROR, f"{name}: dimensions not in profile")
            return False
        if not self.engine.profiles[self.profile][name].contains(tuple(shape)):
            return False
        self.shapes[name] = tuple(shape)
        return True

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        batch, width = self.shapes["x"]
        return (batch,) if name == "argmax" else (batch, width)

    def set_tensor_address(self, name: str, address: int) -> bool:
        self.addresses[name] = address
        return True

    def execute_async_v3(self, stream_handle: int) -> bool:
        assert isinstance(stream_handle, int)
        if self.engine.trt.fail_execute:
            self.engine.trt.logger.log(Severity.ERROR, "an illegal memory access was encountered")
            return False
        shape, addresses = self.shapes["x"], dict(self.addresses)

        def kernel() -> None:
            x = _view(addresses["x"], np.float32, shape)
            _view(addresses["y"], np.float32, shape)[:] = 2 * x
            _view(addresses["argmax"], np.int32, shape[:1])[:] = x.argmax(axis=1)

        self.engine.trt.cudart.enqueue(stream_handle, kernel)
        return True


class FakeEngine:
    names = ("x", "y", "argmax")
    dtypes: ClassVar[dict[str, DataType]] = {
        "x": DataType.FLOAT,
        "y": DataType.FLOAT,
        "argmax": DataType.INT32,
    }

    def __init__(self, trt: FakeTensorRT) -> None:
        self.trt = trt
        self.profiles = trt.engine_profiles
        self.num_io_tensors = len(self.names)

    @property
    def num_optimization_profiles(self) -> int:
        return len(self.profiles)

    def get_tensor_name(self, index: int) -> str:
        return self.names[index]

    def get_tensor_mode(self, name: str) -> TensorIOMode:
        return TensorIOMode.INPUT if name == "x" else TensorIOMode.OUTPUT

    def get_tensor_dtype(self, name: str) -> DataType:
        return self.dtypes[name]

    def get_tensor_profile_shape(self, name: str, index: int) -> tuple[tuple[int, ...], ...]:
        shapes = self.profiles[index][name]
        return shapes.min, shapes.opt, shapes.max

    def create_execution_context(self) -> FakeContext:
        self.trt.context = FakeContext(self)
        return self.trt.context


class FakeRuntime:
    def __init__(self, trt: FakeTensorRT, logger: Any) -> None:
        self.trt = trt
        self.logger = logger
        trt.logger = logger
        trt.runtimes_created += 1

    def deserialize_cuda_engine(self, plan: memoryview) -> FakeEngine | None:
        if bytes(plan) != GOOD_PLAN:
            self.logger.log(
                Severity.ERROR, "Serialization assertion magicTagRead == kMAGIC_TAG failed"
            )
            return None
        return FakeEngine(self.trt)


def _profile(batch: int) -> dict[str, ShapeRange]:
    return {"x": ShapeRange(min=(1, 4), opt=(batch, 4), max=(batch, 4))}


class FakeTensorRT:
    __version__ = "10.13.3.9"
    ILogger = FakeILogger
    TensorIOMode = TensorIOMode

    def __init__(self, cudart: FakeCudaRuntime) -> None:
        self.cudart = cudart  # the engine's kernels run on its streams
        self.engine_profiles = (_profile(2), _profile(8))
        self.fail_execute = False
        self.fail_profile_switch = False
        self.fail_input_shape = False
        self.runtimes_created = 0
        self.context: FakeContext | None = None
        self.logger: Any = None

    @staticmethod
    def nptype(dtype: DataType) -> type:
        try:
            return NUMPY_TYPES[dtype]
        except KeyError:
            raise TypeError(
                "Could not resolve TensorRT datatype to an equivalent numpy datatype."
            ) from None

    def Runtime(self, logger: Any) -> FakeRuntime:
        return FakeRuntime(self, logger)


# --- fixtures -------------------------------------------------------------------------------
@pytest.fixture(name="cudart")
def fixture_cudart() -> FakeCudaRuntime:
    return FakeCudaRuntime()


@pytest.fixture(name="trt")
def fixture_trt(cudart: FakeCudaRuntime) -> FakeTensorRT:
    return FakeTensorRT(cudart)


@pytest.fixture(name="device")
def fixture_device(cudart: FakeCudaRuntime) -> DeviceIdentity:
    return DeviceIdentity.detect(cudart, {"CUDA_VISIBLE_DEVICES": MIG_UUID})


def _write_engine(
    path: Path, device: DeviceIdentity, plan: bytes = GOOD_PLAN, **changes: Any
) -> Path:
    header = EngineHeader.for_device(
        device,
        tensorrt_version=FakeTensorRT.__version__,
        benchmark="resnet50",
        precision="fp16",
        cache_key=None,
        profiles=(_profile(2), _profile(8)),
    )
    return write_engine_file(path, attrs.evolve(header, **changes), plan)


@pytest.fixture(name="engine_file")
def fixture_engine_file(tmp_path: Path, device: DeviceIdentity) -> Path:
    return _write_engine(tmp_path / "double.plan", device)


@pytest.fixture(name="runner")
def fixture_runner(
    engine_file: Path, trt: FakeTensorRT, cudart: FakeCudaRuntime, device: DeviceIdentity
) -> Iterator[TensorRTRunner]:
    runner = TensorRTRunner.from_file(engine_file, trt=trt, cudart=cudart, device=device)
    yield runner
    runner.close()


# --- cuda_call and device identity -----------------------------------------------------------
def test_cuda_call_unpacks_results(cudart: FakeCudaRuntime) -> None:
    """(err,) gives None, (err, value) the value."""
    assert cuda_call(cudart, (CudaError.cudaSuccess,), "x") is None
    assert cuda_call(cudart, (CudaError.cudaSuccess, 7), "x") == 7
    assert cuda_call(cudart, (CudaError.cudaSuccess, 7, 8), "x") == (7, 8)


def test_cuda_call_failure_names_call_and_error(cudart: FakeCudaRuntime) -> None:
    """A failing call raises with the call and CUDA's name for the error."""
    with pytest.raises(
        BackendUnavailableError, match=r"cudaMalloc\(64\) failed with cudaErrorMemoryAllocation"
    ):
        cuda_call(cudart, (CudaError.cudaErrorMemoryAllocation, None), "cudaMalloc(64)")


def test_mig_device_reports_the_mig_uuid_from_the_environment(device: DeviceIdentity) -> None:
    """In a worker with CUDA_VISIBLE_DEVICES=MIG-<uuid>, that UUID identifies the device."""
    assert device.uuid == MIG_UUID
    assert (device.gpu, device.mig_profile) == ("H200", "1g.18gb")
    assert device.name == "NVIDIA H200 MIG 1g.18gb"
    assert device.compute_capability == "9.0"
    assert device.describe() == "H200 MIG 1g.18gb"


def test_mig_device_without_environment_formats_cuda_uuid(cudart: FakeCudaRuntime) -> None:
    """Without a MIG entry in CUDA_VISIBLE_DEVICES the UUID comes from cudaDeviceProp.uuid."""
    device = DeviceIdentity.detect(cudart, {})
    assert device.uuid == "MIG-f0f1f2f3-f4f5-f6f7-f8f9-fafbfcfdfeff"


def test_whole_gpu_has_no_profile_and_a_gpu_uuid() -> None:
    """A whole GPU has mig_profile None and a GPU- UUID."""
    device = DeviceIdentity.detect(
        FakeCudaRuntime(name=b"NVIDIA A100-SXM4-80GB"), {"CUDA_VISIBLE_DEVICES": "0"}
    )
    assert (device.gpu, device.mig_profile) == ("A100-SXM4-80GB", None)
    assert device.uuid.startswith("GPU-f0f1f2f3-")
    assert device.describe() == "A100-SXM4-80GB (whole GPU)"


def test_uuid_accepts_signed_bytes() -> None:
    """Some cuda-python versions give the UUID as signed chars."""
    assert format_uuid([-1] * 16, "GPU") == "GPU-ffffffff-ffff-ffff-ffff-ffffffffffff"


def test_uuid_needs_16_bytes() -> None:
    """A UUID of another length is refused."""
    with pytest.raises(ValueError, match="16 bytes"):
        format_uuid(b"\x00" * 4, "GPU")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("NVIDIA H200 MIG 3g.71gb", ("H200", "3g.71gb")),
        ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", ("A100-SXM4-40GB", "1g.5gb")),
        ("NVIDIA H100 80GB HBM3", ("H100 80GB HBM3", None)),
        ("NVIDIA A30 MIG 1g.6gb+me", ("A30", "1g.6gb+me")),
    ],
)
def test_split_device_name(name: str, expected: tuple[str, str | None]) -> None:
    """CUDA's device name splits into the registry's GPU name and the MIG profile."""
    assert split_device_name(name) == expected


@pytest.mark.parametrize(
    ("count", "reason"),
    [
        (1, None),
        (0, "no CUDA device (CUDA reports 0 devices)"),
        (-1, "no CUDA device (cudaErrorInsufficientDriver)"),
    ],
)
def test_device_count_reason(count: int, reason: str | None) -> None:
    """No driver or no device is a reason, not an exception."""
    assert cuda_device_count_reason(FakeCudaRuntime(device_count=count)) == reason


# --- buffers --------------------------------------------------------------------------------
def test_pinned_host_buffer_uses_cuda_host_memory(cudart: FakeCudaRuntime) -> None:
    """Pinned host buffers come from cudaMallocHost and go back with cudaFreeHost."""
    buffer = HostBuffer.allocate(cudart, 16, pinned=True)
    assert buffer.ptr in cudart.live
    buffer.close()
    buffer.close()
    assert cudart.freed == ["host"]


def test_plain_host_buffer_needs_no_cuda(cudart: FakeCudaRuntime) -> None:
    """Plain numpy host buffers allocate nothing through CUDA."""
    buffer = HostBuffer.allocate(cudart, 16, pinned=False)
    assert buffer.view(np.float32, (2, 2)).shape == (2, 2)
    buffer.close()
    assert cudart.live == {}
    assert cudart.freed == []


@pytest.mark.parametrize("pinned", [True, False])
def test_round_trip_through_device_buffers(cudart: FakeCudaRuntime, pinned: bool) -> None:
    """Data staged to the device comes back unchanged, converted to the tensor's dtype."""
    allocator = BufferAllocator(cudart, pinned=pinned)
    stream = CudaStream.create(cudart)
    buffers = allocator.allocate("input_ids", np.dtype(np.int32), (4, 8), is_input=True)
    data = np.arange(24, dtype=np.int64).reshape(3, 8)
    allocator.copy_to_device(buffers, data, stream)
    back = allocator.copy_to_host(buffers, (3, 8), stream)
    stream.synchronize()
    assert back.dtype == np.int32
    np.testing.assert_array_equal(back, data)
    assert cudart.copies == [("cudaMemcpyHostToDevice", 96), ("cudaMemcpyDeviceToHost", 96)]
    allocator.close()
    stream.close()


def test_copy_larger_than_the_buffer_is_refused(cudart: FakeCudaRuntime) -> None:
    """A batch bigger than the buffer's largest shape raises before any copy."""
    allocator = BufferAllocator(cudart)
    buffers = allocator.allocate("x", np.dtype(np.float32), (2, 4), is_input=True)
    with pytest.raises(ValueError, match="more than the 32-byte buffer"):
        allocator.copy_to_device(buffers, np.zeros((3, 4), np.float32), CudaStream.create(cudart))
    assert cudart.copies == []
    allocator.close()


def test_allocator_close_frees_everything_once(cudart: FakeCudaRuntime) -> None:
    """close() frees every host and device buffer; a second close frees nothing more."""
    allocator = BufferAllocator(cudart)
    for name in ("a", "b"):
        allocator.allocate(name, np.dtype(np.float32), (8, 3), is_input=True)
    allocator.close()
    allocator.close()
    assert cudart.live == {}
    assert sorted(cudart.freed) == ["device", "device", "host", "host"]


def test_allocator_close_frees_the_rest_after_a_failure(cudart: FakeCudaRuntime) -> None:
    """A failing cudaFree does not leak the other buffers; the failure is raised at the end."""
    allocator = BufferAllocator(cudart)
    allocator.allocate("a", np.dtype(np.float32), (4,), is_input=True)
    cudart.fail.add("cudaFree")
    with pytest.raises(BackendUnavailableError, match="cudaFree"):
        allocator.close()
    assert cudart.freed == ["host", "device"]


def test_stream_handle_is_an_int_and_close_destroys_once(cudart: FakeCudaRuntime) -> None:
    """execute_async_v3 gets the stream as an integer; close() destroys it once."""
    stream = CudaStream.create(cudart)
    assert stream.handle == 0x5000
    stream.close()
    stream.close()
    assert cudart.streams_destroyed == 1
    with pytest.raises(ValueError, match="closed"):
        stream.synchronize()


def test_native_handle_prefers_the_cuda_bindings_getter() -> None:
    """cuda-bindings 13 gives addresses through get_cuda_native_handle; older ones through int()."""
    utils = SimpleNamespace(get_cuda_native_handle=lambda obj: 0xABC)

    def with_utils(name: str) -> Any:
        return utils

    def without_utils(name: str) -> Any:
        raise ModuleNotFoundError(name)

    assert native_handle(StreamHandle(7), with_utils) == 0xABC
    assert native_handle(StreamHandle(7), without_utils) == 7


# --- profile choice -------------------------------------------------------------------------
def test_select_profile_takes_the_smallest_that_fits() -> None:
    """Batch 2 runs on the batch-2 profile, batch 3 on the batch-8 one."""
    profiles = (_profile(2), _profile(8))
    assert select_profile(profiles, {"x": (2, 4)}) == 0
    assert select_profile(profiles, {"x": (3, 4)}) == 1


def test_select_profile_refuses_too_large_batches() -> None:
    """A batch above the largest profile raises and names the largest shapes."""
    with pytest.raises(ValueError, match=r"fit no optimization profile.*'x': \[8, 4\]"):
        select_profile((_profile(2), _profile(8)), {"x": (9, 4)})


# --- the runner -----------------------------------------------------------------------------
def test_runner_runs_a_batch(runner: TensorRTRunner) -> None:
    """Inputs go in, execute_async_v3 runs, outputs come back with their shapes and dtypes."""
    x = np.array([[1, 5, 2, 0], [9, 1, 1, 1]], dtype=np.float32)
    out = runner.run({"x": x})
    np.testing.assert_array_equal(out["y"], 2 * x)
    np.testing.assert_array_equal(out["argmax"], [1, 0])
    assert out["argmax"].dtype == np.int32


def test_runner_with_plain_host_memory(
    engine_file: Path, trt: FakeTensorRT, cudart: FakeCudaRuntime, device: DeviceIdentity
) -> None:
    """Without pinned memory the runner stages through numpy arrays and gets the same results."""
    runner = TensorRTRunner.from_file(
        engine_file, trt=trt, cudart=cudart, device=device, pinned=False
    )
    out = runner.run({"x": np.array([[3, 1, 4, 1]], dtype=np.float32)})
    np.testing.assert_array_equal(out["y"], [[6, 2, 8, 2]])
    assert len(cudart.live) == 3  # device buffers only
    runner.close()


def test_runner_names_inputs_and_outputs(runner: TensorRTRunner) -> None:
    """The runner reports the engine's inputs and outputs."""
    assert runner.input_names == ("x",)
    assert runner.output_names == ("y", "argmax")


def test_runner_buffers_hold_the_largest_profile(
    runner: TensorRTRunner, cudart: FakeCudaRuntime
) -> None:
    """Buffers are sized once for batch 8 (the largest profile): 3 tensors, host + device each."""
    sizes = sorted(len(block) for block in cudart.live.values())
    assert sizes == [32, 32, 128, 128, 128, 128]


def test_runner_switches_profiles_by_batch(runner: TensorRTRunner, trt: FakeTensorRT) -> None:
    """A larger batch switches to the larger profile and back; equal profiles do not switch."""
    context = trt.context
    assert context is not None
    runner.run({"x": np.ones((2, 4), np.float32)})
    switches = context.profile_switches
    runner.run({"x": np.ones((6, 4), np.float32)})
    assert context.profile == 1
    out = runner.run({"x": np.ones((1, 4), np.float32)})
    assert context.profile == 0
    assert context.profile_switches == switches + 2
    assert out["y"].shape == (1, 4)


def test_runner_results_survive_the_next_run(runner: TensorRTRunner) -> None:
    """Results are copies: the next batch does not overwrite what the caller holds."""
    first = runner.run({"x": np.ones((2, 4), np.float32)})
    runner.run({"x": np.zeros((2, 4), np.float32)})
    np.testing.assert_array_equal(first["y"], np.full((2, 4), 2.0))


def test_runner_refuses_too_large_batch(runner: TensorRTRunner) -> None:
    """A batch above the largest profile is refused before anything is copied."""
    with pytest.raises(ValueError, match="fit no optimization profile"):
        runner.run({"x": np.ones((9, 4), np.float32)})


def test_runner_refuses_missing_inputs(runner: TensorRTRunner) -> None:
    """A feed without the engine's inputs names what is missing."""
    with pytest.raises(ValueError, match=r"missing inputs \['x'\]"):
        runner.run({"input_tensor:0": np.ones((2, 4), np.float32)})


def test_execute_failure_raises_with_the_log(runner: TensorRTRunner, trt: FakeTensorRT) -> None:
    """execute_async_v3 returning False raises with what TensorRT logged."""
    trt.fail_execute = True
    with pytest.raises(BackendUnavailableError, match="illegal memory access"):
        runner.run({"x": np.ones((2, 4), np.float32)})


def test_profile_switch_failure_raises_with_the_log(
    runner: TensorRTRunner, trt: FakeTensorRT
) -> None:
    """set_optimization_profile_async returning False raises with what TensorRT logged."""
    trt.fail_profile_switch = True
    with pytest.raises(
        BackendUnavailableError, match=r"profile 1; TensorRT log: .*enqueue is pending"
    ):
        runner.run({"x": np.ones((6, 4), np.float32)})


def test_rejected_input_shape_raises_with_the_log(
    runner: TensorRTRunner, trt: FakeTensorRT
) -> None:
    """set_input_shape returning False raises with the shape, the input and TensorRT's log."""
    trt.fail_input_shape = True
    with pytest.raises(ValueError, match=r"shape \[2, 4\] for input 'x'.*not in profile"):
        runner.run({"x": np.ones((2, 4), np.float32)})


def test_close_frees_buffers_and_stream(
    engine_file: Path, trt: FakeTensorRT, cudart: FakeCudaRuntime, device: DeviceIdentity
) -> None:
    """close() frees every buffer and the stream; closing twice is harmless; run after close fails."""
    runner = TensorRTRunner.from_file(engine_file, trt=trt, cudart=cudart, device=device)
    runner.close()
    runner.close()
    assert cudart.live == {}
    assert cudart.streams_destroyed == 1
    with pytest.raises(ValueError, match="closed"):
        runner.run({"x": np.ones((2, 4), np.float32)})


def test_engine_from_another_device_is_refused_before_tensorrt(
    engine_file: Path, trt: FakeTensorRT, cudart: FakeCudaRuntime, device: DeviceIdentity
) -> None:
    """A plan built on another MIG profile is refused without deserializing it."""
    other = attrs.evolve(device, mig_profile="7g.141gb")
    with pytest.raises(EngineMismatchError, match="MIG profile"):
        TensorRTRunner.from_file(engine_file, trt=trt, cudart=cudart, device=other)
    assert trt.runtimes_created == 0


def test_deserialize_none_raises_with_the_log(
    tmp_path: Path, trt: FakeTensorRT, cudart: FakeCudaRuntime, device: DeviceIdentity
) -> None:
    """deserialize_cuda_engine returning None raises EngineBuildError with TensorRT's message."""
    path = _write_engine(tmp_path / "bad.plan", device, plan=b"NOT-A-PLAN")
    with pytest.raises(
        EngineBuildError, match=r"could not deserialize.*magicTagRead == kMAGIC_TAG failed"
    ):
        TensorRTRunner.from_file(path, trt=trt, cudart=cudart, device=device)


def test_profile_count_mismatch_is_refused(
    tmp_path: Path, trt: FakeTensorRT, cudart: FakeCudaRuntime, device: DeviceIdentity
) -> None:
    """A header that lists other profiles than the plan has is a damaged file."""
    path = _write_engine(tmp_path / "odd.plan", device, profiles=(_profile(2),))
    with pytest.raises(EngineBuildError, match="2 optimization profiles but its header lists 1"):
        TensorRTRunner.from_file(path, trt=trt, cudart=cudart, device=device)


def test_allocation_failure_frees_what_was_allocated(
    engine_file: Path, trt: FakeTensorRT, cudart: FakeCudaRuntime, device: DeviceIdentity
) -> None:
    """Running out of pinned memory frees the buffers already made and the stream."""
    cudart.fail.add("cudaMallocHost")
    with pytest.raises(BackendUnavailableError, match="cudaMallocHost"):
        TensorRTRunner.from_file(engine_file, trt=trt, cudart=cudart, device=device)
    assert cudart.live == {}
    assert cudart.streams_destroyed == 1
