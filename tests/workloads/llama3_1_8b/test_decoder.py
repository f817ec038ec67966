"""The generated Llama decoder: its interface, its numerics against numpy, its KV cache, its
sizing, and the shape it refuses to generate."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import attrs
import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from mlperf_mig.errors import WorkloadError
from mlperf_mig.workloads.llama3_1_8b.decoder import (
    build_decoder,
    past_key,
    past_value,
    present_key,
    present_value,
    rope_frequencies,
)
from mlperf_mig.workloads.llama3_1_8b.shape import (
    FULL,
    TINY,
    DecoderShape,
    kv_cache_bytes,
    weight_bytes,
)

RunGraph = Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]


def _feeds(
    shape: DecoderShape,
    ids: np.ndarray,
    *,
    positions: np.ndarray | None = None,
    mask: np.ndarray | None = None,
    past: list[np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """Feeds for `ids` [B, S] after the cache `past` (empty when None), no padding by default."""
    batch, new = ids.shape
    cached = 0 if past is None else past[0].shape[2]
    if past is None:
        past = [np.zeros((batch, shape.kv_heads, 0, shape.head_dim), np.float32)] * (
            2 * shape.layers
        )
    feeds = {
        "input_ids": ids.astype(np.int64),
        "position_ids": (
            positions
            if positions is not None
            else np.tile(np.arange(cached, cached + new), (batch, 1))
        ),
        "attention_mask": mask if mask is not None else np.ones((batch, cached + new), np.int64),
    }
    for layer in range(shape.layers):
        feeds[past_key(layer)] = past[2 * layer]
        feeds[past_value(layer)] = past[2 * layer + 1]
    return feeds


def _presents(shape: DecoderShape, outputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    return [
        outputs[name(layer)]
        for layer in range(shape.layers)
        for name in (present_key, present_value)
    ]


# --- a numpy reference --------------------------------------------------------------------------


def _rms_norm(x: np.ndarray, scale: np.ndarray, epsilon: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + epsilon) * scale


def _rotate(x: np.ndarray, positions: np.ndarray, shape: DecoderShape) -> np.ndarray:
    """Llama's rotary embedding (halves, not interleaved) of x [B, S, heads, head_dim]."""
    angles = positions[..., None] * rope_frequencies(shape)  # [B, S, head_dim / 2]
    cos, sin = np.cos(angles)[:, :, None, :], np.sin(angles)[:, :, None, :]
    first, second = np.split(x, 2, axis=-1)
    return np.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1)


def _reference_logits(
    model: onnx.ModelProto, shape: DecoderShape, ids: np.ndarray, mask: np.ndarray
) -> np.ndarray:
    """The decoder recomputed in float64 numpy from the model's weights, for left-padded `ids`
    with no cache; positions count each row's tokens."""
    w = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    batch, new = ids.shape
    positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0)
    visible = (mask[:, None, None, :] == 1) & np.tril(np.ones((new, new), bool))
    visible |= np.eye(new, dtype=bool)
    group = shape.heads // shape.kv_heads
    x = w["embed_tokens"][ids]
    for layer in range(shape.layers):
        p = f"layers.{layer}"
        h = _rms_norm(x, w[f"{p}.attn_norm"], shape.rms_epsilon)
        q = (h @ w[f"{p}.attn.q"]).reshape(batch, new, shape.heads, shape.head_dim)
        k = (h @ w[f"{p}.attn.k"]).reshape(batch, new, shape.kv_heads, shape.head_dim)
        v = (h @ w[f"{p}.attn.v"]).reshape(batch, new, shape.kv_heads, shape.head_dim)
        q, k = _rotate(q, positions, shape), _rotate(k, positions, shape)
        k, v = np.repeat(k, group, axis=2), np.repeat(v, group, axis=2)  # query head -> KV head
        scores = np.einsum("bshd,bthd->bhst", q, k) / math.sqrt(shape.head_dim)
        scores = np.where(visible, scores, -np.inf)
        weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights /= weights.sum(axis=-1, keepdims=True)
        context = np.einsum("bhst,bthd->bshd", weights, v).reshape(batch, new, -1)
        x = x + context @ w[f"{p}.attn.o"]
        h = _rms_norm(x, w[f"{p}.mlp_norm"], shape.rms_epsilon)
        gate = h @ w[f"{p}.mlp.gate"]
        swish = gate / (1 + np.exp(-gate))
        x = x + (swish * (h @ w[f"{p}.mlp.up"])) @ w[f"{p}.mlp.down"]
    return _rms_norm(x, w["norm"], shape.rms_epsilon) @ w["lm_head"]


