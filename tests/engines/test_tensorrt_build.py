"""Building TensorRT engines without TensorRT: profiles, the captured log, and every None that raises.

The TensorRT objects are small fakes with the same method names; what TensorRT itself does with
them is covered by the gpu-marked tests in test_tensorrt_gpu.py.
"""

from __future__ import annotations

import enum
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import onnx
import pytest

from mlperf_mig.engines.backends.tensorrt.build import (
    CapturedLog,
    build_serialized_engine,
    capturing_logger,
    create_builder,
    create_builder_config,
    create_network,
    create_runtime,
    network_flags,
    network_input_shapes,
    optimization_profiles,
    severity_name,
)
from mlperf_mig.engines.backends.tensorrt.engine_file import ShapeRange
from mlperf_mig.engines.models import generated_model
from mlperf_mig.engines.recipes import load_recipe
from mlperf_mig.errors import EngineBuildError, ModelFileError
from mlperf_mig.workloads import Workload, get_workload
from mlperf_mig.workloads.bert import BERT
from mlperf_mig.workloads.resnet50 import RESNET50

RESNET = {"input_tensor:0": (-1, 3, 224, 224)}
BERT_STATIC = {name: (-1, 384) for name in ("input_ids", "input_mask", "segment_ids")}
BERT_DYNAMIC = {name: (-1, -1) for name in ("input_ids", "input_mask", "segment_ids")}


class Severity(enum.Enum):
    INTERNAL_ERROR = 0
    ERROR = 1
    WARNING = 2
    INFO = 3
    VERBOSE = 4


class FakeILogger:
    Severity = Severity

    def __init__(self) -> None:
        pass


class FakeParser:
    """Parses any existing file; `errors` makes it fail with those messages."""

    errors: tuple[str, ...] = ()

    def __init__(self, network: Any, logger: Any) -> None:
        self.logger = logger

    @property
    def num_errors(self) -> int:
        return len(self.errors)

    def get_error(self, index: int) -> str:
        return self.errors[index]

    def parse_from_file(self, path: str) -> bool:
        if self.errors:
            self.logger.log(Severity.ERROR, "ModelImporter: failed to import node 7")
        return not self.errors


class FakeProfile:
    def __init__(self) -> None:
        self.shapes: dict[str, tuple[Any, Any, Any]] = {}

    def set_shape(self, name: str, low: Any, opt: Any, high: Any) -> None:
        self.shapes[name] = (tuple(low), tuple(opt), tuple(high))


class FakeConfig:
    def __init__(self, accept_profiles: bool = True) -> None:
        self.pools: dict[Any, int] = {}
        self.profiles: list[FakeProfile] = []
        self.accept_profiles = accept_profiles

    def set_memory_pool_limit(self, pool: Any, size: int) -> None:
        self.pools[pool] = size

    def add_optimization_profile(self, profile: FakeProfile) -> int:
        if not self.accept_profiles:
            return -1
        self.profiles.append(profile)
        return len(self.profiles) - 1


class FakeBuilder:
    """Returns None where told to, logging an error first as TensorRT does."""

    def __init__(self, logger: Any, *, fail: str = "", config: FakeConfig | None = None) -> None:
        self.logger = logger
        self.fail = fail
        self.config = config or FakeConfig()
        self.network_flags: int | None = None

    def create_network(self, flags: int) -> Any:
        self.network_flags = flags
        if self.fail == "network":
            self.logger.log(Severity.ERROR, "out of host memory")
            return None
        return SimpleNamespace()

    def create_builder_config(self) -> Any:
        if self.fail == "config":
            return None
        return self.config

    def create_optimization_profile(self) -> FakeProfile:
        return FakeProfile()

    def build_serialized_network(self, network: Any, config: Any) -> Any:
        self.logger.log(Severity.INFO, "Total host memory used: 12 MiB")
        if self.fail == "build":
            self.logger.log(Severity.WARNING, "tactic skipped: insufficient workspace")
            self.logger.log(
                Severity.ERROR, "Error Code 4: Internal Error (no implementation for Conv_0)"
            )
            return None
        return b"PLAN-BYTES"


class FakeTensorRT:
    """A stand-in for the tensorrt module with what the build steps touch (hashable, like a module)."""

    ILogger = FakeILogger
    # TensorRT 10's value: EXPLICIT_BATCH (deprecated) is 0, STRONGLY_TYPED is 1
    NetworkDefinitionCreationFlag = SimpleNamespace(STRONGLY_TYPED=1)
    MemoryPoolType = SimpleNamespace(WORKSPACE="WORKSPACE")
    OnnxParser = FakeParser

    def __init__(self, version: str) -> None:
        self.__version__ = version


def fake_trt(version: str = "10.13.3.9") -> Any:
    return FakeTensorRT(version)


