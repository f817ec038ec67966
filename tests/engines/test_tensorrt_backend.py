"""The TensorRT backend class: availability reasons, precision, device checks and the Backend contract.

These run with or without tensorrt installed: the imports are injected, and the loaded backend is
built around a stand-in runner.
"""

from __future__ import annotations

import importlib.util
import re
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np
import pytest

from mlperf_mig.engines.backend import DeviceReport
from mlperf_mig.engines.backends import backend_class, backend_info
from mlperf_mig.engines.backends.tensorrt.backend import (
    TENSORRT_PRECISIONS,
    TensorRTBackend,
    availability_reason,
    check_build_device,
    check_engine_interface,
    check_engine_spec,
    check_precision,
    import_libraries,
    same_gpu,
    workspace_bytes,
)
from mlperf_mig.engines.backends.tensorrt.cuda import DeviceIdentity
from mlperf_mig.engines.backends.tensorrt.engine_file import EngineHeader
from mlperf_mig.engines.spec import EngineSpec
from mlperf_mig.errors import (
    BackendUnavailableError,
    EngineMismatchError,
    ModelFileError,
    PrecisionError,
)
from mlperf_mig.workloads.bert import BERT
from mlperf_mig.workloads.resnet50 import RESNET50

TENSORRT_INSTALLED = importlib.util.find_spec("tensorrt") is not None


class CudaError:
    cudaSuccess = 0
    cudaErrorNoDevice = 100


def fake_cudart(count: int = 1, error: int = CudaError.cudaSuccess) -> Any:
    return SimpleNamespace(
        cudaError_t=CudaError,
        cudaGetDeviceCount=lambda: (error, count),
        cudaGetErrorName=lambda err: (CudaError.cudaSuccess, b"cudaErrorNoDevice"),
    )


def importer(**modules: Any) -> Any:
    """An import function that knows only `modules` (dots spelled as __)."""
    known = {name.replace("__", "."): module for name, module in modules.items()}

    def import_module(name: str) -> ModuleType:
        if name not in known:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return known[name]

    return import_module


def mig_device(profile: str | None = "1g.18gb") -> DeviceIdentity:
    return DeviceIdentity(
        name="NVIDIA H200" + (f" MIG {profile}" if profile else ""),
        gpu="H200",
        mig_profile=profile,
        uuid="MIG-2f1b7c2e-0d4e-5a7b-9c1d-3e5f7a9b1c2d"
        if profile
        else "GPU-00000000-0000-0000-0000-000000000000",
        ordinal=0,
        compute_capability="9.0",
    )


def spec(**changes: Any) -> EngineSpec:
    values: dict[str, Any] = {
        "benchmark": "resnet50",
        "backend": "tensorrt",
        "precision": "int8",
        "batch_sizes": (8,),
        "gpu": "H200-SXM5-141GB",
        "mig_profile": "1g.18gb",
        "workspace_mib": 1024,
    }
    return EngineSpec(**{**values, **changes})


# --- availability ---------------------------------------------------------------------------
def test_no_tensorrt_is_a_reason() -> None:
    """Without the tensorrt package the reason says so and where the driver's install command is
    (the README gives one per CUDA major, so no single pip line is right everywhere)."""
    reason = availability_reason(importer())
    assert reason is not None
    assert reason.startswith("tensorrt not installed")
    assert "`mlperf-mig doctor` prints the command" in reason


def test_no_cuda_python_is_a_reason() -> None:
    """TensorRT without cuda-python cannot run: the reason names cuda-python."""
    reason = availability_reason(importer(tensorrt=object()))
    assert reason is not None
    assert reason.startswith("cuda-python not installed")


def test_no_device_is_a_reason() -> None:
    """No CUDA device (no driver, or no GPU) is a reason with CUDA's error name."""
    reason = availability_reason(
        importer(
            tensorrt=object(), cuda__bindings__runtime=fake_cudart(0, CudaError.cudaErrorNoDevice)
        )
    )
    assert reason == "no CUDA device (cudaErrorNoDevice)"


def test_broken_cuda_runtime_is_a_reason_not_a_crash() -> None:
    """A CUDA runtime that raises still gives a reason."""

    def broken() -> Any:
        raise RuntimeError("libcuda.so.1: cannot open shared object file")

    cudart = SimpleNamespace(cudaError_t=CudaError, cudaGetDeviceCount=broken)
    reason = availability_reason(importer(tensorrt=object(), cuda__bindings__runtime=cudart))
    assert reason is not None
    assert "libcuda.so.1" in reason


