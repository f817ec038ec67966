"""The ONNX Runtime backend: CPU execution provider, or CUDA where onnxruntime-gpu is installed.

The "engine" is the graph after ONNX Runtime's offline graph optimisations (fusions, constant
folding) for the provider it will run on, saved by ONNX Runtime itself; loading it applies only
the hardware-specific layout passes. On the CPU provider those run once per machine: the result
is saved next to the engine with its weights in a file that every session maps, so that emulated
instances share one copy of the weights (cpu_copy.py). A spec with a `gpu` runs on
the CUDA provider, one without on the CPU provider; the session is checked to have got exactly
that provider, never a fallback.

Memory of a CPU session, per instance (benchmarks/instance_memory.py): the weights are mapped and
shared; what each instance owns is its ONNX Runtime arena, which grows to the activations of its
largest run, about 6 MiB per ResNet50 sample (53 MiB for a batch of 8, 17 MiB for 2). CPU kernels
gain nothing from more samples in one run, so on the CPU provider a batch runs as consecutive runs
of at most CPU_SAMPLES_PER_THREAD samples per intra-op thread (runs of 2 with one thread); the
caller still gets one output per sample of the whole batch. Measured on 2 cores, alternating with
whole batches of 8 (benchmarks/ortcpu_throughput.py, 3 rounds each): 13.0-13.7 samples/s with one
thread against 9.8-12.7, and 19.9-23.3 with two against 19.7-22.1; smaller runs keep their
activations in cache. Sessions with 4 or more threads run a CPU recipe batch (at most 8) whole, as
before (not measured here). The arena is kept (without it, glibc's heap grows to several times the
activations) and so is the memory pattern's absence (below).

Precisions, honestly (checked on the saved optimised graphs):
- CPU provider: fp32. int8 for BERT only: it fuses the Q/DQ matmuls into integer GEMMs
  (MatMulIntegerToFloat). The ResNet50 Q/DQ graph is laid out for TensorRT (float biases, no
  QuantizeLinear after each convolution), which the CPU provider cannot fuse into QLinearConv:
  it would run float convolutions on dequantized weights, slower than fp32
  (benchmarks/ortcpu_throughput.py --precision int8 measured 1.1-2.4 samples/s against 2.6-4.3
  for fp32 on the same loaded 2-core machine), so ResNet50 int8 is refused. fp16 is refused: the
  CPU provider has no fp16 convolution/GEMM kernels on x86; it inserts casts to fp32 (for
  ResNet50 it folds the weights back to fp32 outright), so an "fp16" run would be fp32.
- CUDA provider: fp32 and fp16. Q/DQ graphs would run as float with fake quantization, not as
  int8, so int8 is refused there (use TensorRT for int8 on a GPU).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from mlperf_mig.emulation.cpu_budget import BUDGET_ENV
from mlperf_mig.engines.backend import Backend, DeviceReport, InstallStatus
from mlperf_mig.engines.backends.onnxruntime.cpu_copy import (
    EXTERNAL_MIN_BYTES,
    MODEL_NAME,
    WEIGHTS_NAME,
    shared_model,
)
from mlperf_mig.errors import BackendUnavailableError, EngineBuildError
from mlperf_mig.workloads import Workload

if TYPE_CHECKING:
    import onnxruntime as ort

    from mlperf_mig.engines.spec import EngineSpec

log = logging.getLogger(__name__)

CPU_PROVIDER = "CPUExecutionProvider"
CUDA_PROVIDER = "CUDAExecutionProvider"
# Samples per intra-op thread in one run of a CPU session (see the module docstring).
CPU_SAMPLES_PER_THREAD = 2


def _ort_errors() -> tuple[type[Exception], ...]:
    from onnxruntime.capi import onnxruntime_pybind11_state as state

    names = ("Fail", "InvalidArgument", "InvalidGraph", "InvalidProtobuf", "NoSuchFile")
    more = ("NotImplemented", "RuntimeException", "EPFail")
    return tuple(getattr(state, n) for n in (*names, *more) if hasattr(state, n))


def provider_for(spec: EngineSpec) -> str:
    return CUDA_PROVIDER if spec.gpu else CPU_PROVIDER


def _new_session(
    spec: EngineSpec, model_path: str | os.PathLike[str], options: ort.SessionOptions
) -> ort.InferenceSession:
    """A session on exactly the spec's provider; raises instead of falling back."""
    import onnxruntime as ort

    provider = provider_for(spec)
    if provider not in ort.get_available_providers():
        raise BackendUnavailableError(
            f"ONNX Runtime {ort.__version__} offers {', '.join(ort.get_available_providers())}, "
            f"not {provider}; install onnxruntime-gpu (in place of onnxruntime) for GPUs, "
            "or use TensorRT"
        )
    try:
        session = ort.InferenceSession(str(model_path), options, providers=[provider])
    except _ort_errors() as exc:
        raise EngineBuildError(
            f"ONNX Runtime could not load {str(model_path)!r} on {provider}: {exc}"
        ) from None
    got = session.get_providers()[0]
    if got != provider:
        raise BackendUnavailableError(
            f"ONNX Runtime was asked for {provider} but the session runs on {got} "
            "(no usable GPU for this process?); refusing to fall back"
        )
    return session


