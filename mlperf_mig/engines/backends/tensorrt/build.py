"""Building TensorRT engines: the captured log, the network, the builder config, build-and-save.

The three steps are separate functions, as in NVIDIA's own harness: `create_network` parses the
ONNX graph into a strongly typed network, `create_builder_config` states every build setting
(workspace, one optimization profile per batch size and sequence bucket) and `build_serialized_engine` runs
the builder. Precision comes from the graph alone (fp16 weights and activations in the fp16 graph,
Q/DQ nodes in the INT8 graph): TensorRT 11 removed the builder precision flags and the
calibrators, and TensorRT 10 ignores them in strongly typed networks.

TensorRT reports failures by returning None and logging why; every None here raises with the
messages TensorRT logged during that step.
"""

from __future__ import annotations

import functools
import logging
import os
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol, TypeVar

import attrs

from mlperf_mig.engines.backends.tensorrt.engine_file import Profile, ShapeRange
from mlperf_mig.errors import EngineBuildError, ModelFileError

log = logging.getLogger(__name__)

# tensorrt ships no type information; these names say which of its objects a signature takes.
TrtBuilder = Any  # a trt.Builder
TrtNetwork = Any  # a trt.INetworkDefinition
TrtOnnxParser = Any  # a trt.OnnxParser (it owns the network's weights)
TrtBuilderConfig = Any  # a trt.IBuilderConfig
TrtRuntime = Any  # a trt.Runtime
TrtSeverity = Any  # a trt.ILogger.Severity, or its string form
_Made = TypeVar("_Made")

# TensorRT severities -> logging levels; VERBOSE is TensorRT's debug chatter.
_LEVELS = {
    "INTERNAL_ERROR": logging.CRITICAL,
    "ERROR": logging.ERROR,
    "WARNING": logging.WARNING,
    "INFO": logging.INFO,
    "VERBOSE": logging.DEBUG,
}
_PROBLEMS = ("INTERNAL_ERROR", "ERROR", "WARNING")


@attrs.frozen
class LogMessage:
    seq: int
    severity: str
    text: str


class CapturedLog:
    """TensorRT's messages, kept (the last `max_messages`) to explain failures, and forwarded to logging.

    TensorRT keeps the first logger it is given for the whole process, so one capture serves every
    build and load; a step takes a `mark()` first and reports only what came after it.
    """

    def __init__(self, max_messages: int = 1000) -> None:
        self._messages: deque[LogMessage] = deque(maxlen=max_messages)
        self._count = 0

    def record(self, severity: str, text: str) -> None:
        level = _LEVELS.get(severity, logging.INFO)
        if level == logging.DEBUG and not log.isEnabledFor(logging.DEBUG):
            return
        line = " ".join(str(text).split())
        self._count += 1
        self._messages.append(LogMessage(self._count, severity, line))
        log.log(level, "TensorRT: %s", line)

    def mark(self) -> int:
        return self._count

    def since(self, mark: int) -> list[LogMessage]:
        return [m for m in self._messages if m.seq > mark]

    def summary(self, mark: int, limit: int = 12) -> str:
        """The errors and warnings since `mark` (else its last messages), on one line."""
        messages = self.since(mark)
        problems = [m for m in messages if m.severity in _PROBLEMS] or messages
        if not problems:
            return "TensorRT logged nothing"
        shown = problems[-limit:]
        skipped = len(problems) - len(shown)
        lines = [f"[{m.severity}] {m.text}" for m in shown]
        if skipped:
            lines.insert(0, f"({skipped} earlier messages left out)")
        return " | ".join(lines)

    def failure(self, what: str, mark: int) -> EngineBuildError:
        """An EngineBuildError for a failed step, carrying what TensorRT logged during it."""
        return EngineBuildError(f"{what}; TensorRT log: {self.summary(mark)}")


def severity_name(severity: TrtSeverity) -> str:
    """'ERROR' from trt.ILogger.Severity.ERROR (or from its string form)."""
    name = getattr(severity, "name", None)
    return str(name if name else severity).rsplit(".", 1)[-1].upper()


class TrtLogger(Protocol):
    """A trt.ILogger that keeps what TensorRT logged: capturing_logger's."""

    capture: CapturedLog


@functools.cache
def capturing_logger(trt: ModuleType) -> TrtLogger:
    """The process's one TensorRT logger (a trt.ILogger); its CapturedLog is `.capture`."""

    base: type[Any] = trt.ILogger  # a class of a module typed only at run time

    class _CapturingLogger(base):
        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self.capture = CapturedLog()

        def log(self, severity: TrtSeverity, msg: str) -> None:
            self.capture.record(severity_name(severity), msg)

    return _CapturingLogger()


def tensorrt_major(trt: ModuleType) -> int:
    return int(str(trt.__version__).split(".", 1)[0])


def network_flags(trt: ModuleType) -> int:
    """create_network flags for a strongly typed network.

    TensorRT 10 needs STRONGLY_TYPED; TensorRT 11 networks are always strongly typed and the
    flag is deprecated there, so none is passed.
    """
    if tensorrt_major(trt) >= 11:
        return 0
    return 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)


def create_builder(trt: ModuleType, logger: TrtLogger) -> TrtBuilder:
    """trt.Builder; a builder TensorRT cannot make (no CUDA, bad driver) raises with the log."""
    return _construct(trt.Builder, logger, "TensorRT could not create a builder")


def create_runtime(trt: ModuleType, logger: TrtLogger) -> TrtRuntime:
    """trt.Runtime; a runtime TensorRT cannot make raises with the log."""
    return _construct(trt.Runtime, logger, "TensorRT could not create a runtime")


