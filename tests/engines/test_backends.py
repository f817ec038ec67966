"""The backend registry and the ONNX Runtime and null backends: availability, honesty, shapes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mlperf_mig.engines import (
    EngineSpec,
    NullBackend,
    available_backends,
    backend_class,
    backend_info,
    build_engine,
    generated_model,
    open_backend,
    resolve_backend,
)
from mlperf_mig.engines.resolve import resolve_spec
from mlperf_mig.errors import (
    BackendUnavailableError,
    EngineBuildError,
    EngineMismatchError,
    PrecisionError,
)
from mlperf_mig.workloads import get_workload
from mlperf_mig.workloads.bert import BERT
from mlperf_mig.workloads.resnet50 import RESNET50

TENSORRT_USABLE = backend_info("tensorrt").available


def test_cpu_backends_are_available() -> None:
    """ONNX Runtime and the null backend can always run on this machine."""
    assert {"onnxruntime", "null"} <= set(available_backends())


@pytest.mark.skipif(TENSORRT_USABLE, reason="TensorRT and a GPU are usable here")
def test_auto_is_onnxruntime_without_tensorrt() -> None:
    """Without TensorRT and a GPU, "auto" picks ONNX Runtime."""
    assert resolve_backend("auto") == "onnxruntime"


@pytest.mark.skipif(TENSORRT_USABLE, reason="TensorRT and a GPU are usable here")
def test_explicit_tensorrt_without_it_says_why() -> None:
    """Asking for TensorRT where it cannot run raises, with the reason and the usable backends."""
    with pytest.raises(BackendUnavailableError, match="onnxruntime, null"):
        resolve_backend("tensorrt")


def test_unknown_backend_lists_known_ones() -> None:
    """A backend name outside the registry raises with the known names."""
    with pytest.raises(BackendUnavailableError, match="tensorrt, onnxruntime, vllm, null"):
        resolve_backend("openvino")


def test_import_loads_no_heavy_library() -> None:
    """`import mlperf_mig.engines`, its spec and the backend folders import neither onnx,
    onnxruntime nor tensorrt."""
    code = (
        "import sys, mlperf_mig.engines as e; e.EngineSpec; e.backend_names(); "
        "print(sorted(m for m in ('onnx', 'onnxruntime', 'tensorrt') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_onnxruntime_cpu_refuses_fp16(cache_dir: Path) -> None:
    """fp16 on the CPU provider would be computed in fp32 behind casts, so it is refused."""
    with pytest.raises(PrecisionError, match="cannot compute fp16 on the CPU"):
        resolve_spec(
            get_workload("resnet50"), backend="onnxruntime", precision="fp16", variant="tiny"
        )


def test_onnxruntime_cpu_refuses_resnet50_int8(cache_dir: Path) -> None:
    """ResNet50's Q/DQ graph would run as float convolutions on the CPU, so int8 is refused."""
    with pytest.raises(PrecisionError, match=r"cannot compute int8 on the CPU; it can do fp32$"):
        resolve_spec(
            get_workload("resnet50"), backend="onnxruntime", precision="int8", variant="tiny"
        )


def test_onnxruntime_cuda_refuses_int8() -> None:
    """The CUDA provider runs Q/DQ as fake quantization, so int8 is refused there."""
    spec = EngineSpec(
        benchmark="resnet50",
        backend="onnxruntime",
        precision="int8",
        model="0" * 64,
        gpu="H100-SXM5-80GB",
    )
    with pytest.raises(PrecisionError, match="on H100-SXM5-80GB"):
        build_engine(spec)


@pytest.mark.skipif(TENSORRT_USABLE, reason="a GPU may be usable here")
def test_onnxruntime_gpu_request_never_falls_back_to_cpu(cache_dir: Path) -> None:
    """A spec for a GPU fails loudly where ONNX Runtime has no CUDA provider."""
    cpu_spec = resolve_spec(get_workload("resnet50"), backend="onnxruntime", variant="tiny")
    gpu_spec = EngineSpec(**{**cpu_spec.to_dict(), "gpu": "H100-SXM5-80GB"})
    with pytest.raises(BackendUnavailableError, match="CUDAExecutionProvider"):
        build_engine(gpu_spec)


def test_onnxruntime_reports_provider_and_threads(cache_dir: Path) -> None:
    """The loaded session reports the CPU provider and the thread count it was given."""
    spec = resolve_spec(get_workload("resnet50"), backend="onnxruntime", variant="tiny")
    with open_backend(spec, threads=1) as backend:
        device = backend.device
    assert (device.provider, device.device, device.threads) == ("CPUExecutionProvider", "cpu", 1)


def test_null_spec_needs_no_model(cache_dir: Path) -> None:
    """A null-backend spec generates nothing and opens at once."""
    spec = resolve_spec(get_workload("bert"), backend="null")
    with open_backend(spec) as backend:
        assert isinstance(backend, NullBackend) and backend.device.backend == "null"
    assert spec.model is None and not cache_dir.exists()


@pytest.mark.parametrize("benchmark", [RESNET50, BERT])
def test_null_outputs_have_official_shapes(benchmark) -> None:
    """The null backend answers every output with the benchmark's dtype and shape."""
    feeds = {t.name: np.zeros((5, *t.shape[1:]), dtype=t.dtype) for t in benchmark.inputs}
    outputs = NullBackend(benchmark).run(feeds)
    for spec in benchmark.outputs:
        assert outputs[spec.name].shape == (5, *spec.shape[1:])
        assert outputs[spec.name].dtype == np.dtype(spec.dtype)


def test_spec_for_another_backend_version_is_refused(cache_dir: Path) -> None:
    """A spec made for another ONNX Runtime version is refused rather than silently rebuilt."""
    spec = resolve_spec(get_workload("resnet50"), backend="onnxruntime", variant="tiny")
    stale = EngineSpec(**{**spec.to_dict(), "backend_version": "0.1.0"})
    with pytest.raises(EngineMismatchError, match=r"0\.1\.0"):
        open_backend(stale)


def _cuda_provider_installed() -> bool:
    import onnxruntime as ort

    return "CUDAExecutionProvider" in ort.get_available_providers()


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda_provider_installed(), reason="onnxruntime-gpu is not installed")
@pytest.mark.parametrize("benchmark", [RESNET50, BERT])
def test_onnxruntime_cuda_runs_fp16_on_the_gpu(benchmark, cache_dir: Path) -> None:
    """With onnxruntime-gpu, a GPU spec runs the fp16 graph on the CUDA provider."""
    import onnxruntime as ort

    model = generated_model(benchmark, variant="tiny", precision="fp16")
    spec = EngineSpec(
        benchmark=benchmark.name,
        backend="onnxruntime",
        precision="fp16",
        variant="tiny",
        model=model.sha256,
        gpu="this GPU",
        backend_version=ort.__version__,
    )
    with open_backend(spec) as backend:
        outputs = backend.run(benchmark.calibration_feeds(2, seed=0))
        assert backend.device.provider == "CUDAExecutionProvider"
    assert outputs[benchmark.outputs[1].name].shape == (2, *benchmark.outputs[1].shape[1:])


def test_backend_with_engine_files_refuses_to_load_without_one(cache_dir: Path) -> None:
    """Backend.load without an engine file says to build one first."""
    spec = resolve_spec(get_workload("resnet50"), backend="onnxruntime", variant="tiny")
    with pytest.raises(EngineBuildError, match="build it first"):
        backend_class("onnxruntime").load(spec, None)
