"""Generated graphs: official interfaces, determinism, precision variants, v1.5 architecture."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper

from mlperf_mig.engines import (
    generate_model,
    generated_model,
    open_backend,
    resolve_spec,
)
from mlperf_mig.workloads import Workload, get_workload
from mlperf_mig.workloads.bert import BERT
from mlperf_mig.workloads.resnet50 import RESNET50


def _run_generated(
    benchmark: Workload, variant: str, precision: str, cache_dir: Path, batch: int
) -> dict[str, np.ndarray]:
    spec = resolve_spec(
        benchmark.name,
        backend="onnxruntime",
        variant=variant,
        precision=precision,
        cache_dir=cache_dir,
    )
    with open_backend(spec, cache_dir=cache_dir, threads=2) as backend:
        return backend.run(benchmark.calibration_feeds(batch, seed=1))


def _assert_official_outputs(
    outputs: dict[str, np.ndarray], benchmark: Workload, batch: int
) -> None:
    assert list(outputs) == list(benchmark.output_names())
    for spec in benchmark.outputs:
        assert outputs[spec.name].dtype == np.dtype(spec.dtype)
        assert outputs[spec.name].shape == (batch, *spec.shape[1:])


@pytest.fixture(name="full_resnet50", scope="module")
def fixture_full_resnet50(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """The full fp32 ResNet50 generated once for the module, with its outputs on a batch of 2."""
    cache_dir = tmp_path_factory.mktemp("cache")
    outputs = _run_generated(RESNET50, "full", "fp32", cache_dir, batch=2)
    model = generated_model(
        get_workload("resnet50"), variant="full", precision="fp32", cache_dir=cache_dir
    )
    return model.path, outputs


@pytest.mark.slow
def test_full_resnet50_runs_with_official_outputs(full_resnet50: tuple[Path, dict]) -> None:
    """The full generated ResNet50 runs in ONNX Runtime with ArgMax:0 [N] and softmax [N,1001]."""
    _assert_official_outputs(full_resnet50[1], RESNET50, batch=2)


@pytest.mark.slow
def test_full_resnet50_has_resnet50_parameter_count(full_resnet50: tuple[Path, dict]) -> None:
    """The full ResNet50 holds about 25.5M parameters, like the official model."""
    model = onnx.load(str(full_resnet50[0]))
    count = sum(numpy_helper.to_array(t).size for t in model.graph.initializer if t.dims)
    assert 25.0e6 < count < 26.0e6


@pytest.mark.slow
def test_full_resnet50_strides_the_3x3_convolution(full_resnet50: tuple[Path, dict]) -> None:
    """ResNet v1.5: downsampling bottlenecks stride their 3x3 convolution, never the first 1x1."""
    model = onnx.load(str(full_resnet50[0]), load_external_data=False)
    strided = []
    for node in model.graph.node:
        if node.op_type == "Conv":
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            if attrs["strides"] == [2, 2]:
                strided.append(attrs["kernel_shape"][0])
    # stem 7x7, then per downsampling stage one strided 3x3 and one strided 1x1 projection
    assert sorted(strided) == [1, 1, 1, 3, 3, 3, 7]


def test_tiny_resnet50_runs_with_official_outputs(cache_dir: Path) -> None:
    """The tiny ResNet50 keeps the official interface."""
    _assert_official_outputs(_run_generated(RESNET50, "tiny", "fp32", cache_dir, 3), RESNET50, 3)


def test_tiny_bert_runs_with_official_outputs(cache_dir: Path) -> None:
    """The tiny BERT takes int64 [B,384] inputs and returns both logits as float32 [B,384]."""
    _assert_official_outputs(_run_generated(BERT, "tiny", "fp32", cache_dir, 2), BERT, 2)


def test_tiny_bert_accepts_shorter_sequence_buckets() -> None:
    """The BERT graph has a dynamic sequence axis, so 128-token buckets run too."""
    model = generate_model(get_workload("bert"), variant="tiny", precision="fp32")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {t.name: np.ones((2, 128), dtype=np.int64) for t in BERT.inputs}
    start, end = session.run(None, feeds)
    assert start.shape == end.shape == (2, 128)


@pytest.mark.parametrize("benchmark", [RESNET50, BERT], ids=str)
def test_generating_twice_gives_the_same_hash(benchmark: str, tmp_path: Path) -> None:
    """Two generations in separate caches produce byte-identical files."""
    first = generated_model(benchmark, variant="tiny", precision="int8", cache_dir=tmp_path / "a")
    second = generated_model(benchmark, variant="tiny", precision="int8", cache_dir=tmp_path / "b")
    assert first.sha256 == second.sha256


def test_other_seed_gives_other_weights() -> None:
    """The seed decides the synthetic weights."""
    one = generate_model(get_workload("resnet50"), variant="tiny", precision="fp32", seed=1)
    two = generate_model(get_workload("resnet50"), variant="tiny", precision="fp32", seed=2)
    assert one.SerializeToString() != two.SerializeToString()


@pytest.mark.parametrize("benchmark", [RESNET50, BERT])
def test_fp16_graph_keeps_the_official_interface(benchmark: Workload) -> None:
    """The fp16 graph stores float16 weights but keeps float32/int64 inputs and outputs."""
    model = generate_model(benchmark, variant="tiny", precision="fp16")
    weights = [t for t in model.graph.initializer if len(t.dims) >= 2]
    assert weights and all(t.data_type == TensorProto.FLOAT16 for t in weights)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    outputs = dict(
        zip(benchmark.output_names(), session.run(None, benchmark.calibration_feeds(2, 0)))
    )
    _assert_official_outputs(outputs, benchmark, 2)


def test_fp16_graph_computes_what_fp32_computes() -> None:
    """fp16 BERT logits agree with fp32 to fp16 precision (same weights, different storage)."""
    feeds = BERT.calibration_feeds(1, 0)
    results = []
    for precision in ("fp32", "fp16"):
        model = generate_model(get_workload("bert"), variant="tiny", precision=precision)
        session = ort.InferenceSession(
            model.SerializeToString(), providers=["CPUExecutionProvider"]
        )
        results.append(session.run(None, feeds)[0])
    np.testing.assert_allclose(results[0], results[1], atol=2e-2)


@pytest.mark.parametrize("benchmark", [RESNET50, BERT], ids=str)
def test_int8_graph_has_per_channel_int8_weights(benchmark: str) -> None:
    """Every gemm weight of the int8 graph is int8 behind a per-channel DequantizeLinear."""
    model = generate_model(benchmark, variant="tiny", precision="int8")
    int8 = {
        t.name: t for t in model.graph.initializer if t.data_type == TensorProto.INT8 and t.dims
    }
    weight_dq = [
        n for n in model.graph.node if n.op_type == "DequantizeLinear" and n.input[0] in int8
    ]
    gemms = [n for n in model.graph.node if n.op_type in ("Conv", "MatMul")]
    assert len(weight_dq) == sum(1 for g in gemms if g.input[1].endswith("_dq"))
    for node in weight_dq:
        scale = next(t for t in model.graph.initializer if t.name == node.input[1])
        axis = onnx.helper.get_attribute_value(node.attribute[0])
        assert scale.dims[0] == int8[node.input[0]].dims[axis] > 1


@pytest.mark.parametrize("benchmark", [RESNET50, BERT], ids=str)
def test_int8_graph_quantizes_activations_symmetrically(benchmark: str) -> None:
    """Activations enter every quantized gemm through Q/DQ with an int8 zero point of 0."""
    model = generate_model(benchmark, variant="tiny", precision="int8")
    init = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    quantize = [n for n in model.graph.node if n.op_type == "QuantizeLinear"]
    assert quantize
    for node in quantize:
        assert init[node.input[2]].dtype == np.int8 and init[node.input[2]] == 0
        assert init[node.input[1]] > 0


def test_int8_resnet50_graph_runs_with_official_outputs() -> None:
    """The Q/DQ ResNet50 is a valid graph with the official outputs (checked in a plain session)."""
    model = generate_model(get_workload("resnet50"), variant="tiny", precision="int8")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    outputs = session.run(None, RESNET50.calibration_feeds(2, seed=1))
    _assert_official_outputs(dict(zip(RESNET50.output_names(), outputs)), RESNET50, 2)


def test_int8_bert_runs_on_onnxruntime_cpu(cache_dir: Path) -> None:
    """The Q/DQ BERT runs through the CPU backend (integer matmuls) with the official outputs."""
    _assert_official_outputs(_run_generated(BERT, "tiny", "int8", cache_dir, 2), BERT, 2)
