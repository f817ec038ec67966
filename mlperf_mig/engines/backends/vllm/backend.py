"""The vLLM backend: a generative workload (llama3.1-8b) on one MIG slice, one engine per process.

Loading checks what can be checked before minutes go into starting vLLM: the workload streams
tokens, the model folder, and that the slice holds the model (settings.py); and it binds the
slice. `token_generator` (what the harness asks a backend for, harness/instance.py) then starts
the engine sized for the test's batch and new tokens and hands out its `VllmGenerator`
(generator.py), which the SUT steps token by token. `run` is the whole-batch form of the same
engine, as the MLPerf reference's Offline SUT uses vLLM: padded prompts in, answers out.

Its limits come from the slice the spec names (settings.py), never from what vLLM reads of the
parent GPU; without `--model` it runs vLLM's dummy weights on the generated Llama-3.1-8B config
(model.py), so a performance run needs no download. vllm is imported only where it runs.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from mlperf_mig.engines.backend import Backend, DeviceReport, InstallStatus
from mlperf_mig.engines.backends.vllm.generator import VllmGenerator, load_generator
from mlperf_mig.engines.backends.vllm.model import VllmModel
from mlperf_mig.engines.backends.vllm.settings import (
    DEFAULT_MAX_MODEL_LEN,
    VLLM_PRECISIONS,
    VllmSettings,
    apply_worker_environment,
    bind_slice,
    check_precision,
    settings_for_profile,
    vllm_settings,
)
from mlperf_mig.errors import PlacementError, WorkloadError
from mlperf_mig.workloads import Workload
from mlperf_mig.workloads.llama3_1_8b.shape import DecoderShape

if TYPE_CHECKING:
    from mlperf_mig.engines.spec import EngineSpec

log = logging.getLogger(__name__)

# vLLM's wheels on PyPI are CUDA 12.9 builds (its installation guide); a CUDA 13 driver runs them
# too. vLLM pins its own PyTorch: a separate environment keeps it from replacing the project's.
VLLM_INSTALL = {
    12: "pip install vllm --extra-index-url https://download.pytorch.org/whl/cu129",
    13: "pip install vllm --extra-index-url https://download.pytorch.org/whl/cu129",
}
_NEEDS_DRIVER = "vLLM's wheels need a driver of CUDA 12.9 or later (R575+); update the driver"

# The token-stream interface (workloads/llama3_1_8b/interface.py, harness/token_sut.py): prompts
# right-padded in `input_ids` with their lengths in `input_length`; answers right-padded with
# PAD_TOKEN in `output_ids`.
PROMPT_IDS = "input_ids"
PROMPT_LENGTH = "input_length"
OUTPUT_IDS = "output_ids"
PAD_TOKEN = 0


def vllm_install_command(cuda_major: int | None) -> str | None:
    """The pip line that installs vLLM for a driver of `cuda_major`; None for a driver too old."""
    if cuda_major is None:
        return VLLM_INSTALL[max(VLLM_INSTALL)]
    if cuda_major < min(VLLM_INSTALL):
        return None
    return VLLM_INSTALL[min(cuda_major, max(VLLM_INSTALL))]


def driver_cuda_major() -> int | None:
    """The CUDA major the NVIDIA driver supports (NVML, no CUDA context); None without a driver."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        return int(pynvml.nvmlSystemGetCudaDriverVersion()) // 1000
    except pynvml.NVMLError:
        return None
    finally:
        pynvml.nvmlShutdown()


def nvml_gpu_count() -> int:
    """GPUs NVML sees (0 without a driver): asked in the parent, where CUDA must not start."""
    try:
        import pynvml
    except ImportError:
        return 0
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return 0
    try:
        return int(pynvml.nvmlDeviceGetCount())
    except pynvml.NVMLError:
        return 0
    finally:
        pynvml.nvmlShutdown()


def availability_reason(
    find_spec: Callable[[str], object | None] = importlib.util.find_spec,
    gpu_count: Callable[[], int] = nvml_gpu_count,
) -> str | None:
    """None when vllm is installed and NVML sees a GPU, else why the backend cannot run.

    Looked up without importing vllm (its import takes seconds and loads PyTorch)."""
    if find_spec("vllm") is None:
        return "vllm is not installed; `mlperf-mig doctor` prints the command for this driver"
    if gpu_count() < 1:
        return "no NVIDIA GPU (NVML finds none); vLLM runs on GPUs only"
    return None