@pytest.fixture(name="trt")
def fixture_trt() -> Any:
    return fake_trt()


@pytest.fixture(name="logger")
def fixture_logger(trt: Any) -> Any:
    return capturing_logger(trt)


@pytest.fixture(name="onnx_file")
def fixture_onnx_file(tmp_path: Path) -> Path:
    path = tmp_path / "model.onnx"
    path.write_bytes(b"onnx")
    return path


# --- optimization profiles ------------------------------------------------------------------
def test_one_profile_per_batch_size_min_1_opt_max_batch() -> None:
    """ResNet50 gets one profile per batch size, from batch 1 up to and tuned for that size."""
    profiles = optimization_profiles(RESNET, batch_sizes=(64, 8))
    assert profiles == (
        {
            "input_tensor:0": ShapeRange(
                min=(1, 3, 224, 224), opt=(8, 3, 224, 224), max=(8, 3, 224, 224)
            )
        },
        {
            "input_tensor:0": ShapeRange(
                min=(1, 3, 224, 224), opt=(64, 3, 224, 224), max=(64, 3, 224, 224)
            )
        },
    )


def test_static_sequence_ignores_buckets() -> None:
    """The official BERT graph has a fixed 384: one profile per batch size, seq 384 throughout."""
    profiles = optimization_profiles(BERT_STATIC, batch_sizes=(16,), seq_buckets=(128, 256, 384))
    assert len(profiles) == 1
    assert profiles[0]["input_mask"] == ShapeRange(min=(1, 384), opt=(16, 384), max=(16, 384))


def test_dynamic_sequence_gets_a_profile_per_bucket() -> None:
    """A dynamic sequence axis gets batch x bucket profiles, smallest batch and bucket first."""
    profiles = optimization_profiles(BERT_DYNAMIC, batch_sizes=(8, 32), seq_buckets=(384, 128))
    maxima = [p["input_ids"].max for p in profiles]
    assert maxima == [(8, 128), (8, 384), (32, 128), (32, 384)]
    assert profiles[1]["segment_ids"] == ShapeRange(min=(1, 1), opt=(8, 384), max=(8, 384))


@pytest.mark.parametrize(
    ("benchmark", "batch", "maxima"),
    [
        (RESNET50, 8, [(8, 3, 224, 224)]),
        (BERT, 16, [(16, 128), (16, 256), (16, 384)]),
    ],
)
def test_profiles_of_the_generated_graphs(
    cache_dir: Path, benchmark: Workload, batch: int, maxima: list[tuple[int, ...]]
) -> None:
    """The generated graphs (dynamic batch; BERT also dynamic sequence) get the recipe's profiles."""
    model = generated_model(benchmark, variant="tiny", precision="fp32", cache_dir=cache_dir)
    graph = onnx.load(str(model.path), load_external_data=False).graph
    shapes = {
        tensor.name: tuple(
            d.dim_value if d.HasField("dim_value") else -1
            for d in tensor.type.tensor_type.shape.dim
        )
        for tensor in graph.input
    }
    recipe = load_recipe(benchmark, "int8")
    profiles = optimization_profiles(shapes, batch_sizes=(batch,), seq_buckets=recipe.seq_buckets)
    first_input = get_workload(benchmark).inputs[0].name
    assert [p[first_input].max for p in profiles] == maxima


def test_dynamic_sequence_without_buckets_is_refused() -> None:
    """A dynamic axis other than the batch needs buckets; the error names the input."""
    with pytest.raises(ModelFileError, match="'input_ids' has a dynamic axis 1"):
        optimization_profiles(BERT_DYNAMIC, batch_sizes=(8,))


def test_fixed_batch_smaller_than_recipe_is_refused() -> None:
    """A model exported with batch 1 cannot serve the recipe's batch 64."""
    with pytest.raises(ModelFileError, match="fixed batch of 1"):
        optimization_profiles({"input_tensor:0": (1, 3, 224, 224)}, batch_sizes=(64,))


def test_fixed_batch_equal_to_recipe_is_accepted() -> None:
    """A fixed batch that is the engine's batch gives a fixed profile."""
    profiles = optimization_profiles({"x": (4, 10)}, batch_sizes=(4,))
    assert profiles[0]["x"] == ShapeRange(min=(4, 10), opt=(4, 10), max=(4, 10))


def test_no_batch_size_is_refused() -> None:
    """Profiles need at least one batch size."""
    with pytest.raises(ValueError, match="at least one batch size"):
        optimization_profiles(RESNET, batch_sizes=())


# --- the captured log -----------------------------------------------------------------------
def test_capturing_logger_is_one_per_process(trt: Any) -> None:
    """TensorRT keeps its first logger, so every build and load shares one."""
    assert capturing_logger(trt) is capturing_logger(trt)
    assert isinstance(capturing_logger(trt), FakeILogger)


