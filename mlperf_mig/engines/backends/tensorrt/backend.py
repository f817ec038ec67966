"""The TensorRT backend: strongly typed engines from ONNX, one per MIG profile, run through cuda-python.

`TensorRTBackend.build` must run inside the MIG instance (or on the whole GPU) that the engine is
for: TensorRT chooses kernels by timing them on the device at hand. The engine file records the
GPU, MIG profile, compute capability and TensorRT version, and `load` refuses a file built
anywhere else. Device buffers and streams come from cuda-python (`cuda.bindings.runtime`).

tensorrt and cuda-python are imported inside the methods that need them, so this module imports
on any machine; `availability()` says why the backend cannot run where it cannot.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from mlperf_mig.engines.backend import Backend, DeviceReport, InstallStatus
from mlperf_mig.engines.backends.tensorrt.build import (
    build_serialized_engine,
    capturing_logger,
    create_builder,
    create_builder_config,
    create_network,
    network_input_shapes,
    optimization_profiles,
)
from mlperf_mig.engines.backends.tensorrt.cuda import (
    DeviceIdentity,
    cuda_device_count_reason,
    import_cuda_runtime,
)
from mlperf_mig.engines.backends.tensorrt.engine_file import EngineHeader, write_engine_file
from mlperf_mig.engines.backends.tensorrt.runner import TensorRTRunner
from mlperf_mig.errors import (
    BackendUnavailableError,
    EngineMismatchError,
    ModelFileError,
    PrecisionError,
)
from mlperf_mig.workloads import Workload

if TYPE_CHECKING:
    from mlperf_mig.engines.spec import EngineSpec

log = logging.getLogger(__name__)

ImportModule = Callable[[str], ModuleType]

# Precision lives in the ONNX graph (fp16 graph, Q/DQ INT8 graph); MLPerf submitters run INT8.
TENSORRT_PRECISIONS: tuple[str, ...] = ("int8", "fp16", "fp32")
# The wheels depend on the driver's CUDA major: docs/real-gpu.md gives one command per
# major, and `mlperf-mig doctor` prints the one for this machine's driver.
_INSTALL_HINT = "install it for the driver's CUDA: `mlperf-mig doctor` prints the command"


def availability_reason(import_module: ImportModule = importlib.import_module) -> str | None:
    """None when TensorRT, cuda-python and a CUDA device are usable here, else why not."""
    try:
        import_module("tensorrt")
    except (ImportError, OSError) as exc:
        return f"tensorrt not installed ({exc}); {_INSTALL_HINT}"
    try:
        cudart = import_cuda_runtime(import_module)
    except (ImportError, OSError) as exc:
        return (
            f"cuda-python not installed (cuda.bindings.runtime, from cuda-python 12.6.2 on: "
            f"{exc}); {_INSTALL_HINT}"
        )
    try:
        return cuda_device_count_reason(cudart)
    except Exception as exc:  # a broken driver must not turn a question into a crash
        return f"no CUDA device (the CUDA runtime failed: {exc})"


def import_libraries(
    import_module: ImportModule = importlib.import_module,
) -> tuple[ModuleType, ModuleType]:
    """(tensorrt, cuda.bindings.runtime), or BackendUnavailableError saying what is missing."""
    reason = availability_reason(import_module)
    if reason is not None:
        raise BackendUnavailableError(f"the tensorrt backend cannot run here: {reason}")
    return import_module("tensorrt"), import_cuda_runtime(import_module)


def check_precision(precision: str) -> None:
    if precision not in TENSORRT_PRECISIONS:
        raise PrecisionError(
            f"TensorRT cannot build precision {precision!r}; it builds "
            f"{', '.join(TENSORRT_PRECISIONS)} (from the fp32, fp16 or Q/DQ INT8 graph)"
        )


def check_build_device(spec: EngineSpec, device: DeviceIdentity) -> None:
    """Refuse to build an engine for one GPU/MIG profile on another (kernels are timed here)."""
    if spec.gpu is None and spec.mig_profile is None:
        return
    wrong_gpu = spec.gpu is not None and not same_gpu(spec.gpu, device.gpu)
    if wrong_gpu or spec.mig_profile != device.mig_profile:
        wanted = spec.gpu or device.gpu
        wanted += f" MIG {spec.mig_profile}" if spec.mig_profile else " (whole GPU)"
        raise EngineMismatchError(
            f"the engine is for {wanted}, but this process runs on {device.describe()} "
            f"({device.uuid}); build it inside a matching instance "
            "(CUDA_VISIBLE_DEVICES=MIG-<uuid> of that profile)"
        )


def same_gpu(wanted: str, actual: str) -> bool:
    """Whether two names mean one GPU product: the spec's catalog name and CUDA's NVML-style name.

    The catalog knows each product by its name, NVML names and aliases ("H200-SXM5-141GB" is
    what CUDA calls "NVIDIA H200"); names it does not know must match exactly (case aside).
    """
    if " ".join(wanted.lower().split()) == " ".join(actual.lower().split()):
        return True
    from mlperf_mig.registry.catalog import default_catalog

    catalog = default_catalog()
    wanted_gpu, actual_gpu = catalog.find(wanted), catalog.find(actual)
    return wanted_gpu is not None and actual_gpu is not None and wanted_gpu.name == actual_gpu.name


def workspace_bytes(spec: EngineSpec) -> int | None:
    """The recipe's workspace limit in bytes; None leaves TensorRT's default (the device's memory)."""
    return None if spec.workspace_mib is None else int(spec.workspace_mib) << 20


class TensorRTBackend(Backend):
    """A TensorRT engine loaded in this process, on the CUDA device this process sees."""

    name = "tensorrt"
    framework = "TensorRT"
    system_token = "TRT"
    engine_suffix = ".plan"
    needs_gpu = True
    uses_workspace = True
    auto_chooses = True
    listing_order = 10

    def __init__(
        self, *, benchmark: Workload, runner: TensorRTRunner, device: DeviceReport
    ) -> None:
        self._benchmark = benchmark
        self._runner = runner
        self._device = device

    # --- the class side ------------------------------------------------------------------------
    @classmethod
    def availability(cls) -> str | None:
        return availability_reason()

    @classmethod
    def version(cls) -> str | None:
        try:
            trt = importlib.import_module("tensorrt")
        except (ImportError, OSError):
            return None
        return str(trt.__version__)

    @classmethod
    def install_status(cls, *, has_gpu: bool, gpu_fix: str) -> InstallStatus:
        """Installed, and with a GPU: whether a builder can be created (the first thing a build
        needs, and what a wheel for the wrong CUDA fails at)."""
        version, reason = cls.version(), cls.availability()
        if not has_gpu:
            detail = (
                "installed; no GPU here, so no builder was created"
                if version
                else "not installed; only of use with a GPU"
            )
            return InstallStatus(name=cls.name, version=version, ok=False, detail=detail)
        if reason is not None:
            return InstallStatus(
                name=cls.name, version=version, ok=False, detail=reason, fix=gpu_fix
            )
        trt = importlib.import_module("tensorrt")
        try:
            builder = trt.Builder(trt.Logger(trt.Logger.ERROR))
        except (RuntimeError, TypeError) as exc:
            return InstallStatus(
                name=cls.name,
                version=version,
                ok=False,
                detail=f"a builder cannot be created ({exc})",
                fix=gpu_fix,
            )
        if builder is None:
            return InstallStatus(
                name=cls.name,
                version=version,
                ok=False,
                detail="trt.Builder returned None (no usable GPU or CUDA)",
                fix=gpu_fix,
            )
        return InstallStatus(
            name=cls.name,
            version=version,
            ok=True,
            detail="a builder was created",
            runs_on_gpu=True,
        )

    @classmethod
    def precisions(cls, spec: EngineSpec) -> tuple[str, ...]:
        return TENSORRT_PRECISIONS

    @classmethod
    def build(
        cls, spec: EngineSpec, onnx_path: str | os.PathLike[str], out_path: str | os.PathLike[str]
    ) -> None:
        """Build the engine for `spec` from the ONNX graph on this process's device."""
        check_precision(spec.precision)
        trt, cudart = import_libraries()
        device = DeviceIdentity.detect(cudart)
        check_build_device(spec, device)
        logger = capturing_logger(trt)
        builder = create_builder(trt, logger)
        network, _parser = create_network(trt, builder, onnx_path, logger)
        profiles = optimization_profiles(
            network_input_shapes(network),
            batch_sizes=spec.batch_sizes,
            seq_buckets=spec.seq_buckets,
        )
        config = create_builder_config(
            trt, builder, profiles, workspace_bytes=workspace_bytes(spec), logger=logger
        )
        log.info(
            "building TensorRT %s engine for %s %s on %s (%d profiles)",
            trt.__version__,
            spec.benchmark,
            spec.precision,
            device.describe(),
            len(profiles),
        )
        serialized = build_serialized_engine(builder, network, config, logger)
        header = EngineHeader.for_device(
            device,
            tensorrt_version=str(trt.__version__),
            benchmark=spec.benchmark.name,
            precision=spec.precision,
            cache_key=spec.cache_key,
            profiles=profiles,
        )
        write_engine_file(out_path, header, serialized)

    @classmethod
    def _open(
        cls, spec: EngineSpec, engine_path: Path | None, *, threads: int | None
    ) -> TensorRTBackend:
        """Open the engine file on this process's device; `threads` has no meaning on a GPU."""
        assert engine_path is not None  # load passes the file of a backend with an engine_suffix
        benchmark = spec.benchmark
        trt, cudart = import_libraries()
        device = DeviceIdentity.detect(cudart)
        runner = TensorRTRunner.from_file(engine_path, trt=trt, cudart=cudart, device=device)
        try:
            check_engine_spec(runner.header, spec, engine_path)
            check_engine_interface(benchmark, runner.input_names, runner.output_names, engine_path)
        except BaseException:
            runner.close()
            raise
        report = DeviceReport(
            backend=cls.name, provider="tensorrt", device=device.uuid, version=str(trt.__version__)
        )
        log.info(
            "loaded TensorRT engine %s on %s (%s)", engine_path, device.describe(), device.uuid
        )
        return cls(benchmark=benchmark, runner=runner, device=report)

    # --- the instance side ---------------------------------------------------------------------
    @property
    def benchmark(self) -> Workload:
        return self._benchmark

    @property
    def device(self) -> DeviceReport:
        return self._device

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        outputs = self._runner.run(feeds)
        # TensorRT may compute ArgMax in int32; callers get the official dtypes
        return {
            spec.name: outputs[spec.name].astype(spec.dtype, copy=False)
            for spec in self._benchmark.outputs
        }

    def close(self) -> None:
        self._runner.close()


def check_engine_spec(header: EngineHeader, spec: EngineSpec, path: str | os.PathLike[str]) -> None:
    """The engine file must have been built from this spec (same cache key)."""
    if header.cache_key is not None and header.cache_key != spec.cache_key:
        raise EngineMismatchError(
            f"TensorRT engine {str(path)!r} was built for spec {header.cache_key} "
            f"({header.benchmark} {header.precision}), not for {spec.cache_key} "
            f"({spec.benchmark} {spec.precision}); rebuild it"
        )


def check_engine_interface(
    benchmark: Workload,
    inputs: tuple[str, ...],
    outputs: tuple[str, ...],
    path: str | os.PathLike[str],
) -> None:
    """The engine must take the benchmark's inputs and give (at least) its outputs."""
    missing_out = [n for n in benchmark.output_names() if n not in outputs]
    if set(inputs) != set(benchmark.input_names()) or missing_out:
        raise ModelFileError(
            f"TensorRT engine {str(path)!r} does not have the {benchmark.name} interface: "
            f"expected inputs {list(benchmark.input_names())} and outputs "
            f"{list(benchmark.output_names())}, found inputs {list(inputs)} and outputs "
            f"{list(outputs)}; rebuild it from a model with the official interface"
        )
