"""The shape of a Llama decoder and what it weighs: the one description of the model that the
graph builder (decoder.py), the plan's fit (workload.py) and the vLLM backend all size from.

`TINY` runs in seconds on a CPU; its vocabulary (1024 tokens: 256 byte symbols, 2 special tokens
and the merges of the in-process BPE of tokenizer.py, begin-of-text 0 and end-of-text 1) is the
tokenizer's. `FULL` is Llama-3.1-8B-Instruct's shape, for sizing and for the GPU backends: it is
never generated here (16 GB of weights; a protobuf file holds at most 2 GB).

This module imports neither onnx nor onnxruntime: sizing a model needs no graph library.
"""

from __future__ import annotations

import math

import attrs


@attrs.frozen(kw_only=True)
class RopeScaling:
    """Llama 3.1's rotary frequency scaling (`rope_type` "llama3" in its config.json): long
    wavelengths are divided by `factor`, short ones kept, those between interpolated."""

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_positions: int


def _positive(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 1:
        raise ValueError(f"DecoderShape.{attribute.name} must be at least 1, got {value}")


@attrs.frozen(kw_only=True)
class DecoderShape:
    """The dimensions of a Llama decoder and the token ids its generation needs."""

    vocab_size: int = attrs.field(validator=_positive)
    hidden: int = attrs.field(validator=_positive)
    layers: int = attrs.field(validator=_positive)
    heads: int = attrs.field(validator=_positive)
    kv_heads: int = attrs.field(validator=_positive)
    head_dim: int = attrs.field(validator=_positive)
    intermediate: int = attrs.field(validator=_positive)
    max_positions: int = attrs.field(validator=_positive)
    rope_theta: float
    rope_scaling: RopeScaling | None = None
    rms_epsilon: float = 1e-5
    bos_token_id: int
    eos_token_id: int  # what the tokenizer calls its end token
    stop_token_ids: tuple[int, ...] = ()  # further ids that end a generation (generation_config)
    tied_embeddings: bool = False

    def __attrs_post_init__(self) -> None:
        if self.heads % self.kv_heads:
            raise ValueError(
                f"DecoderShape: {self.heads} query heads cannot share {self.kv_heads} KV heads "
                "evenly; heads must be a multiple of kv_heads"
            )
        if self.head_dim % 2:
            raise ValueError(
                f"DecoderShape: rotary embeddings need an even head_dim, got {self.head_dim}"
            )
        bad = [t for t in (self.bos_token_id, *self.end_ids) if not 0 <= t < self.vocab_size]
        if bad:
            raise ValueError(
                f"DecoderShape: token ids {bad} lie outside the vocabulary of {self.vocab_size}"
            )

    @property
    def end_ids(self) -> tuple[int, ...]:
        """Every id that ends a generation, the tokenizer's end token first."""
        return (self.eos_token_id, *self.stop_token_ids)

    @property
    def linear_parameters(self) -> int:
        """The layers' linear weights (attention projections and MLP): what a quantized
        precision quantizes."""
        attention = self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads)
        mlp = 3 * self.hidden * self.intermediate
        return self.layers * (attention + mlp)

    @property
    def parameters(self) -> int:
        """The number of weights (embeddings, layers, final norm, LM head)."""
        embeddings = self.vocab_size * self.hidden * (1 if self.tied_embeddings else 2)
        norms = (2 * self.layers + 1) * self.hidden
        return embeddings + self.linear_parameters + norms


# Seconds on a CPU; the vocabulary is the in-process tokenizer's (tokenizer.VOCAB_SIZE), and the
# positions cover the interface's longest prompt (3072) plus 128 new tokens.
TINY = DecoderShape(
    vocab_size=1024,
    hidden=128,
    layers=2,
    heads=4,
    kv_heads=2,
    head_dim=32,
    intermediate=256,
    max_positions=4096,
    rope_theta=10000.0,
    bos_token_id=0,
    eos_token_id=1,
)

# meta-llama/Llama-3.1-8B-Instruct (config.json, generation_config.json): the tokenizer's end
# token is <|eot_id|> 128009; generation also stops at <|end_of_text|> 128001 and <|eom_id|> 128008.
FULL = DecoderShape(
    vocab_size=128256,
    hidden=4096,
    layers=32,
    heads=32,
    kv_heads=8,
    head_dim=128,
    intermediate=14336,
    max_positions=131072,
    rope_theta=500000.0,
    rope_scaling=RopeScaling(
        factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_positions=8192
    ),
    bos_token_id=128000,
    eos_token_id=128009,
    stop_token_ids=(128001, 128008),
)


# Bytes of one weight at each precision the decoder is sized for.
WEIGHT_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
# A quantized precision applies to the layers' linear weights only: the embeddings, the LM head and
# the norms stay in 16 bits (vLLM's fp8, online or from a pre-quantized checkpoint, keeps them so).
QUANTIZED = frozenset({"fp8", "int8", "int4"})
UNQUANTIZED_BYTES = 2.0


def weight_bytes(shape: DecoderShape, precision: str) -> int:
    """Bytes of the weights at `precision` (one of WEIGHT_BYTES); ValueError naming them else."""
    if precision not in WEIGHT_BYTES:
        raise ValueError(
            f"precision {precision!r} cannot be sized; expected one of {', '.join(WEIGHT_BYTES)}"
        )
    per_weight = WEIGHT_BYTES[precision]
    if precision not in QUANTIZED:
        return math.ceil(shape.parameters * per_weight)
    others = shape.parameters - shape.linear_parameters
    return math.ceil(shape.linear_parameters * per_weight + others * UNQUANTIZED_BYTES)


# A KV-cache value on a GPU: bf16 / fp16 (vLLM's "auto" cache dtype, the activations' dtype).
KV_VALUE_BYTES = 2


def kv_cache_bytes(
    shape: DecoderShape, tokens: int, bytes_per_value: float = KV_VALUE_BYTES
) -> int:
    """Bytes of the KV cache holding `tokens` tokens (summed over the sequences of a batch):
    a key and a value per layer, KV head and head dimension."""
    per_token = 2 * shape.layers * shape.kv_heads * shape.head_dim * bytes_per_value
    return math.ceil(tokens * per_token)