def _construct(factory: Callable[[TrtLogger], _Made | None], logger: TrtLogger, what: str) -> _Made:
    capture: CapturedLog = logger.capture
    mark = capture.mark()
    try:
        made = factory(logger)
    except (TypeError, RuntimeError) as exc:  # pybind11 raises when the factory gives nullptr
        raise capture.failure(f"{what} ({exc})", mark) from None
    if made is None:
        raise capture.failure(what, mark)
    return made


# --- step 1: the network --------------------------------------------------------------------
def create_network(
    trt: ModuleType, builder: TrtBuilder, onnx_path: str | os.PathLike[str], logger: TrtLogger
) -> tuple[TrtNetwork, TrtOnnxParser]:
    """Parse the ONNX file into a strongly typed network; returns (network, parser).

    The parser must outlive the network's use (it owns the weights), so both are returned.
    """
    path = Path(onnx_path)
    if not path.is_file():
        raise ModelFileError(f"ONNX model {str(path)!r} does not exist; generate or pass a model")
    capture: CapturedLog = logger.capture
    mark = capture.mark()
    network = builder.create_network(network_flags(trt))
    if network is None:
        raise capture.failure("TensorRT could not create a network", mark)
    parser = trt.OnnxParser(network, logger)
    # parse_from_file also finds the external-data files that a model over 2 GB needs
    if not parser.parse_from_file(os.fspath(path)):
        errors = " | ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise EngineBuildError(
            f"TensorRT could not parse {str(path)!r}: {errors or 'no parser error reported'}; "
            f"TensorRT log: {capture.summary(mark)}"
        )
    return network, parser


def network_input_shapes(network: TrtNetwork) -> dict[str, tuple[int, ...]]:
    """Input name -> shape as the network declares it (-1 for a dynamic axis)."""
    inputs = (network.get_input(i) for i in range(network.num_inputs))
    return {tensor.name: tuple(int(d) for d in tensor.shape) for tensor in inputs}


# --- step 2: the builder config -------------------------------------------------------------
def optimization_profiles(
    input_shapes: Mapping[str, Sequence[int]],
    *,
    batch_sizes: Sequence[int],
    seq_buckets: Sequence[int] = (),
) -> tuple[Profile, ...]:
    """One profile per batch size (x sequence bucket), smallest first.

    Each profile takes batches from 1 up to its batch size and is tuned for that size (opt = max):
    a run picks the first profile that holds its shapes, i.e. the smallest that fits. Sequence
    buckets apply only when the graph's sequence axis (axis 1) is dynamic; the official BERT
    graph has a fixed 384 and gets one profile per batch size.
    """
    if not batch_sizes:
        raise ValueError("optimization profiles need at least one batch size")
    shapes = {name: tuple(int(d) for d in shape) for name, shape in input_shapes.items()}
    dynamic_seq = any(len(s) > 1 and s[1] < 0 for s in shapes.values())
    buckets: Sequence[int | None] = sorted(seq_buckets) if dynamic_seq and seq_buckets else [None]
    return tuple(
        {name: _shape_range(name, shape, batch, bucket) for name, shape in shapes.items()}
        for batch in sorted(batch_sizes)
        for bucket in buckets
    )


def _shape_range(name: str, shape: tuple[int, ...], batch: int, bucket: int | None) -> ShapeRange:
    low, opt, high = [], [], []
    for axis, dim in enumerate(shape):
        if axis == 0 and dim >= 0 and dim != batch:
            raise ModelFileError(
                f"model input {name!r} has a fixed batch of {dim} (shape {list(shape)}), but the "
                f"engine needs batch {batch}; export the model with a dynamic batch axis"
            )
        if dim >= 0:
            bounds = (dim, dim, dim)
        elif axis == 0:
            bounds = (1, batch, batch)
        elif axis == 1 and bucket is not None:
            bounds = (1, bucket, bucket)
        else:
            raise ModelFileError(
                f"model input {name!r} has a dynamic axis {axis} (shape {list(shape)}); only the "
                "batch axis, and BERT's sequence axis when sequence buckets are set, may be dynamic"
            )
        low.append(bounds[0])
        opt.append(bounds[1])
        high.append(bounds[2])
    return ShapeRange(min=low, opt=opt, max=high)


def create_builder_config(
    trt: ModuleType,
    builder: TrtBuilder,
    profiles: Sequence[Profile],
    *,
    workspace_bytes: int | None,
    logger: TrtLogger,
) -> TrtBuilderConfig:
    """The builder config: workspace limit and optimization profiles, no precision flags."""
    capture: CapturedLog = logger.capture
    mark = capture.mark()
    config = builder.create_builder_config()
    if config is None:
        raise capture.failure("TensorRT could not create a builder config", mark)
    if workspace_bytes is not None:
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(workspace_bytes))
    for index, profile in enumerate(profiles):
        trt_profile = builder.create_optimization_profile()
        for name, shapes in profile.items():
            trt_profile.set_shape(name, shapes.min, shapes.opt, shapes.max)
        if config.add_optimization_profile(trt_profile) < 0:
            described = ", ".join(f"{n}: {s.to_dict()}" for n, s in profile.items())
            raise capture.failure(
                f"TensorRT rejected optimization profile {index} ({described})", mark
            )
    return config


# --- step 3: build --------------------------------------------------------------------------
def build_serialized_engine(
    builder: TrtBuilder, network: TrtNetwork, config: TrtBuilderConfig, logger: TrtLogger
) -> memoryview:
    """Run the builder; the serialized engine as a buffer over TensorRT's memory."""
    capture: CapturedLog = logger.capture
    mark = capture.mark()
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise capture.failure("TensorRT could not build the engine", mark)
    return memoryview(serialized)
