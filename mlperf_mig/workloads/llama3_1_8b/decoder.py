"""A generated Llama-architecture decoder (ONNX, opset 23) with a KV cache, and its sizing.

The graph is Llama 3.1's: token embeddings, then per layer RMSNorm -> grouped-query attention
(rotary embeddings on queries and keys, the cache appended to) -> residual -> RMSNorm -> SwiGLU
MLP -> residual, then a final RMSNorm and an untied LM head. It uses the opset 23 operators
`RMSNormalization`, `RotaryEmbedding` and `Attention` (onnxruntime runs them on the CPU since
1.23; reference/llm.md section 3), with deterministic weights from a seeded numpy Generator.

Its interface is the one of an optimum / onnxruntime-genai export of a Llama decoder, so that a
user's export runs through the same generator (generate.py); B is the batch, S the new tokens, P
the cached ones (0 at the prefill: a cache with a length-0 axis):
- inputs `input_ids` [B, S] int64, `position_ids` [B, S] int64 (each row's own positions: left
  padding shifts none), `attention_mask` [B, P + S] int64 (1: a token, 0: padding), and
  `past_key_values.{i}.key` / `.value` [B, kv_heads, P, head_dim] float32 for each layer i;
- outputs `logits` [B, S, vocab_size] float32 (every position: the KV-cache test compares them
  with a recomputation; the generator reads the last) and `present.{i}.key` / `.value`
  [B, kv_heads, P + S, head_dim] float32, the cache to pass back as `past_key_values` next step.

A key is attended to when its `attention_mask` is 1 and it is not after the query (causal); a
query also always sees its own key, so that a padding row has something to attend to (the
kernel's answer to a fully masked row differs between runtimes) and stays finite: its output is
never read and the mask hides its cache entries from real tokens.

The shapes it builds (`TINY`, and the 8B `FULL` it refuses to generate) and their sizes are in
shape.py.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper

from mlperf_mig.errors import WorkloadError
from mlperf_mig.workloads.llama3_1_8b.shape import DecoderShape, weight_bytes
from mlperf_mig.workloads.onnx_graph import PRODUCER, GraphBuilder

OPSET = 23  # Attention, RMSNormalization and RotaryEmbedding
GRAPH_NAME = "llama_decoder"

INPUT_IDS = "input_ids"
POSITION_IDS = "position_ids"
ATTENTION_MASK = "attention_mask"
LOGITS = "logits"

# The largest model build_decoder generates in memory: a protobuf message holds at most 2 GiB.
MAX_GENERATED_BYTES = 1 << 30


def past_key(layer: int) -> str:
    return f"past_key_values.{layer}.key"


def past_value(layer: int) -> str:
    return f"past_key_values.{layer}.value"


def present_key(layer: int) -> str:
    return f"present.{layer}.key"


def present_value(layer: int) -> str:
    return f"present.{layer}.value"


def rope_frequencies(shape: DecoderShape) -> np.ndarray:
    """The rotary inverse frequencies (float64, head_dim / 2 of them), scaled as Llama 3.1 does
    where the shape says so."""
    exponents = np.arange(0, shape.head_dim, 2, dtype=np.float64) / shape.head_dim
    frequencies = shape.rope_theta**-exponents
    scaling = shape.rope_scaling
    if scaling is None:
        return frequencies
    wavelengths = 2 * math.pi / frequencies
    short = scaling.original_max_positions / scaling.high_freq_factor
    long = scaling.original_max_positions / scaling.low_freq_factor
    smooth = (scaling.original_max_positions / wavelengths - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor
    )
    between = (1 - smooth) * frequencies / scaling.factor + smooth * frequencies
    return np.where(
        wavelengths < short,
        frequencies,
        np.where(wavelengths > long, frequencies / scaling.factor, between),
    )


def rope_caches(shape: DecoderShape) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of every position's angles, float32 [max_positions, head_dim / 2]."""
    angles = np.outer(np.arange(shape.max_positions, dtype=np.float64), rope_frequencies(shape))
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def check_generated_size(shape: DecoderShape) -> None:
    """Refuse a shape too large to generate here (the full 8B: 32 GB of float32 weights)."""
    size = weight_bytes(shape, "fp32")
    if size > MAX_GENERATED_BYTES:
        raise WorkloadError(
            f"a decoder of {shape.parameters / 1e9:.2f}B parameters ({size / 2**30:.1f} GiB in "
            f"float32) is not generated on the CPU path (at most {MAX_GENERATED_BYTES >> 20} MiB); "
            "the full shape is for sizing and GPU backends: pass real weights, or use the tiny shape"
        )


