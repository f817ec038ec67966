"""Running a TensorRT engine: deserialize, allocate buffers, set_tensor_address + execute_async_v3.

`TensorRTRunner.from_file` reads an engine file, refuses one built for another GPU, MIG profile
or TensorRT version, deserializes the engine and allocates one host/device buffer pair per input
and output through a `BufferAllocator`, sized for the largest shape of any optimization profile.
`run` picks the smallest profile that holds the batch, copies the inputs in, enqueues the engine
on the runner's stream, copies the outputs back and waits for the stream.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

import numpy as np

from mlperf_mig.engines.backends.tensorrt.build import (
    CapturedLog,
    TrtRuntime,
    capturing_logger,
    create_runtime,
)
from mlperf_mig.engines.backends.tensorrt.cuda import (
    BufferAllocator,
    CudaStream,
    DeviceIdentity,
    TensorBuffers,
)
from mlperf_mig.engines.backends.tensorrt.engine_file import EngineHeader, Profile, read_engine_file
from mlperf_mig.errors import BackendUnavailableError, EngineBuildError

log = logging.getLogger(__name__)

# tensorrt ships no type information; these names say which of its objects a signature takes.
TrtEngine = Any  # a trt.ICudaEngine
TrtContext = Any  # a trt.IExecutionContext


def select_profile(profiles: Sequence[Profile], shapes: Mapping[str, tuple[int, ...]]) -> int:
    """Index of the first (smallest) profile whose ranges hold every input shape."""
    for index, profile in enumerate(profiles):
        if all(name in profile and profile[name].contains(shape) for name, shape in shapes.items()):
            return index
    given = {name: list(shape) for name, shape in shapes.items()}
    largest = {name: list(r.max) for name, r in profiles[-1].items()} if profiles else {}
    raise ValueError(
        f"input shapes {given} fit no optimization profile of the engine (largest: {largest}); "
        "pass smaller batches or rebuild the engine with larger batch sizes"
    )


class TensorRTRunner:
    """A deserialized engine with its execution context, stream and buffers; close() frees them."""

    def __init__(
        self,
        *,
        header: EngineHeader,
        runtime: TrtRuntime,
        engine: TrtEngine,
        context: TrtContext,
        stream: CudaStream,
        allocator: BufferAllocator,
        buffers: Mapping[str, TensorBuffers],
        capture: CapturedLog,
    ) -> None:
        self.header = header
        self._runtime = runtime
        self._engine = engine
        self._context = context
        self._stream = stream
        self._allocator = allocator
        self._buffers = dict(buffers)
        self._capture = capture
        self._profile = 0
        self._closed = False

    @classmethod
    def from_file(
        cls,
        path: str | os.PathLike[str],
        *,
        trt: ModuleType,
        cudart: ModuleType,
        device: DeviceIdentity,
        pinned: bool = True,
    ) -> TensorRTRunner:
        """Load an engine file written by the TensorRT backend's build on this kind of device."""
        header, serialized = read_engine_file(path)
        header.check_runs_here(device, str(trt.__version__), path)
        runtime, engine, context = deserialize_engine(trt, serialized, header, path)
        stream = CudaStream.create(cudart)
        allocator = BufferAllocator(cudart, pinned=pinned)
        try:
            buffers = allocate_io_buffers(trt, engine, context, allocator, stream)
        except BaseException:
            allocator.close()
            stream.close()
            raise
        runner = cls(
            header=header,
            runtime=runtime,
            engine=engine,
            context=context,
            stream=stream,
            allocator=allocator,
            buffers=buffers,
            capture=capturing_logger(trt).capture,
        )
        try:
            runner._activate_profile(0)
        except BaseException:
            runner.close()
            raise
        return runner

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(name for name, b in self._buffers.items() if b.is_input)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(name for name, b in self._buffers.items() if not b.is_input)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One batch: inputs in, execute_async_v3, outputs out; returns fresh arrays."""
        if self._closed:
            raise ValueError("the TensorRT runner is closed")
        missing = [name for name in self.input_names if name not in feeds]
        if missing:
            raise ValueError(f"missing inputs {missing}; the engine takes {list(self.input_names)}")
        shapes = {name: tuple(int(d) for d in np.shape(feeds[name])) for name in self.input_names}
        profile = select_profile(self.header.profiles, shapes)
        if profile != self._profile:
            self._activate_profile(profile)
        for name in self.input_names:
            mark = self._capture.mark()
            if not self._context.set_input_shape(name, shapes[name]):
                raise ValueError(
                    f"TensorRT rejected shape {list(shapes[name])} for input {name!r} of "
                    f"optimization profile {profile}; TensorRT log: {self._capture.summary(mark)}"
                )
            self._allocator.copy_to_device(self._buffers[name], feeds[name], self._stream)
        out_shapes = {
            name: tuple(int(d) for d in self._context.get_tensor_shape(name))
            for name in self.output_names
        }
        mark = self._capture.mark()
        if not self._context.execute_async_v3(self._stream.handle):
            raise BackendUnavailableError(
                f"TensorRT execute_async_v3 failed; TensorRT log: {self._capture.summary(mark)}"
            )
        results = {
            name: self._allocator.copy_to_host(self._buffers[name], shape, self._stream)
            for name, shape in out_shapes.items()
        }
        self._stream.synchronize()
        # the host buffers are reused by the next call; callers keep what they get
        return {name: array.copy() for name, array in results.items()}

    def _activate_profile(self, index: int) -> None:
        """Switch the context to profile `index` and bind every tensor to its buffer."""
        mark = self._capture.mark()
        if not self._context.set_optimization_profile_async(index, self._stream.handle):
            raise BackendUnavailableError(
                f"TensorRT could not switch the execution context to optimization profile "
                f"{index}; TensorRT log: {self._capture.summary(mark)}"
            )
        self._stream.synchronize()
        for name, buffers in self._buffers.items():
            if not self._context.set_tensor_address(name, buffers.device.ptr):
                raise BackendUnavailableError(f"TensorRT refused the device address of {name!r}")
        self._profile = index

    def close(self) -> None:
        """Wait for the stream, free the buffers and the stream, release context, engine, runtime."""
        if self._closed:
            return
        self._closed = True
        try:
            self._stream.synchronize()
        finally:
            try:
                self._allocator.close()
            finally:
                self._stream.close()
                # TensorRT objects go in reverse order of creation
                self._context = None
                self._engine = None
                self._runtime = None


def deserialize_engine(
    trt: ModuleType, serialized: memoryview, header: EngineHeader, path: str | os.PathLike[str]
) -> tuple[TrtRuntime, TrtEngine, TrtContext]:
    """(runtime, engine, execution context) of a serialized engine; every None raises with TensorRT's log."""
    logger = capturing_logger(trt)
    capture: CapturedLog = logger.capture
    mark = capture.mark()
    runtime = create_runtime(trt, logger)
    engine = runtime.deserialize_cuda_engine(serialized)
    if engine is None:
        raise capture.failure(f"TensorRT could not deserialize the engine {str(path)!r}", mark)
    if engine.num_optimization_profiles != len(header.profiles):
        raise EngineBuildError(
            f"TensorRT engine {str(path)!r} has {engine.num_optimization_profiles} optimization "
            f"profiles but its header lists {len(header.profiles)}; delete it and rebuild"
        )
    context = engine.create_execution_context()
    if context is None:
        raise capture.failure(
            f"TensorRT could not create an execution context for {str(path)!r}", mark
        )
    return runtime, engine, context


