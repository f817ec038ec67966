"""vLLM on one MIG slice: its limits computed from the slice, and the process it needs.

vLLM does not support MIG (its maintainers: "use docker, device 0"), and reads the wrong device
in several places (reference/llm.md section 4). Everything a worker needs is therefore set here,
from the slice's own memory and compute, never from what vLLM reads of the parent GPU:

- `vllm_settings` gives `max_num_seqs`, `max_num_batched_tokens`, `max_model_len` and
  `gpu_memory_utilization` explicitly. vLLM's defaults for the first two depend on the device's
  memory as NVML reports it, which on a slice is the parent GPU's, or 0 where NVML is denied
  inside a MIG container: it then picks small-GPU values (28-53% less throughput on an H200
  2g.35gb, vllm #55381, #50463). It refuses, in one line, a slice that cannot hold the weights
  plus the KV cache of one full-length sequence (vLLM itself would fail after minutes of loading).
- `worker_environment` and `bind_slice` make the slice the worker's only device without the
  `CUDA_VISIBLE_DEVICES=MIG-<uuid>` crash (vllm #41848), and set the allocator MIG needs.

The memory model. vLLM gives the engine `gpu_memory_utilization` x the device's total memory (as
CUDA reports it, which on a slice is the slice's); weights, activations and what CUDA libraries
allocate come out of that budget, and the KV cache gets the rest. What it does not count stays
outside the budget: the CUDA context, and the CUDA graphs, captured after the KV cache is
allocated once vLLM's graph-memory estimate is switched off (below). So the utilization is
1 - (outside / slice memory), and the KV cache holds
budget - weights - activations - runtime reserve.
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Callable, MutableMapping
from typing import TYPE_CHECKING, Any

import attrs

from mlperf_mig.errors import BackendUnavailableError, PlacementError, PrecisionError
from mlperf_mig.workloads.llama3_1_8b.shape import (
    FULL,
    WEIGHT_BYTES,
    DecoderShape,
    kv_cache_bytes,
    weight_bytes,
)

if TYPE_CHECKING:
    from mlperf_mig.registry.model import Profile

log = logging.getLogger(__name__)

GIB = 1 << 30
# The precisions vLLM computes Llama in here; fp8 quantizes the linear weights (online from a
# BF16 or dummy checkpoint, layer by layer since vLLM #31914, or a pre-quantized checkpoint).
VLLM_PRECISIONS: tuple[str, ...] = ("bf16", "fp8", "fp16")
_DTYPE = {"bf16": "bfloat16", "fp8": "bfloat16", "fp16": "float16"}
# The reference tokenizer's model_max_length (8000) plus the 128 new tokens, rounded up.
DEFAULT_MAX_MODEL_LEN = 8192
# The values below are inferred (ours, not measured on a slice yet); the gpu-tier test and a run
# on a MIG GPU are what check them.
# Batch limits per compute slice of the profile (a 7g gets 7 times a 1g's), never the parent's;
# a caller (the workload's recipe batch) usually sets max_num_seqs itself.
SEQS_PER_COMPUTE_SLICE = 32
BATCHED_TOKENS_PER_COMPUTE_SLICE = 2048
MAX_BATCHED_TOKENS = 16384
# Outside vLLM's budget: the CUDA context and what vLLM does not count.
CONTEXT_RESERVE = 1 * GIB
# Outside the budget too: CUDA graphs, captured after the KV cache (vLLM logs 0.3-0.5 GiB for an
# 8B model with its default capture sizes, which stop at max_num_seqs).
CUDA_GRAPH_RESERVE = GIB // 2
# Inside the budget, beside the activations: cuBLAS and attention workspaces, sampler buffers.
RUNTIME_RESERVE = GIB // 2
# Never more of a large slice: vLLM refuses to start when the budget exceeds the free memory.
MAX_UTILIZATION = 0.95
LOGITS_BYTES = 4  # the sampler works on fp32 logits


@attrs.frozen(kw_only=True)
class VllmSettings:
    """What vLLM is told for one slice, and the memory arithmetic behind it."""

    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    gpu_memory_utilization: float
    # CUDA graphs are kept (eager decoding is about 3x slower, vllm #40937) unless the slice can
    # hold a full-length sequence only without their reserve.
    enforce_eager: bool
    dtype: str  # vLLM's dtype: "bfloat16" or "float16"
    quantization: str | None  # "fp8" or None
    precision: str
    memory_bytes: int  # the slice's memory
    weight_bytes: int
    kv_bytes_per_token: int
    kv_cache_tokens: int  # tokens the KV cache holds (every running sequence together)

    def engine_kwargs(self) -> dict[str, Any]:
        """The EngineArgs fields these settings fix."""
        return {
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_model_len": self.max_model_len,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "enforce_eager": self.enforce_eager,
            "dtype": self.dtype,
            "quantization": self.quantization,
        }

    def describe(self) -> str:
        """One line for logs and the plan: the limits and what the KV cache holds."""
        graphs = "eager" if self.enforce_eager else "CUDA graphs"
        return (
            f"vLLM {self.precision}: max_num_seqs {self.max_num_seqs}, max_num_batched_tokens "
            f"{self.max_num_batched_tokens}, max_model_len {self.max_model_len}, "
            f"gpu_memory_utilization {self.gpu_memory_utilization:.3f}, {graphs}; weights "
            f"{self.weight_bytes / GIB:.1f} GiB, KV cache {self.kv_cache_tokens} tokens "
            f"of {self.memory_bytes / GIB:.1f} GiB"
        )


def check_precision(precision: str) -> None:
    if precision not in VLLM_PRECISIONS:
        raise PrecisionError(
            f"vLLM runs Llama in {', '.join(VLLM_PRECISIONS)}, not {precision!r}; "
            "pass --precision with one of them"
        )


def activation_bytes(shape: DecoderShape, *, batched_tokens: int, seqs: int) -> int:
    """The peak activations of one step: per scheduled token its hidden state, attention
    projections and the MLP's gate and up halves; per sequence its fp32 logits and probabilities."""
    per_token = 3 * shape.hidden + 2 * shape.intermediate
    per_token += (shape.heads + 2 * shape.kv_heads) * shape.head_dim
    return batched_tokens * per_token * 2 + seqs * shape.vocab_size * LOGITS_BYTES * 2