def samples_per_run(spec: EngineSpec, threads: int | None) -> int | None:
    """At most how many samples one session run takes; None: the whole batch (GPU sessions).

    `threads` None is ONNX Runtime's default, one intra-op thread per CPU of the process.
    """
    if provider_for(spec) != CPU_PROVIDER:
        return None
    if threads is None:
        affinity = getattr(os, "sched_getaffinity", None)
        threads = len(affinity(0)) if affinity is not None else os.cpu_count() or 1
    return CPU_SAMPLES_PER_THREAD * threads


def session_options(
    spec: EngineSpec, *, threads: int | None, optimized: bool = False
) -> ort.SessionOptions:
    """Options of an inference session; `optimized`: the graph is this CPU's saved copy.

    Throughput defaults: one batch at a time using every intra-op thread; one inter-op thread
    (the graphs are chains); denormals flushed, which costs no accuracy here. On the CPU the
    memory pattern is off: with it, the arena keeps the first run's activations and then a
    second block of the same size for the pattern (about 55 MiB more per ResNet50 batch-8
    session), which several instances on one machine pay each.
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    # The saved CPU copy already has every optimisation for this CPU; optimising it again
    # would copy its mapped weights onto the heap.
    options.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        if optimized
        else ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    )
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.inter_op_num_threads = 1
    if threads is not None:
        options.intra_op_num_threads = threads
    if os.environ.get(BUDGET_ENV):
        # an emulated instance under a CPU budget (emulation/cpu_budget.py): a thread that spins
        # while it waits spends the budget the computing threads need
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.set_denormal_as_zero", "1")
    if provider_for(spec) == CPU_PROVIDER:
        options.enable_mem_pattern = False
    options.log_severity_level = 3
    return options


def _save_cpu_copy(spec: EngineSpec, engine_path: str | os.PathLike[str], folder: Path) -> None:
    """Save the engine with every optimisation for this CPU, its weights in a file to map."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.optimized_model_filepath = str(folder / MODEL_NAME)
    options.add_session_config_entry(
        "session.optimized_model_external_initializers_file_name", WEIGHTS_NAME
    )
    options.add_session_config_entry(
        "session.optimized_model_external_initializers_min_size_in_bytes", str(EXTERNAL_MIN_BYTES)
    )
    # Pre-packed GEMM weights go to the mapped file too, instead of each session's heap.
    options.add_session_config_entry("session.save_external_prepacked_constant_initializers", "1")
    options.log_severity_level = 3
    _new_session(spec, engine_path, options)