class _Decoder:
    """Adds the decoder of `shape` to a builder; weights are drawn in graph order."""

    def __init__(self, b: GraphBuilder, shape: DecoderShape) -> None:
        self.b = b
        self.shape = shape

    def linear(self, x: str, cin: int, cout: int, name: str) -> str:
        # 1/sqrt(fan_in) keeps activations of order one, so that the greedy tokens of random
        # weights depend on the context (not only on the last token) and vary along a generation
        return self.b.node("MatMul", [x, self.weight(cin, cout, name)])

    def weight(self, cin: int, cout: int, name: str) -> str:
        return self.b.derived_const(self.b.draw((cin, cout), 1.0 / math.sqrt(cin)), name)

    def rms_norm(self, x: str, name: str) -> str:
        scale = self.b.derived_const(np.ones(self.shape.hidden, dtype=np.float32), name)
        return self.b.node(
            "RMSNormalization", [x, scale], axis=-1, epsilon=self.shape.rms_epsilon, stash_type=1
        )

    def mask(self) -> str:
        """bool [B, 1, S, P + S]: key t is visible to query s when it is a token and not after
        it (t <= P + s), or when it is the query's own key (t == P + s)."""
        b = self.b
        zero, one = b.const(np.array(0, dtype=np.int64)), b.const(np.array(1, dtype=np.int64))
        total = b.node("Squeeze", [b.node("Shape", [ATTENTION_MASK], start=1, end=2)])
        new = b.node("Squeeze", [b.node("Shape", [INPUT_IDS], start=1, end=2)])
        keys = b.node("Range", [zero, total, one])  # [T]
        queries = b.node("Range", [b.node("Sub", [total, new]), total, one])  # [S]
        queries = b.node("Unsqueeze", [queries, b.const(np.array([1]))])  # [S, 1]
        causal = b.node("LessOrEqual", [keys, queries])  # [S, T]
        own = b.node("Equal", [keys, queries])
        tokens = b.node("Cast", [ATTENTION_MASK], to=TensorProto.BOOL)
        tokens = b.node("Unsqueeze", [tokens, b.const(np.array([1, 2]))])  # [B, 1, 1, T]
        return b.node("Or", [b.node("And", [tokens, causal]), own])

    def attention(self, x: str, mask: str, cos: str, sin: str, layer: int) -> str:
        b, s = self.b, self.shape
        prefix = f"layers.{layer}.attn"
        q = self.linear(x, s.hidden, s.heads * s.head_dim, f"{prefix}.q")
        k = self.linear(x, s.hidden, s.kv_heads * s.head_dim, f"{prefix}.k")
        v = self.linear(x, s.hidden, s.kv_heads * s.head_dim, f"{prefix}.v")
        q = b.node("RotaryEmbedding", [q, cos, sin, POSITION_IDS], num_heads=s.heads)
        k = b.node("RotaryEmbedding", [k, cos, sin, POSITION_IDS], num_heads=s.kv_heads)
        context = b.fresh("attention")
        b.nodes.append(
            helper.make_node(
                "Attention",
                [q, k, v, mask, past_key(layer), past_value(layer)],
                [context, present_key(layer), present_value(layer)],
                name=context,
                q_num_heads=s.heads,
                kv_num_heads=s.kv_heads,
            )
        )
        return self.linear(context, s.heads * s.head_dim, s.hidden, f"{prefix}.o")

    def mlp(self, x: str, layer: int) -> str:
        b, s = self.b, self.shape
        prefix = f"layers.{layer}.mlp"
        gate = self.linear(x, s.hidden, s.intermediate, f"{prefix}.gate")
        up = self.linear(x, s.hidden, s.intermediate, f"{prefix}.up")
        swish = b.node("Mul", [gate, b.node("Sigmoid", [gate])])
        return self.linear(b.node("Mul", [swish, up]), s.intermediate, s.hidden, f"{prefix}.down")

    def add_graph(self) -> None:
        b, s = self.b, self.shape
        batch, new, total = "batch_size", "sequence_length", "total_sequence_length"
        b.add_input(INPUT_IDS, TensorProto.INT64, [batch, new])
        b.add_input(POSITION_IDS, TensorProto.INT64, [batch, new])
        b.add_input(ATTENTION_MASK, TensorProto.INT64, [batch, total])
        cache: list[int | str] = [batch, s.kv_heads, "past_sequence_length", s.head_dim]
        for layer in range(s.layers):
            b.add_input(past_key(layer), TensorProto.FLOAT, cache)
            b.add_input(past_value(layer), TensorProto.FLOAT, cache)

        embeddings = b.draw((s.vocab_size, s.hidden), 1.0)
        x = b.node("Gather", [b.derived_const(embeddings, "embed_tokens"), INPUT_IDS])
        cos_cache, sin_cache = rope_caches(s)
        cos, sin = b.derived_const(cos_cache, "rope.cos"), b.derived_const(sin_cache, "rope.sin")
        mask = self.mask()
        for layer in range(s.layers):
            attended = self.attention(
                self.rms_norm(x, f"layers.{layer}.attn_norm"), mask, cos, sin, layer
            )
            x = b.node("Add", [x, attended])
            x = b.node("Add", [x, self.mlp(self.rms_norm(x, f"layers.{layer}.mlp_norm"), layer)])
        x = self.rms_norm(x, "norm")
        if s.tied_embeddings:
            head = b.node("Transpose", ["embed_tokens"], perm=[1, 0])
            b.named_node("MatMul", [x, head], LOGITS)
        else:
            b.named_node("MatMul", [x, self.weight(s.hidden, s.vocab_size, "lm_head")], LOGITS)
        b.add_output(LOGITS, TensorProto.FLOAT, [batch, new, s.vocab_size])
        present: list[int | str] = [batch, s.kv_heads, total, s.head_dim]
        for layer in range(s.layers):
            b.add_output(present_key(layer), TensorProto.FLOAT, present)
            b.add_output(present_value(layer), TensorProto.FLOAT, present)


def build_decoder(shape: DecoderShape, *, seed: int = 0) -> onnx.ModelProto:
    """The decoder of `shape` with weights drawn from numpy's Generator seeded with `seed`
    (the same model for the same shape and seed, on every machine)."""
    check_generated_size(shape)
    builder = GraphBuilder(precision="fp32", seed=seed)
    _Decoder(builder, shape).add_graph()
    graph = helper.make_graph(
        builder.nodes, GRAPH_NAME, builder.inputs, builder.outputs, initializer=builder.initializers
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name=PRODUCER,
        doc_string=(
            f"Llama-architecture decoder ({shape.layers} layers, hidden {shape.hidden}, vocabulary "
            f"{shape.vocab_size}, seed {seed}), synthetic weights from mlperf-mig"
        ),
    )
    model.ir_version = helper.find_min_ir_version_for(model.opset_import)
    return model