def vllm_settings(
    *,
    memory_gib: float,
    compute_slices: int,
    shape: DecoderShape = FULL,
    precision: str = "bf16",
    max_model_len: int = DEFAULT_MAX_MODEL_LEN,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    where: str = "this slice",
) -> VllmSettings:
    """The settings for a slice of `memory_gib` and `compute_slices`; PlacementError in one line
    when it cannot hold the weights at `precision` plus the KV cache of one `max_model_len`
    sequence. `where` names the slice in that message ("H200 1g.18gb")."""
    check_precision(precision)
    if compute_slices < 1 or max_model_len < 2 or not memory_gib > 0:
        raise ValueError(
            f"compute_slices {compute_slices}, max_model_len {max_model_len} and memory "
            f"{memory_gib} GiB must be positive (max_model_len at least 2)"
        )
    seqs = max_num_seqs if max_num_seqs is not None else SEQS_PER_COMPUTE_SLICE * compute_slices
    if seqs < 1:
        raise ValueError(f"max_num_seqs must be positive, got {seqs}")
    tokens = max_num_batched_tokens
    if tokens is None:
        tokens = min(BATCHED_TOKENS_PER_COMPUTE_SLICE * compute_slices, MAX_BATCHED_TOKENS)
    # vLLM schedules at most max_num_batched_tokens a step, and each running sequence takes one
    tokens = max(tokens, seqs)
    memory = int(memory_gib * GIB)
    weights = weight_bytes(shape, precision)
    per_token = kv_cache_bytes(shape, 1)
    inside = weights + activation_bytes(shape, batched_tokens=tokens, seqs=seqs) + RUNTIME_RESERVE
    one_sequence = per_token * max_model_len

    def kv_bytes(outside: int) -> tuple[float, int]:
        utilization = min(MAX_UTILIZATION, 1 - outside / memory)
        return utilization, int(utilization * memory) - inside

    eager = False
    utilization, kv = kv_bytes(CONTEXT_RESERVE + CUDA_GRAPH_RESERVE)
    if kv < one_sequence:
        eager = True
        utilization, kv = kv_bytes(CONTEXT_RESERVE)
    if kv < one_sequence:
        budget = utilization * memory if utilization > 0 else 0
        raise PlacementError(
            f"Llama ({shape.parameters / 1e9:.1f}B) in {precision} does not fit {where} "
            f"({memory_gib:.1f} GiB): {weights / GIB:.1f} GiB of weights, "
            f"{one_sequence / GIB:.2f} GiB of KV cache for one {max_model_len}-token sequence "
            f"and {(inside - weights) / GIB:.1f} GiB of activations and workspaces need "
            f"{(inside + one_sequence) / GIB:.1f} GiB, but vLLM may use {budget / GIB:.1f} GiB "
            f"there; {_fit_hint(precision)}"
        )
    if eager:
        log.info("%s holds one full sequence only without CUDA graphs: vLLM runs eager", where)
    return VllmSettings(
        max_num_seqs=seqs,
        max_num_batched_tokens=tokens,
        max_model_len=max_model_len,
        gpu_memory_utilization=round(utilization, 4),
        enforce_eager=eager,
        dtype=_DTYPE[precision],
        quantization="fp8" if precision == "fp8" else None,
        precision=precision,
        memory_bytes=memory,
        weight_bytes=weights,
        kv_bytes_per_token=per_token,
        kv_cache_tokens=kv // per_token,
    )


def _fit_hint(precision: str) -> str:
    smaller = " use --precision fp8 or" if WEIGHT_BYTES[precision] > WEIGHT_BYTES["fp8"] else ""
    return f"{smaller} choose a profile with more memory, or a shorter max_model_len".lstrip()