def installed_version() -> str | None:
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None


def slice_settings(
    spec: EngineSpec,
    shape: DecoderShape,
    *,
    max_model_len: int = DEFAULT_MAX_MODEL_LEN,
    max_num_seqs: int | None = None,
) -> VllmSettings:
    """The vLLM settings for a model of `shape` on the GPU and MIG profile `spec` names, with
    `max_num_seqs` (default: the spec's largest batch size); PlacementError when the slice cannot
    hold the weights and one `max_model_len` sequence."""
    from mlperf_mig.registry import default_catalog

    check_precision(spec.precision)
    if spec.gpu is None:
        raise PlacementError(
            "vLLM sizes its batch and memory from the slice it runs on, and this request names "
            "no GPU; run on a MIG GPU (or pass --gpu and the profile)"
        )
    gpu = default_catalog().get(spec.gpu)
    seqs = max_num_seqs or spec.max_batch_size
    if spec.mig_profile is not None:
        return settings_for_profile(
            gpu.profile(spec.mig_profile),
            gpu=gpu.name,
            shape=shape,
            precision=spec.precision,
            max_model_len=max_model_len,
            max_num_seqs=seqs,
        )
    if gpu.memory_gib is None:
        raise PlacementError(f"the memory of the {gpu.name} is not in the registry")
    return vllm_settings(
        memory_gib=gpu.memory_gib,
        compute_slices=gpu.compute_slices,
        shape=shape,
        precision=spec.precision,
        max_model_len=max_model_len,
        max_num_seqs=seqs,
        where=f"a whole {gpu.name}",
    )


def _model(spec: EngineSpec) -> VllmModel:
    """The user's model folder, or the generated Llama-3.1-8B config for dummy weights."""
    if spec.model_path is not None:
        return VllmModel.from_dir(spec.model_path)
    if spec.variant != "full":
        raise WorkloadError(
            f"the {spec.variant} variant is the generated ONNX decoder, which ONNX Runtime runs; "
            "vLLM runs the full Llama-3.1-8B shape (--variant full) or --model"
        )
    return VllmModel.generated()


def longest_prompt(benchmark: Workload) -> int:
    """The most prompt tokens a sample holds: the width of the workload's `input_ids`."""
    for tensor in benchmark.inputs:
        if tensor.name == PROMPT_IDS and len(tensor.shape) == 2:
            return tensor.sample_shape[0]
    raise WorkloadError(
        f"{benchmark.name} has no {PROMPT_IDS} input of prompt rows; vLLM takes token-id prompts"
    )