def test_everything_present_is_available() -> None:
    """TensorRT, cuda-python and a device: no reason."""
    assert (
        availability_reason(importer(tensorrt=object(), cuda__bindings__runtime=fake_cudart()))
        is None
    )


def test_import_libraries_raises_with_the_reason() -> None:
    """Asking for TensorRT where it is missing raises BackendUnavailableError with the reason."""
    with pytest.raises(
        BackendUnavailableError, match="tensorrt backend cannot run here: tensorrt not installed"
    ):
        import_libraries(importer())


def test_import_libraries_returns_both_modules() -> None:
    """Where all is present the two modules come back."""
    trt, cudart = object(), fake_cudart()
    assert import_libraries(importer(tensorrt=trt, cuda__bindings__runtime=cudart)) == (trt, cudart)


def test_availability_never_raises_here() -> None:
    """On this machine the classmethod answers None or a reason, and says 'tensorrt' when it is missing."""
    reason = TensorRTBackend.availability()
    assert reason is None or isinstance(reason, str)
    if not TENSORRT_INSTALLED:
        assert reason is not None
        assert reason.startswith("tensorrt not installed")


@pytest.mark.skipif(TENSORRT_INSTALLED, reason="tensorrt is installed here")
def test_version_is_none_without_tensorrt() -> None:
    """Without TensorRT there is no backend version."""
    assert TensorRTBackend.version() is None


@pytest.mark.skipif(TENSORRT_INSTALLED, reason="tensorrt is installed here")
def test_build_without_tensorrt_raises_unavailable(tmp_path: Any) -> None:
    """build() where TensorRT is missing raises BackendUnavailableError, not ImportError."""
    with pytest.raises(BackendUnavailableError, match="tensorrt not installed"):
        TensorRTBackend.build(spec(), tmp_path / "m.onnx", tmp_path / "e.plan")


def test_registry_finds_the_backend() -> None:
    """The backend registry imports this class under the name 'tensorrt'."""
    assert backend_class("tensorrt") is TensorRTBackend
    info = backend_info("tensorrt")
    assert info.available is (TensorRTBackend.availability() is None)
    assert TensorRTBackend.engine_suffix == ".plan"


# --- precision, workspace, device checks ----------------------------------------------------
def test_precisions_prefer_int8() -> None:
    """TensorRT builds int8 (Q/DQ graph), fp16 and fp32, int8 first as MLPerf submitters run."""
    assert TensorRTBackend.precisions(spec()) == ("int8", "fp16", "fp32")


def test_unknown_precision_is_refused() -> None:
    """A precision without a graph form (no builder flags in TensorRT 11) raises PrecisionError."""
    with pytest.raises(PrecisionError, match="cannot build precision 'bf16'"):
        check_precision("bf16")
    for precision in TENSORRT_PRECISIONS:
        check_precision(precision)


def test_workspace_comes_from_the_recipe() -> None:
    """The recipe's workspace in MiB becomes bytes; none leaves TensorRT's default."""
    assert workspace_bytes(spec(workspace_mib=1024)) == 1 << 30
    assert workspace_bytes(spec(workspace_mib=None)) is None


def test_build_on_the_spec_profile_passes() -> None:
    """A 1g.18gb spec builds in a 1g.18gb instance of an H200 (catalog name vs CUDA name)."""
    check_build_device(spec(), mig_device())


def test_build_on_another_profile_is_refused() -> None:
    """A 1g.18gb engine is not built on the whole GPU: kernels would be timed on the wrong slice."""
    with pytest.raises(
        EngineMismatchError,
        match=re.escape(
            "is for H200-SXM5-141GB MIG 1g.18gb, but this process runs on H200 (whole GPU)"
        ),
    ):
        check_build_device(spec(), mig_device(None))


def test_build_for_the_whole_gpu_in_a_slice_is_refused() -> None:
    """A whole-GPU engine is not built inside a MIG instance."""
    with pytest.raises(EngineMismatchError, match="whole GPU"):
        check_build_device(spec(mig_profile=None), mig_device())


def test_build_on_another_gpu_is_refused() -> None:
    """An A100 engine is not built on an H200."""
    with pytest.raises(EngineMismatchError, match="A100-SXM4-80GB"):
        check_build_device(spec(gpu="A100-SXM4-80GB", mig_profile="1g.18gb"), mig_device())


