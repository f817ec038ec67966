"""vLLM's limits per slice, the fit refusal, and the worker process a slice needs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mlperf_mig.engines.backends.vllm.settings import (
    CONTEXT_RESERVE,
    CUDA_GRAPH_RESERVE,
    GIB,
    MAX_UTILIZATION,
    RUNTIME_RESERVE,
    activation_bytes,
    apply_worker_environment,
    bind_slice,
    settings_for_profile,
    vllm_settings,
    worker_environment,
)
from mlperf_mig.errors import BackendUnavailableError, PlacementError, PrecisionError
from mlperf_mig.registry import default_catalog
from mlperf_mig.registry.model import Profile
from mlperf_mig.workloads.llama3_1_8b.shape import FULL, DecoderShape, kv_cache_bytes, weight_bytes


def _profile(gpu: str, name: str) -> Profile:
    return default_catalog().get(gpu).profile(name)


def test_vllm_sizes_the_workloads_own_shape() -> None:
    """vLLM's settings size the weights and the KV cache of the workload's 8B shape exactly as
    the plan's fit does (one shape, one rule): 16.1 GB in BF16, 9.1 GB in FP8, 128 KiB a token."""
    bf16 = vllm_settings(memory_gib=80.0, compute_slices=7)
    fp8 = vllm_settings(memory_gib=80.0, compute_slices=7, precision="fp8")
    assert (
        bf16.weight_bytes == weight_bytes(FULL, "bf16")
        and round(bf16.weight_bytes / 1e9, 1) == 16.1
    )
    assert fp8.weight_bytes == weight_bytes(FULL, "fp8") and round(fp8.weight_bytes / 1e9, 1) == 9.1
    assert bf16.kv_bytes_per_token == kv_cache_bytes(FULL, 1, 2) == 128 * 1024


def test_bf16_does_not_fit_an_h200_1g_18gb() -> None:
    """8B BF16 on an H200 1g.18gb is refused in one line that names the slice and fp8."""
    with pytest.raises(PlacementError) as caught:
        settings_for_profile(_profile("H200", "1g.18gb"), gpu="H200", precision="bf16")
    message = str(caught.value)
    assert "\n" not in message and "1g.18gb (16.0 GiB)" in message
    assert "15.0 GiB of weights" in message and "--precision fp8" in message


def test_fp8_fits_an_h200_1g_18gb() -> None:
    """8B FP8 fits an H200 1g.18gb with room for several full-length sequences."""
    settings = settings_for_profile(_profile("H200", "1g.18gb"), precision="fp8")
    assert settings.quantization == "fp8" and settings.kv_cache_tokens > 4 * 8192


@pytest.mark.parametrize(("gpu", "profile"), [("H200", "1g.35gb"), ("H100-SXM5-80GB", "3g.40gb")])
def test_bf16_fits_35_and_40_gb_slices(gpu: str, profile: str) -> None:
    """8B BF16 fits an H200 1g.35gb and an H100 3g.40gb (reference/llm.md section 4)."""
    assert settings_for_profile(_profile(gpu, profile), precision="bf16").kv_cache_tokens > 8192


def test_fp8_does_not_fit_an_h100_1g_10gb() -> None:
    """Even FP8 is refused on a 10 GB slice, without suggesting fp8 again."""
    with pytest.raises(PlacementError) as caught:
        settings_for_profile(_profile("H100-SXM5-80GB", "1g.10gb"), precision="fp8")
    assert "--precision fp8" not in str(caught.value)


def test_batch_limits_scale_with_the_slice_not_the_parent() -> None:
    """A 7g gets seven times a 1g's sequences and batched tokens on the same GPU."""
    small = settings_for_profile(_profile("H200", "1g.35gb"))
    whole = settings_for_profile(_profile("H200", "7g.141gb"))
    assert whole.max_num_seqs == 7 * small.max_num_seqs
    assert whole.max_num_batched_tokens == 7 * small.max_num_batched_tokens


def test_explicit_limits_are_kept() -> None:
    """A caller's max_num_seqs and max_model_len are used as given."""
    settings = vllm_settings(
        memory_gib=32.25, compute_slices=1, max_num_seqs=48, max_model_len=4096
    )
    assert (settings.max_num_seqs, settings.max_model_len) == (48, 4096)


def test_batched_tokens_cover_every_running_sequence() -> None:
    """max_num_batched_tokens is at least max_num_seqs (one decode token per sequence)."""
    settings = vllm_settings(
        memory_gib=69.5, compute_slices=1, max_num_seqs=3000, max_num_batched_tokens=256
    )
    assert settings.max_num_batched_tokens == 3000


def test_utilization_leaves_the_context_and_graphs_outside() -> None:
    """gpu_memory_utilization is the slice's memory less the context and graph reserves."""
    settings = vllm_settings(memory_gib=16.0, compute_slices=1, precision="fp8")
    expected = 1 - (CONTEXT_RESERVE + CUDA_GRAPH_RESERVE) / (16 * GIB)
    assert settings.gpu_memory_utilization == pytest.approx(expected, abs=1e-4)


def test_utilization_is_capped_on_large_slices() -> None:
    """On a large slice the utilization stops at MAX_UTILIZATION."""
    assert (
        vllm_settings(memory_gib=140.0, compute_slices=7).gpu_memory_utilization == MAX_UTILIZATION
    )