def test_logger_captures_and_forwards(logger: Any, caplog: pytest.LogCaptureFixture) -> None:
    """A TensorRT message lands in the capture and in Python logging at the matching level."""
    mark = logger.capture.mark()
    with caplog.at_level(logging.WARNING, logger="mlperf_mig.engines.backends.tensorrt.build"):
        logger.log(Severity.WARNING, "weights are\nnot aligned")
    assert [(m.severity, m.text) for m in logger.capture.since(mark)] == [
        ("WARNING", "weights are not aligned")
    ]
    assert "TensorRT: weights are not aligned" in caplog.text


def test_verbose_messages_are_dropped_unless_debugging(logger: Any) -> None:
    """TensorRT's VERBOSE chatter is not kept when nobody logs at DEBUG."""
    mark = logger.capture.mark()
    logger.log(Severity.VERBOSE, "tactic 17 timing 0.1 ms")
    assert logger.capture.since(mark) == []


def test_summary_prefers_errors_and_is_one_line() -> None:
    """The summary shows errors and warnings (not info), on one line, newest last."""
    capture = CapturedLog()
    mark = capture.mark()
    capture.record("INFO", "parsing")
    capture.record("ERROR", "node 3:\nunsupported")
    capture.record("WARNING", "int64 weights cast")
    summary = capture.summary(mark)
    assert summary == "[ERROR] node 3: unsupported | [WARNING] int64 weights cast"


def test_summary_falls_back_to_the_last_messages() -> None:
    """Without errors or warnings the last messages explain what happened."""
    capture = CapturedLog()
    capture.record("INFO", "before the mark")
    mark = capture.mark()
    assert capture.summary(mark) == "TensorRT logged nothing"
    capture.record("INFO", "built 0 layers")
    assert capture.summary(mark) == "[INFO] built 0 layers"


def test_summary_says_how_many_messages_it_left_out() -> None:
    """Long logs are cut to the newest messages with a count of the rest."""
    capture = CapturedLog()
    mark = capture.mark()
    for i in range(20):
        capture.record("ERROR", f"e{i}")
    summary = capture.summary(mark, limit=3)
    assert summary == "(17 earlier messages left out) | [ERROR] e17 | [ERROR] e18 | [ERROR] e19"


def test_capture_keeps_a_bounded_number_of_messages() -> None:
    """The capture is a ring: a long build does not grow memory without bound."""
    capture = CapturedLog(max_messages=5)
    for i in range(12):
        capture.record("WARNING", f"w{i}")
    assert [m.text for m in capture.since(0)] == ["w7", "w8", "w9", "w10", "w11"]


@pytest.mark.parametrize(
    ("severity", "name"),
    [
        (Severity.ERROR, "ERROR"),
        ("Severity.INTERNAL_ERROR", "INTERNAL_ERROR"),
        ("warning", "WARNING"),
    ],
)
def test_severity_name(severity: Any, name: str) -> None:
    """Severities arrive as enum members or as their string form."""
    assert severity_name(severity) == name


def test_builder_that_cannot_be_made_raises_with_the_log(logger: Any) -> None:
    """A builder constructor that fails (pybind11 raises on nullptr) becomes EngineBuildError."""

    def failing_builder(log_to: Any) -> Any:
        log_to.log(Severity.ERROR, "CUDA initialization failure with error: 35")
        raise TypeError("pybind11::init(): factory function returned nullptr")

    trt = SimpleNamespace(Builder=failing_builder)
    with pytest.raises(EngineBuildError, match=r"could not create a builder.*error: 35"):
        create_builder(trt, logger)


def test_runtime_none_raises(logger: Any) -> None:
    """A runtime constructor that gives None raises EngineBuildError."""
    with pytest.raises(EngineBuildError, match="could not create a runtime"):
        create_runtime(SimpleNamespace(Runtime=lambda log_to: None), logger)


def test_builder_is_made_with_the_capturing_logger(logger: Any) -> None:
    """The builder gets the process's capturing logger."""
    builder = create_builder(SimpleNamespace(Builder=lambda log_to: FakeBuilder(log_to)), logger)
    assert builder.logger is logger


# --- network, config, build -----------------------------------------------------------------
def test_tensorrt_10_asks_for_a_strongly_typed_network() -> None:
    """TensorRT 10 needs the STRONGLY_TYPED creation flag: bit 1 << STRONGLY_TYPED (= 1)."""
    assert network_flags(fake_trt("10.13.3.9")) == 2


def test_tensorrt_11_networks_need_no_flag() -> None:
    """TensorRT 11 is always strongly typed and deprecated the flag: none is passed."""
    assert network_flags(fake_trt("11.0.0.14")) == 0