def test_spec_without_target_builds_anywhere() -> None:
    """A spec that names no GPU builds on whatever device this process has."""
    check_build_device(spec(gpu=None, mig_profile=None), mig_device())


@pytest.mark.parametrize(
    ("wanted", "actual", "same"),
    [
        ("H200-SXM5-141GB", "H200", True),
        ("A100-PCIE-80GB", "A100 80GB PCIe", True),
        ("H200-SXM5-141GB", "H100 80GB HBM3", False),
        ("Future GPU", "future  gpu", True),
        ("Future GPU", "Other GPU", False),
    ],
)
def test_same_gpu(wanted: str, actual: str, same: bool) -> None:
    """Catalog names, NVML names and aliases of one product match; unknown names match exactly."""
    assert same_gpu(wanted, actual) is same


def test_engine_for_another_spec_is_refused() -> None:
    """An engine file whose header names another cache key is not loaded for this spec."""
    header = EngineHeader.for_device(
        mig_device(),
        tensorrt_version="10.13.3.9",
        benchmark="resnet50",
        precision="fp16",
        cache_key="ffffffffffffffffffff",
        profiles=(),
    )
    with pytest.raises(EngineMismatchError, match="built for spec ffffffffffffffffffff"):
        check_engine_spec(header, spec(), "e.plan")
    check_engine_spec(
        EngineHeader.for_device(
            mig_device(),
            tensorrt_version="10",
            benchmark="resnet50",
            precision="int8",
            cache_key=spec().cache_key,
            profiles=(),
        ),
        spec(),
        "e.plan",
    )


def test_engine_with_another_interface_is_refused() -> None:
    """An engine whose tensors are not the benchmark's lists expected and found names."""
    with pytest.raises(
        ModelFileError, match=r"expected inputs \['input_tensor:0'\].*found inputs \['images'\]"
    ):
        check_engine_interface(RESNET50, ("images",), ("ArgMax:0", "softmax_tensor:0"), "e.plan")
    check_engine_interface(BERT, BERT.input_names(), (*BERT.output_names(), "extra"), "e.plan")


# --- the loaded backend ---------------------------------------------------------------------
class StandInRunner:
    """Returns ArgMax in int32 (as TensorRT may) plus an output the benchmark does not have."""

    def __init__(self) -> None:
        self.closed = False

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        batch = len(feeds["input_tensor:0"])
        return {
            "ArgMax:0": np.arange(batch, dtype=np.int32),
            "softmax_tensor:0": np.zeros((batch, 1001), np.float32),
            "extra": np.zeros(batch),
        }

    def close(self) -> None:
        self.closed = True


@pytest.fixture(name="backend")
def fixture_backend() -> TensorRTBackend:
    report = DeviceReport(
        backend="tensorrt", provider="tensorrt", device=mig_device().uuid, version="10.13.3.9"
    )
    return TensorRTBackend(benchmark=RESNET50, runner=StandInRunner(), device=report)  # type: ignore[arg-type]


def test_run_gives_the_official_outputs_and_dtypes(backend: TensorRTBackend) -> None:
    """run() returns exactly the benchmark's outputs, ArgMax as int64."""
    out = backend.run({"input_tensor:0": np.zeros((3, 3, 224, 224), np.float32)})
    assert list(out) == ["ArgMax:0", "softmax_tensor:0"]
    assert out["ArgMax:0"].dtype == np.int64
    assert out["softmax_tensor:0"].shape == (3, 1001)


def test_device_report_names_the_mig_instance(backend: TensorRTBackend) -> None:
    """The device report says tensorrt and the MIG UUID the process runs on."""
    assert backend.device.to_dict() == {
        "backend": "tensorrt",
        "provider": "tensorrt",
        "device": "MIG-2f1b7c2e-0d4e-5a7b-9c1d-3e5f7a9b1c2d",
        "threads": None,
        "version": "10.13.3.9",
    }
    assert backend.inputs == RESNET50.inputs


def test_context_manager_closes_the_runner(backend: TensorRTBackend) -> None:
    """Leaving the with-block closes the runner (buffers, stream, engine)."""
    runner = backend._runner
    with backend:
        pass
    assert runner.closed  # type: ignore[attr-defined]