def io_tensor_names(trt: ModuleType, engine: TrtEngine) -> tuple[list[str], list[str]]:
    """(input names, output names) of the engine, in the engine's order."""
    names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
    inputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
    return inputs, [n for n in names if n not in inputs]


def largest_shapes(
    trt: ModuleType, engine: TrtEngine, context: TrtContext, stream: CudaStream
) -> dict[str, tuple[int, ...]]:
    """The largest shape of every input and output over all optimization profiles.

    Inputs: the profile maxima. Outputs: what the context infers with every input at its maximum.
    """
    inputs, outputs = io_tensor_names(trt, engine)
    largest: dict[str, tuple[int, ...]] = {}
    for index in range(engine.num_optimization_profiles):
        context.set_optimization_profile_async(index, stream.handle)
        stream.synchronize()
        for name in inputs:
            shape = tuple(int(d) for d in engine.get_tensor_profile_shape(name, index)[2])
            context.set_input_shape(name, shape)
            largest[name] = _bigger(largest.get(name), shape)
        for name in outputs:
            shape = tuple(int(d) for d in context.get_tensor_shape(name))
            if any(d < 0 for d in shape):
                raise BackendUnavailableError(
                    f"TensorRT cannot infer the shape of output {name!r} ({list(shape)}) from the inputs"
                )
            largest[name] = _bigger(largest.get(name), shape)
    return largest


def _bigger(current: tuple[int, ...] | None, shape: tuple[int, ...]) -> tuple[int, ...]:
    if current is None or _volume(shape) > _volume(current):
        return shape
    return current


def _volume(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape, dtype=np.int64))


def allocate_io_buffers(
    trt: ModuleType,
    engine: TrtEngine,
    context: TrtContext,
    allocator: BufferAllocator,
    stream: CudaStream,
) -> dict[str, TensorBuffers]:
    """One host/device buffer pair per engine input and output, sized for its largest shape."""
    inputs, _ = io_tensor_names(trt, engine)
    shapes = largest_shapes(trt, engine, context, stream)
    return {
        name: allocator.allocate(
            name,
            np.dtype(trt.nptype(engine.get_tensor_dtype(name))),
            shape,
            is_input=name in inputs,
        )
        for name, shape in shapes.items()
    }