def settings_for_profile(
    profile: Profile,
    *,
    gpu: str = "",
    shape: DecoderShape = FULL,
    precision: str = "bf16",
    max_model_len: int = DEFAULT_MAX_MODEL_LEN,
    max_num_seqs: int | None = None,
) -> VllmSettings:
    """`vllm_settings` for a registry profile: its memory and compute slices (the slice's own)."""
    if profile.memory_gib is None:
        raise PlacementError(
            f"the memory of {gpu} {profile.name} is unknown (not in the registry, and no live "
            "MIG device reported it); run on the GPU, where NVML reports it".lstrip()
        )
    where = f"{gpu} {profile.name}".strip()
    return vllm_settings(
        memory_gib=profile.memory_gib,
        compute_slices=profile.compute_slices,
        shape=shape,
        precision=precision,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        where=where,
    )


# --- the worker process ----------------------------------------------------------------------
VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"


def worker_environment(device_uuid: str | None) -> dict[str, str]:
    """The environment a vLLM worker on one slice starts with (each setting says what it avoids).

    `device_uuid` is the slice's `MIG-<uuid>` (or a whole GPU's `GPU-<uuid>`); the worker then
    calls `bind_slice` before it creates the engine.
    """
    environment = {
        # PyTorch's caching allocator asserts on MIG with expandable segments (reference/llm.md 4).
        ALLOC_CONF: "expandable_segments:False",
        # The engine core runs in this process: a child process would start CUDA afresh under the
        # index "0" that bind_slice leaves behind, which there means another device than the slice.
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        # vLLM's CUDA-graph memory estimate ignores the slice's memory (vllm #40937) and fails
        # the start on a slice; the graphs' memory is reserved outside the budget instead
        # (CUDA_GRAPH_RESERVE), so graphs stay on rather than forcing eager mode (~3x slower).
        "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0",
        # A benchmark worker reaches nothing outside: no model download, no usage report.
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    if device_uuid is not None:
        # The slice is the process's only visible device (what the runner does for every worker).
        environment[VISIBLE_DEVICES] = device_uuid
    return environment


def apply_worker_environment(environ: MutableMapping[str, str] | None = None) -> None:
    """Put `worker_environment`'s settings into this process (before vllm and PyTorch start);
    other PyTorch allocator options a user set are kept beside expandable_segments:False."""
    env = os.environ if environ is None else environ
    wanted = worker_environment(None)
    alloc = wanted.pop(ALLOC_CONF)
    kept = [
        option
        for option in env.get(ALLOC_CONF, "").split(",")
        if option.strip() and not option.strip().startswith("expandable_segments")
    ]
    env[ALLOC_CONF] = ",".join([*kept, alloc])
    env.update(wanted)


def _cuda_driver_device_count() -> int:
    """cuInit, then the number of devices the driver shows this process (libcuda through ctypes:
    no PyTorch import, no context)."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise BackendUnavailableError(f"the CUDA driver cannot be loaded ({exc})") from None
    status = cuda.cuInit(0)
    if status != 0:
        raise BackendUnavailableError(
            f"cuInit failed with CUDA error {status}; check that {os.environ.get(VISIBLE_DEVICES)}"
            " names an existing, healthy MIG device"
        )
    count = ctypes.c_int(0)
    status = cuda.cuDeviceGetCount(ctypes.byref(count))
    if status != 0:
        raise BackendUnavailableError(f"cuDeviceGetCount failed with CUDA error {status}")
    return count.value


def bind_slice(
    environ: MutableMapping[str, str] | None = None,
    device_count: Callable[[], int] = _cuda_driver_device_count,
) -> str | None:
    """Make the slice named by CUDA_VISIBLE_DEVICES=<MIG-uuid> device 0 of this process, in a way
    vLLM can read; the UUID, or None where CUDA_VISIBLE_DEVICES holds an index or nothing.

    vLLM calls int() on each CUDA_VISIBLE_DEVICES entry and crashes on `MIG-<uuid>` (vllm #41848,
    unfixed as of its 2026 releases). The CUDA driver reads the variable once, when it starts: so
    the driver is started here with the UUID (the slice is then the process's only device, index
    0), and the variable is rewritten to "0" for vLLM. The engine must stay in this process
    (VLLM_ENABLE_V1_MULTIPROCESSING=0, worker_environment). Call it before the engine is created.
    """
    env = os.environ if environ is None else environ
    entries = [e.strip() for e in env.get(VISIBLE_DEVICES, "").split(",") if e.strip()]
    if not entries or all(e.isdigit() for e in entries):
        return None
    if len(entries) != 1:
        raise BackendUnavailableError(
            f"{VISIBLE_DEVICES} names {len(entries)} devices ({', '.join(entries)}); a vLLM "
            "worker runs on one slice: give it one MIG-<uuid>"
        )
    count = device_count()
    if count != 1:
        raise BackendUnavailableError(
            f"with {VISIBLE_DEVICES}={entries[0]} the CUDA driver shows {count} devices, not the "
            "one slice; check the UUID with nvidia-smi -L"
        )
    env[VISIBLE_DEVICES] = "0"
    log.info("bound to %s as CUDA device 0 (vLLM cannot read a MIG UUID, vllm #41848)", entries[0])
    return entries[0]