# --- tests --------------------------------------------------------------------------------------


def test_tiny_decoder_has_the_export_interface(tiny_model: onnx.ModelProto) -> None:
    """The tiny decoder's inputs and outputs are named like an optimum export of Llama."""
    layers = range(TINY.layers)
    inputs = [i.name for i in tiny_model.graph.input]
    outputs = [o.name for o in tiny_model.graph.output]
    assert inputs == ["input_ids", "position_ids", "attention_mask"] + [
        n for i in layers for n in (f"past_key_values.{i}.key", f"past_key_values.{i}.value")
    ]
    assert outputs == ["logits"] + [
        n for i in layers for n in (f"present.{i}.key", f"present.{i}.value")
    ]
    onnx.checker.check_model(tiny_model, full_check=True)


def test_tiny_decoder_runs_in_onnxruntime(tiny_run: RunGraph) -> None:
    """A prefill of a batch of 2 gives finite logits and a cache of the prompt's length."""
    ids = np.random.default_rng(0).integers(0, TINY.vocab_size, (2, 7))
    outputs = tiny_run(_feeds(TINY, ids))
    assert outputs["logits"].shape == (2, 7, TINY.vocab_size)
    assert outputs["logits"].dtype == np.float32
    assert np.isfinite(outputs["logits"]).all()
    assert outputs["present.1.value"].shape == (2, TINY.kv_heads, 7, TINY.head_dim)


def test_same_seed_same_model() -> None:
    """The same shape and seed give the same bytes; another seed other weights."""
    shape = attrs.evolve(TINY, vocab_size=64, max_positions=32)
    first = build_decoder(shape, seed=0).SerializeToString()
    assert build_decoder(shape, seed=0).SerializeToString() == first
    assert build_decoder(shape, seed=1).SerializeToString() != first


def test_decoder_matches_a_numpy_reference(
    make_run: Callable[[onnx.ModelProto], RunGraph],
) -> None:
    """One layer (RMSNorm, rotary, grouped-query attention, SwiGLU) with a left-padded row
    equals a float64 numpy recomputation on every real position."""
    shape = attrs.evolve(TINY, layers=1, max_positions=64)
    model = build_decoder(shape, seed=3)
    rng = np.random.default_rng(1)
    ids = rng.integers(0, shape.vocab_size, (2, 9))
    mask = np.ones((2, 9), np.int64)
    mask[1, :4] = 0  # the second row holds 5 tokens, left-padded
    positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0)
    logits = make_run(model)(_feeds(shape, ids, positions=positions, mask=mask))["logits"]
    expected = _reference_logits(model, shape, ids, mask)
    real = mask == 1
    np.testing.assert_allclose(logits[real], expected[real], rtol=1e-4, atol=1e-4)


def test_cache_equals_recomputing_the_sequence(tiny_run: RunGraph) -> None:
    """A prefill of 8 tokens then 4 through the cache gives the logits and cache of the 12
    tokens computed at once."""
    ids = np.random.default_rng(2).integers(0, TINY.vocab_size, (2, 12))
    whole = tiny_run(_feeds(TINY, ids))
    head = tiny_run(_feeds(TINY, ids[:, :8]))
    tail = tiny_run(_feeds(TINY, ids[:, 8:], past=_presents(TINY, head)))
    np.testing.assert_allclose(tail["logits"], whole["logits"][:, 8:], rtol=1e-4, atol=1e-5)
    for cached, computed in zip(_presents(TINY, tail), _presents(TINY, whole)):
        np.testing.assert_allclose(cached, computed, rtol=1e-5, atol=1e-6)