def test_kv_cache_gets_the_budget_less_weights_and_activations() -> None:
    """kv_cache_tokens is (budget - weights - activations - runtime reserve) / KV per token."""
    s = vllm_settings(memory_gib=32.0, compute_slices=1)
    acts = activation_bytes(FULL, batched_tokens=s.max_num_batched_tokens, seqs=s.max_num_seqs)
    budget = int(s.gpu_memory_utilization * 32 * GIB)
    kv = budget - s.weight_bytes - acts - RUNTIME_RESERVE
    assert abs(s.kv_cache_tokens - kv // s.kv_bytes_per_token) <= 1


def test_eager_only_where_graphs_leave_no_room_for_a_sequence() -> None:
    """CUDA graphs stay on; eager mode is chosen only when their reserve is what does not fit."""
    shape = DecoderShape(
        vocab_size=1000,
        hidden=512,
        layers=4,
        heads=8,
        kv_heads=8,
        head_dim=64,
        intermediate=1024,
        max_positions=1 << 17,
        rope_theta=10000.0,
        bos_token_id=0,
        eos_token_id=1,
    )
    options = {"shape": shape, "compute_slices": 1, "max_model_len": 1 << 16, "max_num_seqs": 1}
    inside = weight_bytes(shape, "bf16") + RUNTIME_RESERVE
    inside += activation_bytes(shape, batched_tokens=2048, seqs=1)
    needed = inside + kv_cache_bytes(shape, 1 << 16, 2) + CONTEXT_RESERVE
    roomy = vllm_settings(memory_gib=(needed + CUDA_GRAPH_RESERVE + GIB) / GIB, **options)
    tight = vllm_settings(memory_gib=(needed + CUDA_GRAPH_RESERVE // 2) / GIB, **options)
    assert not roomy.enforce_eager and tight.enforce_eager


def test_unknown_precision_is_refused() -> None:
    """vLLM here computes bf16, fp8 and fp16; int8 is refused naming them."""
    with pytest.raises(PrecisionError, match="bf16, fp8, fp16"):
        vllm_settings(memory_gib=80.0, compute_slices=7, precision="int8")


def test_profile_without_known_memory_is_refused() -> None:
    """A profile whose memory the registry lacks cannot be sized: one line says so."""
    import attrs

    profile = attrs.evolve(_profile("H200", "1g.18gb"), memory_gib=None)
    with pytest.raises(PlacementError, match=r"memory of H200 1g\.18gb is unknown"):
        settings_for_profile(profile, gpu="H200")


def test_worker_environment_has_the_slice_and_the_allocator_setting() -> None:
    """A worker sees only its slice, with expandable segments off and the engine in-process."""
    environment = worker_environment("MIG-1234")
    assert environment["CUDA_VISIBLE_DEVICES"] == "MIG-1234"
    assert environment["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:False"
    assert environment["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert environment["VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"] == "0"
    assert environment["HF_HUB_OFFLINE"] == "1"


def test_bind_slice_starts_the_driver_on_the_uuid_then_shows_vllm_index_0() -> None:
    """The driver starts while CUDA_VISIBLE_DEVICES holds the MIG UUID; vLLM then reads "0"."""
    environ = {"CUDA_VISIBLE_DEVICES": "MIG-abcd"}
    seen = []

    def device_count() -> int:
        seen.append(environ["CUDA_VISIBLE_DEVICES"])
        return 1

    assert bind_slice(environ, device_count) == "MIG-abcd"
    assert seen == ["MIG-abcd"] and environ["CUDA_VISIBLE_DEVICES"] == "0"


def test_bind_slice_leaves_an_index_alone() -> None:
    """An index (or nothing) needs no binding and starts no driver."""

    def no_driver() -> int:
        raise AssertionError("the driver was started")

    for value in ("0", ""):
        environ = {"CUDA_VISIBLE_DEVICES": value}
        assert bind_slice(environ, no_driver) is None and environ["CUDA_VISIBLE_DEVICES"] == value


def test_bind_slice_refuses_two_slices() -> None:
    """A worker runs on one slice: two UUIDs are refused in one line."""
    with pytest.raises(BackendUnavailableError, match="names 2 devices"):
        bind_slice({"CUDA_VISIBLE_DEVICES": "MIG-a,MIG-b"}, lambda: 2)


def test_bind_slice_refuses_a_uuid_the_driver_does_not_show() -> None:
    """A UUID that leaves the driver with no device is refused, pointing at nvidia-smi -L."""
    environ = {"CUDA_VISIBLE_DEVICES": "MIG-gone"}
    with pytest.raises(BackendUnavailableError, match=r"shows 0 devices.*nvidia-smi -L"):
        bind_slice(environ, lambda: 0)
    assert environ["CUDA_VISIBLE_DEVICES"] == "MIG-gone"


def test_applied_environment_keeps_other_allocator_options() -> None:
    """Applying the worker settings turns expandable segments off and keeps a user's other
    allocator options; the slice's CUDA_VISIBLE_DEVICES is left as the runner set it."""
    environ = {
        "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512,expandable_segments:True",
        "CUDA_VISIBLE_DEVICES": "MIG-1234",
    }
    apply_worker_environment(environ)
    assert environ["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:512,expandable_segments:False"
    assert environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert environ["CUDA_VISIBLE_DEVICES"] == "MIG-1234"


def test_bind_slice_refuses_a_uuid_no_driver_shows() -> None:
    """With the real driver call, a UUID of no device here is refused as BackendUnavailableError
    (no driver on a CPU machine, no such device on a GPU one). In a child process, so that the
    driver never starts in the test process."""
    script = (
        "from mlperf_mig.engines.backends.vllm.settings import bind_slice\n"
        "from mlperf_mig.errors import BackendUnavailableError\n"
        "try:\n"
        "    bind_slice({'CUDA_VISIBLE_DEVICES': 'MIG-00000000-0000-0000-0000-000000000000'})\n"
        "except BackendUnavailableError as exc:\n"
        "    print('refused:', exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("refused:") and done.stdout.count("\n") == 1