class OnnxRuntimeBackend(Backend):
    """An ONNX Runtime session on the provider the spec asks for."""

    name = "onnxruntime"
    framework = "ONNX Runtime"
    system_token = "ORT"
    engine_suffix = ".onnx"
    auto_chooses = True
    listing_order = 20

    def __init__(
        self,
        *,
        spec: EngineSpec,
        session: ort.InferenceSession,
        threads: int | None,
        model_path: str | os.PathLike[str],
    ) -> None:
        self._spec = spec
        self.model_path = Path(model_path)  # the file the session loaded
        self._benchmark = spec.benchmark
        self._session: ort.InferenceSession | None = session
        self._threads = threads
        if self._benchmark.generates_tokens:
            # a decoder step: every output of the graph (logits and the KV cache), one session
            # run a step (the batch's requests share their cache tensors)
            self._output_names = [o.name for o in session.get_outputs()]
            self.samples_per_run: int | None = None
        else:
            self._output_names = list(self._benchmark.output_names())
            self.samples_per_run = samples_per_run(spec, threads)

    @classmethod
    def framework_text(cls, device: DeviceReport) -> str:
        """ONNX Runtime and its version, with the execution provider it ran on."""
        return f"{super().framework_text(device)} ({device.provider})"

    @classmethod
    def availability(cls) -> str | None:
        try:
            import onnxruntime  # noqa: F401
        except ImportError as exc:
            return f"onnxruntime is not installed ({exc}); pip install onnxruntime"
        return None

    @classmethod
    def version(cls) -> str | None:
        import onnxruntime as ort

        return ort.__version__

    @classmethod
    def install_status(cls, *, has_gpu: bool, gpu_fix: str) -> InstallStatus:
        """Installed, its execution providers, and with a GPU: whether CUDA is one of them."""
        reason = cls.availability()
        if reason is not None:
            return InstallStatus(
                name=cls.name, version=None, ok=False, detail=reason, fix="pip install -e ."
            )
        import onnxruntime as ort

        detail = "providers " + ", ".join(ort.get_available_providers())
        if has_gpu and CUDA_PROVIDER not in ort.get_available_providers():
            return InstallStatus(
                name=cls.name,
                version=ort.__version__,
                ok=False,
                detail=detail + f" (no {CUDA_PROVIDER} for the GPU)",
                fix=gpu_fix,
            )
        return InstallStatus(
            name=cls.name, version=ort.__version__, ok=True, detail=detail, runs_on_gpu=has_gpu
        )

    @classmethod
    def precisions(cls, spec: EngineSpec) -> tuple[str, ...]:
        if provider_for(spec) == CUDA_PROVIDER:
            return ("fp16", "fp32")
        return ("fp32", "int8") if spec.benchmark.int8_on_cpu else ("fp32",)

    @classmethod
    def build(
        cls, spec: EngineSpec, onnx_path: str | os.PathLike[str], out_path: str | os.PathLike[str]
    ) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        # EXTENDED fusions are provider-specific but not CPU-model-specific; the layout passes
        # of ENABLE_ALL depend on the exact CPU and run on the machine that loads the engine.
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        options.optimized_model_filepath = str(out_path)
        options.log_severity_level = 3
        _new_session(spec, onnx_path, options)

    @classmethod
    def _open(
        cls, spec: EngineSpec, engine_path: Path | None, *, threads: int | None
    ) -> OnnxRuntimeBackend:
        assert engine_path is not None  # load passes the file of a backend with an engine_suffix
        shared = None
        if provider_for(spec) == CPU_PROVIDER:
            shared = shared_model(
                engine_path, lambda folder: _save_cpu_copy(spec, engine_path, folder)
            )
        model_path = shared or engine_path
        options = session_options(spec, threads=threads, optimized=shared is not None)
        session = _new_session(spec, model_path, options)
        backend = cls(spec=spec, session=session, threads=threads, model_path=model_path)
        log.info(
            "loaded %s on %s (threads %s, at most %s samples per run)",
            model_path,
            provider_for(spec),
            threads or "auto",
            backend.samples_per_run or "all",
        )
        return backend

    @property
    def benchmark(self) -> Workload:
        return self._benchmark

    @property
    def device(self) -> DeviceReport:
        provider = provider_for(self._spec)
        if provider == CPU_PROVIDER:
            device = "cpu"
        else:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
            device = visible or "cuda:0"
        return DeviceReport(
            backend=self.name,
            provider=provider,
            device=device,
            threads=self._threads,
            version=self.version(),
        )

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        session = self._session
        if session is None:
            raise RuntimeError("run() on a closed ONNX Runtime backend")
        count = len(next(iter(feeds.values())))
        step = self.samples_per_run
        if step is None or count <= step:
            return self._run_once(session, feeds)
        parts = [
            self._run_once(session, {name: a[i : i + step] for name, a in feeds.items()})
            for i in range(0, count, step)
        ]
        return {name: np.concatenate([p[name] for p in parts]) for name in self._output_names}

    def _run_once(
        self, session: ort.InferenceSession, feeds: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        outputs: list[np.ndarray] = session.run(self._output_names, dict(feeds))
        return dict(zip(self._output_names, outputs))

    def close(self) -> None:
        self._session = None
