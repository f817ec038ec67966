"""End to end on a real GPU: build and run the tiny ResNet50 and BERT engines with TensorRT.

Skipped where NVML finds no GPU (conftest) or where tensorrt / cuda-python are not installed.
Each build takes seconds on the tiny graphs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pytest

from mlperf_mig.engines.backends.tensorrt.backend import TensorRTBackend
from mlperf_mig.engines.backends.tensorrt.engine_file import read_engine_file, write_engine_file
from mlperf_mig.engines.build import build_engine, open_backend
from mlperf_mig.engines.models import generated_model
from mlperf_mig.engines.resolve import resolve_spec
from mlperf_mig.engines.spec import EngineSpec
from mlperf_mig.errors import EngineMismatchError
from mlperf_mig.workloads import get_workload

pytestmark = pytest.mark.gpu

trt = pytest.importorskip("tensorrt")
pytest.importorskip("cuda.bindings.runtime")


@pytest.fixture(autouse=True)
def _needs_a_usable_device() -> None:
    reason = TensorRTBackend.availability()
    if reason is not None:
        pytest.skip(reason)


def _spec(
    benchmark: str, precision: str, model_sha: str, batch_sizes: tuple[int, ...]
) -> EngineSpec:
    return EngineSpec(
        benchmark=benchmark,
        backend="tensorrt",
        precision=precision,
        variant="tiny",
        model=model_sha,
        batch_sizes=batch_sizes,
        seq_buckets=(128, 384) if benchmark == "bert" else (),
        workspace_mib=1024,
        backend_version=str(trt.__version__),
    )


def _build_and_load(
    tmp_path: Path, benchmark: str, precision: str, batch_sizes: tuple[int, ...] = (1, 4)
) -> tuple[TensorRTBackend, Path, EngineSpec]:
    model = generated_model(
        benchmark, variant="tiny", precision=precision, cache_dir=tmp_path / "cache"
    )
    spec = _spec(benchmark, precision, model.sha256, batch_sizes)
    engine = tmp_path / f"{benchmark}-{precision}.plan"
    TensorRTBackend.build(spec, model.path, engine)
    return TensorRTBackend.load(spec, engine), model.path, spec


def _onnxruntime(model_path: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))


def _check_shapes(outputs: dict[str, np.ndarray], benchmark: str, batch: int) -> None:
    bench = get_workload(benchmark)
    assert list(outputs) == list(bench.output_names())
    for spec in bench.outputs:
        assert outputs[spec.name].shape == (batch, *spec.shape[1:])
        assert outputs[spec.name].dtype == np.dtype(spec.dtype)
        assert np.isfinite(outputs[spec.name]).all()


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_tiny_resnet50_builds_and_runs(tmp_path: Path, precision: str) -> None:
    """The tiny ResNet50 engine gives the official outputs; softmax rows sum to 1."""
    backend, _, _ = _build_and_load(tmp_path, "resnet50", precision)
    with backend:
        feeds = get_workload("resnet50").calibration_feeds(3, seed=1)
        out = backend.run(feeds)
    _check_shapes(out, "resnet50", 3)
    np.testing.assert_allclose(out["softmax_tensor:0"].sum(axis=1), 1.0, atol=1e-2)
    np.testing.assert_array_equal(out["ArgMax:0"], out["softmax_tensor:0"].argmax(axis=1))


def test_tiny_resnet50_fp32_matches_onnxruntime(tmp_path: Path) -> None:
    """fp32 TensorRT (TF32 allowed) agrees with ONNX Runtime on the CPU."""
    backend, model_path, _ = _build_and_load(tmp_path, "resnet50", "fp32")
    feeds = get_workload("resnet50").calibration_feeds(4, seed=2)
    with backend:
        out = backend.run(feeds)
    expected = _onnxruntime(model_path, feeds)
    np.testing.assert_allclose(out["softmax_tensor:0"], expected["softmax_tensor:0"], atol=2e-3)


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_tiny_bert_builds_and_runs(tmp_path: Path, precision: str) -> None:
    """The tiny BERT engine takes int64 [B,384] inputs and gives [B,384] start/end logits."""
    backend, _, _ = _build_and_load(tmp_path, "bert", precision, batch_sizes=(2,))
    with backend:
        out = backend.run(get_workload("bert").calibration_feeds(2, seed=3))
    _check_shapes(out, "bert", 2)


def test_tiny_bert_fp32_matches_onnxruntime(tmp_path: Path) -> None:
    """fp32 BERT logits agree with ONNX Runtime within TF32 accuracy."""
    backend, model_path, _ = _build_and_load(tmp_path, "bert", "fp32", batch_sizes=(2,))
    feeds = get_workload("bert").calibration_feeds(2, seed=4)
    with backend:
        out = backend.run(feeds)
    expected = _onnxruntime(model_path, feeds)
    for name in ("output_start_logits", "output_end_logits"):
        scale = float(np.abs(expected[name]).max()) or 1.0
        np.testing.assert_allclose(out[name], expected[name], atol=2e-2 * scale)


def test_short_sequences_use_the_short_bucket(tmp_path: Path) -> None:
    """A [B,128] batch runs on the 128 bucket of the dynamic-sequence BERT graph."""
    backend, _, _ = _build_and_load(tmp_path, "bert", "fp16", batch_sizes=(2,))
    feeds = {
        name: array[:, :128]
        for name, array in get_workload("bert").calibration_feeds(2, seed=6).items()
    }
    with backend:
        out = backend.run(feeds)
        assert backend._runner._profile == 0
    assert out["output_start_logits"].shape == (2, 128)
    assert np.isfinite(out["output_end_logits"]).all()


def test_batches_pick_their_profile(tmp_path: Path) -> None:
    """Batches 1..8 run on a (2, 8) engine, switching profiles; batch 9 is refused."""
    backend, _, _ = _build_and_load(tmp_path, "resnet50", "fp16", batch_sizes=(2, 8))
    bench = get_workload("resnet50")
    with backend:
        for batch in (1, 5, 2, 8):
            _check_shapes(
                backend.run(bench.calibration_feeds(batch, seed=batch)), "resnet50", batch
            )
        with pytest.raises(ValueError, match="fit no optimization profile"):
            backend.run(bench.calibration_feeds(9, seed=9))


def test_device_report_names_this_device(tmp_path: Path) -> None:
    """The report carries TensorRT's version and the GPU or MIG UUID of this process."""
    backend, _, _ = _build_and_load(tmp_path, "resnet50", "fp16")
    with backend:
        report = backend.device
    assert report.backend == "tensorrt"
    assert report.version == trt.__version__
    assert report.device.startswith(("GPU-", "MIG-"))


