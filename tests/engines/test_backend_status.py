"""What doctor says of each backend: each class answers for itself, with the driver's fix line."""

from __future__ import annotations

import sys
import types

import pytest

from mlperf_mig.engines.backends.onnxruntime.backend import OnnxRuntimeBackend
from mlperf_mig.engines.backends.tensorrt import backend as trt_backend
from mlperf_mig.engines.backends.tensorrt.backend import TensorRTBackend

FIX = "pip install the-cuda-12-command"


def _fake_tensorrt(builder: object) -> types.ModuleType:
    module = types.ModuleType("tensorrt")
    module.__version__ = "10.13.0"

    class Logger:
        ERROR = 0

        def __init__(self, level: int) -> None:
            self.level = level

    def make_builder(logger: Logger) -> object:
        if isinstance(builder, Exception):
            raise builder
        return builder

    module.Logger = Logger
    module.Builder = make_builder
    return module


@pytest.fixture(name="usable_tensorrt")
def fixture_usable_tensorrt(monkeypatch: pytest.MonkeyPatch):
    """TensorRT and a CUDA device declared usable, the module itself a fake."""

    def install(builder: object) -> None:
        monkeypatch.setitem(sys.modules, "tensorrt", _fake_tensorrt(builder))
        monkeypatch.setattr(trt_backend, "availability_reason", lambda *a: None)

    return install


def test_tensorrt_without_a_gpu_is_not_usable_and_has_no_fix() -> None:
    """Without a GPU, TensorRT is reported unusable and no install command is pressed on the user."""
    status = TensorRTBackend.install_status(has_gpu=False, gpu_fix=FIX)
    assert not status.ok and status.fix is None and not status.runs_on_gpu
    assert "only of use with a GPU" in status.detail or "no builder was created" in status.detail


def test_tensorrt_missing_on_a_gpu_machine_gets_the_drivers_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With a GPU and no TensorRT, the fix is the install command for the driver's CUDA."""
    monkeypatch.setattr(trt_backend, "availability_reason", lambda *a: "tensorrt not installed")
    status = TensorRTBackend.install_status(has_gpu=True, gpu_fix=FIX)
    assert (status.ok, status.fix, status.detail) == (False, FIX, "tensorrt not installed")


def test_tensorrt_builder_that_fails_is_reported_with_the_fix(usable_tensorrt) -> None:
    """A builder that cannot be created (a wheel for the wrong CUDA) says why and gives the fix."""
    usable_tensorrt(RuntimeError("CUDA initialization failure"))
    status = TensorRTBackend.install_status(has_gpu=True, gpu_fix=FIX)
    assert not status.ok and status.fix == FIX and "CUDA initialization failure" in status.detail


def test_tensorrt_builder_none_is_not_usable(usable_tensorrt) -> None:
    """trt.Builder returning None is a failure, not a usable backend."""
    usable_tensorrt(None)
    status = TensorRTBackend.install_status(has_gpu=True, gpu_fix=FIX)
    assert not status.ok and "returned None" in status.detail


def test_tensorrt_with_a_builder_runs_on_the_gpu(usable_tensorrt) -> None:
    """A created builder makes TensorRT a GPU backend, with its version."""
    usable_tensorrt(object())
    status = TensorRTBackend.install_status(has_gpu=True, gpu_fix=FIX)
    assert (status.ok, status.runs_on_gpu, status.version) == (True, True, "10.13.0")


def test_onnxruntime_without_cuda_provider_on_a_gpu_gets_the_fix() -> None:
    """ONNX Runtime's CPU build on a GPU machine is reported with the GPU install command."""
    status = OnnxRuntimeBackend.install_status(has_gpu=True, gpu_fix=FIX)
    assert not status.ok and status.fix == FIX and "no CUDAExecutionProvider" in status.detail


def test_onnxruntime_on_the_cpu_is_usable() -> None:
    """Without a GPU, the CPU build of ONNX Runtime is usable and lists its providers."""
    status = OnnxRuntimeBackend.install_status(has_gpu=False, gpu_fix=FIX)
    assert status.ok and not status.runs_on_gpu and "CPUExecutionProvider" in status.detail