def test_left_padding_leaves_a_row_unchanged(tiny_run: RunGraph) -> None:
    """A prompt left-padded beside a longer one has the logits it has alone."""
    rng = np.random.default_rng(4)
    short, long = rng.integers(0, TINY.vocab_size, 5), rng.integers(0, TINY.vocab_size, 11)
    alone = tiny_run(_feeds(TINY, short[None]))["logits"][0]
    ids = np.stack([np.concatenate([np.zeros(6, np.int64), short]), long])
    mask = np.ones((2, 11), np.int64)
    mask[0, :6] = 0
    positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0)
    padded = tiny_run(_feeds(TINY, ids, positions=positions, mask=mask))["logits"][0, 6:]
    np.testing.assert_allclose(padded, alone, rtol=1e-5, atol=1e-5)


def test_full_shape_is_not_generated_on_the_cpu() -> None:
    """Building the 8B decoder is refused in one line before any weight is drawn."""
    with pytest.raises(WorkloadError, match="not generated on the CPU path") as refused:
        build_decoder(FULL)
    assert "\n" not in str(refused.value)


def test_full_shape_has_llama_3_1_8b_parameters() -> None:
    """The full shape counts Llama-3.1-8B's 8,030,261,248 weights: about 16 GB in BF16."""
    assert FULL.parameters == 8_030_261_248
    assert weight_bytes(FULL, "bf16") == 2 * FULL.parameters
    assert 15.5e9 < weight_bytes(FULL, "bf16") < 16.5e9


def test_fp8_quantizes_the_linear_weights_only() -> None:
    """FP8 halves the layers' linear weights; the embeddings, LM head and norms stay 16-bit, so
    the 8B model is about 9.1 GB in FP8, not 8.0."""
    others = FULL.parameters - FULL.linear_parameters
    assert FULL.linear_parameters < FULL.parameters
    assert weight_bytes(FULL, "fp8") == FULL.linear_parameters + 2 * others
    assert round(weight_bytes(FULL, "fp8") / 1e9, 1) == 9.1
    assert weight_bytes(TINY, "fp32") == 4 * TINY.parameters


def test_weight_bytes_refuses_a_precision_it_cannot_size() -> None:
    with pytest.raises(ValueError, match="'int3' cannot be sized; expected one of fp32"):
        weight_bytes(FULL, "int3")


def test_full_kv_cache_is_128_kib_per_token() -> None:
    """32 layers x 8 KV heads x 128 x (key, value) x 2 bytes = 128 KiB a token."""
    assert kv_cache_bytes(FULL, 1, 2) == 128 * 1024
    assert kv_cache_bytes(FULL, 8 * 1024, 2) == 1 << 30


def test_llama3_rope_scaling_keeps_high_and_divides_low_frequencies() -> None:
    """Llama 3.1's scaling keeps the fastest rotation and divides the slowest by its factor."""
    unscaled = rope_frequencies(attrs.evolve(FULL, rope_scaling=None))
    scaled = rope_frequencies(FULL)
    assert scaled[0] == unscaled[0]
    assert scaled[-1] == pytest.approx(unscaled[-1] / 8)
    assert (scaled <= unscaled).all()


def test_heads_must_share_kv_heads_evenly() -> None:
    """A shape whose query heads do not divide into its KV heads is refused."""
    with pytest.raises(ValueError, match="multiple of kv_heads"):
        attrs.evolve(TINY, heads=6, kv_heads=4)


def test_end_tokens_must_be_in_the_vocabulary() -> None:
    """A shape whose end token lies outside its vocabulary is refused."""
    with pytest.raises(ValueError, match="outside the vocabulary"):
        attrs.evolve(TINY, eos_token_id=TINY.vocab_size)


def test_tied_embeddings_share_the_lm_head(
    make_run: Callable[[onnx.ModelProto], RunGraph],
) -> None:
    """A tied decoder reads its LM head from the embeddings and counts them once."""
    shape = attrs.evolve(TINY, vocab_size=64, max_positions=32, tied_embeddings=True)
    model = build_decoder(shape)
    assert "lm_head" not in {t.name for t in model.graph.initializer}
    assert shape.parameters == attrs.evolve(shape, tied_embeddings=False).parameters - 64 * 128
    logits = make_run(model)(_feeds(shape, np.arange(5)[None]))["logits"]
    assert logits.shape == (1, 5, 64)