def test_create_network_parses_the_file(trt: Any, logger: Any, onnx_file: Path) -> None:
    """A parsable file gives a network and its parser, created with the strongly typed flag."""
    builder = FakeBuilder(logger)
    _network, parser = create_network(trt, builder, onnx_file, logger)
    assert isinstance(parser, FakeParser)
    assert builder.network_flags == 2


def test_missing_onnx_file_is_a_model_error(trt: Any, logger: Any, tmp_path: Path) -> None:
    """A missing model file is reported before TensorRT is involved."""
    with pytest.raises(ModelFileError, match="does not exist"):
        create_network(trt, FakeBuilder(logger), tmp_path / "none.onnx", logger)


def test_network_none_raises_with_the_log(trt: Any, logger: Any, onnx_file: Path) -> None:
    """create_network returning None raises EngineBuildError with what TensorRT logged."""
    with pytest.raises(
        EngineBuildError,
        match=r"could not create a network; TensorRT log: \[ERROR\] out of host memory",
    ):
        create_network(trt, FakeBuilder(logger, fail="network"), onnx_file, logger)


def test_parse_failure_lists_parser_errors(
    trt: Any, logger: Any, onnx_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A parse failure names the file, the parser's errors and the log."""
    monkeypatch.setattr(FakeParser, "errors", ("node Conv_0: unsupported auto_pad",))
    with pytest.raises(EngineBuildError) as excinfo:
        create_network(trt, FakeBuilder(logger), onnx_file, logger)
    message = str(excinfo.value)
    assert str(onnx_file) in message
    assert "node Conv_0: unsupported auto_pad" in message
    assert "failed to import node 7" in message


def test_network_input_shapes() -> None:
    """The network's inputs and their declared shapes, -1 for dynamic axes."""
    tensors = [
        SimpleNamespace(name="input_ids", shape=(-1, 384)),
        SimpleNamespace(name="input_mask", shape=(-1, 384)),
    ]
    network = SimpleNamespace(num_inputs=2, get_input=tensors.__getitem__)
    assert network_input_shapes(network) == {"input_ids": (-1, 384), "input_mask": (-1, 384)}


def test_builder_config_sets_workspace_and_profiles(trt: Any, logger: Any) -> None:
    """The config carries the recipe's workspace and every profile's shapes, and no other setting."""
    builder = FakeBuilder(logger)
    profiles = optimization_profiles(RESNET, batch_sizes=(8, 64))
    config = create_builder_config(trt, builder, profiles, workspace_bytes=2 << 30, logger=logger)
    assert config.pools == {"WORKSPACE": 2 << 30}
    assert [p.shapes["input_tensor:0"][2] for p in config.profiles] == [
        (8, 3, 224, 224),
        (64, 3, 224, 224),
    ]


def test_builder_config_without_workspace_leaves_the_default(trt: Any, logger: Any) -> None:
    """No recipe workspace: TensorRT's default pool limit stays."""
    config = create_builder_config(
        trt,
        FakeBuilder(logger),
        optimization_profiles(RESNET, batch_sizes=(1,)),
        workspace_bytes=None,
        logger=logger,
    )
    assert config.pools == {}


def test_rejected_profile_raises(trt: Any, logger: Any) -> None:
    """add_optimization_profile returning -1 raises and describes the profile."""
    builder = FakeBuilder(logger, config=FakeConfig(accept_profiles=False))
    with pytest.raises(EngineBuildError, match="rejected optimization profile 0"):
        create_builder_config(
            trt,
            builder,
            optimization_profiles(RESNET, batch_sizes=(8,)),
            workspace_bytes=None,
            logger=logger,
        )


def test_config_none_raises(trt: Any, logger: Any) -> None:
    """create_builder_config returning None raises EngineBuildError."""
    with pytest.raises(EngineBuildError, match="could not create a builder config"):
        create_builder_config(
            trt, FakeBuilder(logger, fail="config"), (), workspace_bytes=None, logger=logger
        )


def test_build_none_raises_with_errors_of_this_build(trt: Any, logger: Any) -> None:
    """build_serialized_network returning None raises with this build's errors and warnings."""
    logger.log(Severity.ERROR, "an error of an earlier build")
    with pytest.raises(EngineBuildError) as excinfo:
        build_serialized_engine(FakeBuilder(logger, fail="build"), None, None, logger)
    message = str(excinfo.value)
    assert message.startswith("TensorRT could not build the engine; TensorRT log: ")
    assert "[WARNING] tactic skipped: insufficient workspace" in message
    assert "[ERROR] Error Code 4: Internal Error (no implementation for Conv_0)" in message
    assert "earlier build" not in message
    assert "Total host memory" not in message


def test_build_returns_the_serialized_engine(logger: Any) -> None:
    """A successful build gives the serialized engine as a buffer."""
    assert bytes(build_serialized_engine(FakeBuilder(logger), None, None, logger)) == b"PLAN-BYTES"