class VllmBackend(Backend):
    """The slice bound to this process, ready to start a vLLM engine on it."""

    name = "vllm"
    framework = "vLLM"
    needs_gpu = True
    listing_order = 25
    # It answers with token streams, through `token_generator`.
    generates_tokens: ClassVar[bool] = True

    def __init__(
        self,
        *,
        spec: EngineSpec,
        model: VllmModel,
        device: DeviceReport,
    ) -> None:
        self._spec = spec
        self._model = model
        self._device = device
        self._generator: VllmGenerator | None = None

    # --- the class side ------------------------------------------------------------------------
    @classmethod
    def availability(cls) -> str | None:
        return availability_reason()

    @classmethod
    def version(cls) -> str | None:
        return installed_version()

    @classmethod
    def install_status(cls, *, has_gpu: bool, gpu_fix: str) -> InstallStatus:
        """Installed or not; without vLLM on a GPU machine, the pip line for the driver's CUDA
        (`gpu_fix` installs TensorRT and ONNX Runtime, not vLLM)."""
        version = cls.version()
        if not has_gpu:
            detail = (
                "installed; no GPU here" if version else "not installed; only of use with a GPU"
            )
            return InstallStatus(name=cls.name, version=version, ok=False, detail=detail)
        reason = cls.availability()
        if reason is None:
            return InstallStatus(
                name=cls.name, version=version, ok=True, detail="runs here", runs_on_gpu=True
            )
        command = vllm_install_command(driver_cuda_major())
        return InstallStatus(
            name=cls.name,
            version=version,
            ok=False,
            detail=reason if command else f"{reason}; {_NEEDS_DRIVER}",
            fix=command,
        )

    @classmethod
    def precisions(cls, spec: EngineSpec) -> tuple[str, ...]:
        """vLLM's precisions that an engine spec can name (bf16 and fp8 once it knows them)."""
        from mlperf_mig.engines.spec import PRECISIONS

        return tuple(p for p in VLLM_PRECISIONS if p in PRECISIONS)

    @classmethod
    def _open(
        cls, spec: EngineSpec, engine_path: Path | None, *, threads: int | None
    ) -> VllmBackend:
        """Check the workload, the model and the slice's fit, then set this process up for vLLM
        on the slice (settings.py: worker_environment, bind_slice); the engine starts in
        `token_generator`. `threads` has no meaning on a GPU."""
        benchmark = spec.benchmark
        if not benchmark.generates_tokens:
            raise WorkloadError(
                f"vLLM generates tokens; {benchmark.name} answers in one piece: use --backend "
                "tensorrt or onnxruntime for it"
            )
        model = _model(spec)
        new_tokens = benchmark.response.shape[0]
        settings = slice_settings(
            spec, model.shape, max_model_len=longest_prompt(benchmark) + new_tokens
        )
        apply_worker_environment()
        device = bind_slice() or "cuda:0"
        log.info("vLLM backend on %s: %s", device, settings.describe())
        report = DeviceReport(
            backend=cls.name, provider="vllm", device=device, version=cls.version()
        )
        return cls(spec=spec, model=model, device=report)

    # --- the instance side ---------------------------------------------------------------------
    @property
    def benchmark(self) -> Workload:
        return self._spec.benchmark

    @property
    def device(self) -> DeviceReport:
        return self._device

    def token_generator(self, *, max_new_tokens: int, max_batch: int) -> VllmGenerator:
        """Start the engine for at most `max_batch` requests at once of the workload's longest
        prompt plus `max_new_tokens`, and hand out its generator (the caller closes it). One
        engine per process: a generator still open is closed first."""
        self._close_generator()
        settings = slice_settings(
            self._spec,
            self._model.shape,
            max_model_len=longest_prompt(self.benchmark) + max_new_tokens,
            max_num_seqs=max_batch,
        )
        self._generator = load_generator(self._model, settings, max_new_tokens=max_new_tokens)
        return self._generator

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Generate every answer of a batch to its end: `input_ids` [batch, width] right-padded
        with `input_length` [batch] in, `output_ids` [batch, new tokens] right-padded out. Starts
        the engine (the workload's new tokens, the spec's batch) unless a generator is open."""
        generator = self._generator
        if generator is None or generator.closed:
            generator = self.token_generator(
                max_new_tokens=self.benchmark.response.shape[0],
                max_batch=self._spec.max_batch_size,
            )
        return generate_batch(generator, feeds)

    def _close_generator(self) -> None:
        if self._generator is not None:
            self._generator.close()
            self._generator = None

    def close(self) -> None:
        self._close_generator()


def generate_batch(
    generator: VllmGenerator, feeds: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """`run`'s work: add every prompt of the batch, step until all finish, pad the answers."""
    try:
        ids, lengths = np.asarray(feeds[PROMPT_IDS]), np.asarray(feeds[PROMPT_LENGTH])
    except KeyError as exc:
        raise WorkloadError(
            f"a vLLM batch needs {PROMPT_IDS} and {PROMPT_LENGTH}; {exc.args[0]!r} is missing"
        ) from None
    if ids.ndim != 2 or lengths.shape != ids.shape[:1]:
        raise WorkloadError(
            f"{PROMPT_IDS} must be [batch, width] and {PROMPT_LENGTH} [batch]; got "
            f"{ids.shape} and {lengths.shape}"
        )
    if np.any(lengths < 1) or np.any(lengths > ids.shape[1]):
        raise WorkloadError(f"{PROMPT_LENGTH} must lie in 1..{ids.shape[1]}, got {lengths}")
    if generator.pending:
        raise WorkloadError(f"a batch run while {generator.pending} requests are streaming")
    for row, length in enumerate(lengths):
        generator.add(row, ids[row, : int(length)])
    out = np.full((len(ids), generator.max_new_tokens), PAD_TOKEN, dtype=np.int32)
    while generator.pending:
        for event in generator.step():
            if event.finished and event.tokens is not None:
                out[event.request, : len(event.tokens)] = event.tokens
    return {OUTPUT_IDS: out}