def test_engine_from_another_profile_is_refused_on_load(tmp_path: Path) -> None:
    """A real engine whose header names another MIG profile is not loaded."""
    backend, _, spec = _build_and_load(tmp_path, "resnet50", "fp16")
    backend.close()
    engine = tmp_path / "resnet50-fp16.plan"
    header, plan = read_engine_file(engine)
    other = "7g.141gb" if header.mig_profile != "7g.141gb" else "1g.18gb"
    moved = write_engine_file(
        tmp_path / "moved.plan", attrs.evolve(header, mig_profile=other), bytes(plan)
    )
    with pytest.raises(EngineMismatchError, match="MIG profile"):
        TensorRTBackend.load(spec, moved)


def test_open_backend_builds_once_then_reuses(cache_dir: Path) -> None:
    """Through the engine cache: the first build is made, the second reused, both run."""
    spec = resolve_spec(
        get_workload("resnet50"),
        backend="tensorrt",
        variant="tiny",
        precision="fp16",
        batch_sizes=(4,),
        cache_dir=cache_dir,
    )
    first = build_engine(spec, cache_dir)
    second = build_engine(spec, cache_dir)
    assert (first.reused, second.reused) == (False, True)
    backend: Any = open_backend(spec, cache_dir=cache_dir)
    with backend:
        _check_shapes(
            backend.run(get_workload("resnet50").calibration_feeds(4, seed=5)), "resnet50", 4
        )
