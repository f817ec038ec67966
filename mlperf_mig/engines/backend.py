"""The one interface every inference backend implements (ONNX Runtime, TensorRT, null).

Each backend lives in its own folder, `engines/backends/<name>/`, and declares its facts (does it
need a GPU, a workspace, what the submission calls it) as class attributes below; the backend
table (`engines/backends/__init__.py`) finds the folders.

The harness only talks to an instance: it hands a batch of named numpy arrays to `run` and gets
named numpy arrays back. `device` reports what the backend actually got (provider, device), which
every result carries, so that a CPU fallback can never pass for a GPU run.

The engine builder talks to the class: `availability()` says whether the backend can run here,
`precisions(spec)` what it can compute, `build(spec, onnx_path, out_path)` turns an ONNX graph
into an engine file and `load(spec, engine_path)` opens one. The engine cache (engines/cache.py)
chooses `out_path`, makes the write atomic, checksums the file and never hands a damaged file to
`load`; a backend only writes and reads its own format.
"""

from __future__ import annotations

import abc
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import attrs
import numpy as np

from mlperf_mig.errors import EngineBuildError
from mlperf_mig.workloads import TensorSpec, Workload

if TYPE_CHECKING:
    from mlperf_mig.engines.spec import EngineSpec


@attrs.frozen(kw_only=True)
class DeviceReport:
    """What a loaded backend actually runs on."""

    backend: str  # "onnxruntime", "tensorrt", "null"
    provider: str  # e.g. "CPUExecutionProvider", "CUDAExecutionProvider", "tensorrt", "null"
    device: str  # "cpu", "cuda:0", or the GPU-/MIG- UUID of the device the process sees
    threads: int | None = None  # CPU threads of the session; None where the library chose
    version: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen(kw_only=True)
class InstallStatus:
    """What `doctor` reports of one backend: can it run here, its version, the line that fixes it."""

    name: str
    version: str | None
    ok: bool
    detail: str
    fix: str | None = None
    runs_on_gpu: bool = False  # it can compute on this machine's GPU

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


class Backend(abc.ABC):
    """A model loaded for inference in this process. Use as a context manager or call close()."""

    # --- the backend's facts, which the rest of the library reads instead of its name ---------
    # The name users pass (--backend); also the name of the backend's folder in engines/backends/.
    name: ClassVar[str]
    # What a submission's system description calls the framework ("TensorRT").
    framework: ClassVar[str]
    # Short token in a submission's system name ("TRT"); None: the name itself.
    system_token: ClassVar[str | None] = None
    # Suffix of the engine files this backend writes (".onnx", ".plan"); "" for no engine file.
    engine_suffix: ClassVar[str] = ""
    # False for backends that compute no model: no engine to build, no precision, model file or
    # threads to choose.
    runs_model: ClassVar[bool] = True
    # Runs only on a GPU, never on emulated (CPU) partitions; without a named GPU, its recipe
    # batch sizes are those of a whole GPU.
    needs_gpu: ClassVar[bool] = False
    # Builds with the recipe's workspace limit (EngineSpec.workspace_mib).
    uses_workspace: ClassVar[bool] = False
    # "auto" may choose it; "auto" tries backends in listing order, the last one as the fallback.
    auto_chooses: ClassVar[bool] = False
    # Place in `mlperf-mig backends` and in the order "auto" tries.
    listing_order: ClassVar[int] = 100

    @classmethod
    def framework_text(cls, device: DeviceReport) -> str:
        """The framework and version a run used, as a submission's system description says it."""
        return f"{cls.framework} {device.version or ''}".strip()

    # --- the class side: what the engine builder calls ----------------------------------------
    @classmethod
    def availability(cls) -> str | None:
        """None when this backend can run on this machine, else the reason it cannot."""
        return None

    @classmethod
    def version(cls) -> str | None:
        """Version of the library behind the backend; engines built by another version are rebuilt."""
        return None

    @classmethod
    def install_status(cls, *, has_gpu: bool, gpu_fix: str) -> InstallStatus:
        """What `doctor` says of this backend on this machine. `gpu_fix` is the install command
        for the driver's CUDA, the fix for a backend that needs a GPU and cannot run. Backends
        whose check goes deeper than `availability()` (a builder, a provider) override this."""
        reason = cls.availability()
        if reason is not None:
            return InstallStatus(
                name=cls.name,
                version=None,
                ok=False,
                detail=reason,
                fix=gpu_fix if cls.needs_gpu and has_gpu else None,
            )
        detail = "runs here" if cls.runs_model else "runs here (computes no model)"
        return InstallStatus(
            name=cls.name,
            version=cls.version(),
            ok=True,
            detail=detail,
            runs_on_gpu=cls.needs_gpu and has_gpu,
        )

    @classmethod
    def precisions(cls, spec: EngineSpec) -> tuple[str, ...]:
        """Precisions this backend computes for `spec` (its device), preferred first."""
        return ("fp32",)

    @classmethod
    def build(
        cls, spec: EngineSpec, onnx_path: str | os.PathLike[str], out_path: str | os.PathLike[str]
    ) -> None:
        """Write the engine for `spec`, made from the ONNX graph at `onnx_path`, to `out_path`."""
        raise NotImplementedError(f"the {cls.name} backend builds no engine files")

    @classmethod
    def load(
        cls,
        spec: EngineSpec,
        engine_path: str | os.PathLike[str] | None,
        *,
        threads: int | None = None,
    ) -> Backend:
        """Open the engine at `engine_path` (checked by the cache; None without engine_suffix).

        `threads` is the number of CPU threads for backends that compute on the CPU.
        """
        if not cls.engine_suffix:
            return cls._open(spec, None, threads=threads)
        if engine_path is None:
            raise EngineBuildError(
                f"the {cls.name} backend needs an engine file to load; build it first "
                "(build_engine, or open_backend which builds it)"
            )
        return cls._open(spec, Path(engine_path), threads=threads)

    @classmethod
    @abc.abstractmethod
    def _open(cls, spec: EngineSpec, engine_path: Path | None, *, threads: int | None) -> Backend:
        """`load` after its checks: `engine_path` is a Path exactly when there is engine_suffix."""

    # --- the instance side: what the harness calls -------------------------------------------
    @property
    @abc.abstractmethod
    def benchmark(self) -> Workload: ...

    @property
    @abc.abstractmethod
    def device(self) -> DeviceReport: ...

    @property
    def inputs(self) -> tuple[TensorSpec, ...]:
        return self.benchmark.inputs

    @property
    def outputs(self) -> tuple[TensorSpec, ...]:
        return self.benchmark.outputs

    @abc.abstractmethod
    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run one batch; `feeds` maps input names to arrays whose first axis is the batch."""

    def close(self) -> None:  # noqa: B027 - backends without resources need no close
        """Release the session, engine, buffers and streams."""

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class HostBackend(Backend):
    """A backend that answers on the host CPU without a model or an engine file (null,
    known_answer): it holds its benchmark and reports `provider` on the CPU."""

    provider: ClassVar[str]

    def __init__(self, benchmark: Workload) -> None:
        self._benchmark = benchmark

    @property
    def benchmark(self) -> Workload:
        return self._benchmark

    @property
    def device(self) -> DeviceReport:
        return DeviceReport(backend=self.name, provider=self.provider, device="cpu")
