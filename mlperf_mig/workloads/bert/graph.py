"""BERT-Large for SQuAD v1.1 with the official MLPerf interface and synthetic weights.

Inputs `input_ids`, `input_mask`, `segment_ids` (int64 [batch, seq]) and outputs
`output_start_logits`, `output_end_logits` (float32 [batch, seq]). Both axes are dynamic in the
graph, so that TensorRT can build optimisation profiles for sequence-length buckets; the
benchmark feeds 384. The vocabulary is BERT's 30522 WordPiece tokens in every variant, so that
real SQuAD features run through the tiny graph too.
"""

from __future__ import annotations

import math

import attrs
import numpy as np
from onnx import TensorProto

from mlperf_mig.workloads.bert.interface import INPUTS, OUTPUTS
from mlperf_mig.workloads.onnx_graph import GraphBuilder, GraphGenerator

VOCAB_SIZE = 30522
MAX_POSITIONS = 512
TYPE_VOCAB_SIZE = 2
_INIT_STD = 0.02
_LN_EPSILON = 1e-12
_MASK_VALUE = -10000.0
_DIMS = ["batch_size", "seq_len"]


@attrs.frozen(kw_only=True)
class BertShape:
    layers: int
    hidden: int
    heads: int
    intermediate: int


SHAPES = {
    "full": BertShape(layers=24, hidden=1024, heads=16, intermediate=4096),
    "tiny": BertShape(layers=2, hidden=64, heads=2, intermediate=256),
}


def _dense(b: GraphBuilder, x: str, cin: int, cout: int) -> str:
    weight = b.gemm_weight(b.draw((cin, cout), _INIT_STD), axis=1, prefix="dense_w")
    bias = b.weight(np.zeros(cout, dtype=np.float32), prefix="dense_b")
    return b.node("Add", [b.node("MatMul", [b.quantized(x), weight]), bias])


def _layer_norm(b: GraphBuilder, x: str, hidden: int) -> str:
    gamma = b.weight(np.ones(hidden, dtype=np.float32), prefix="ln_g")
    beta = b.weight(np.zeros(hidden, dtype=np.float32), prefix="ln_b")
    return b.node("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=_LN_EPSILON)


def _heads(b: GraphBuilder, x: str, shape: BertShape, perm: list[int]) -> str:
    split = b.const(np.array([0, 0, shape.heads, shape.hidden // shape.heads]), "shape")
    return b.node("Transpose", [b.node("Reshape", [x, split])], perm=perm)


def _attention(b: GraphBuilder, x: str, mask: str, shape: BertShape) -> str:
    q = _heads(b, _dense(b, x, shape.hidden, shape.hidden), shape, [0, 2, 1, 3])
    k = _heads(b, _dense(b, x, shape.hidden, shape.hidden), shape, [0, 2, 3, 1])
    v = _heads(b, _dense(b, x, shape.hidden, shape.hidden), shape, [0, 2, 1, 3])
    scale = b.float_const(1.0 / math.sqrt(shape.hidden // shape.heads))
    scores = b.node("Add", [b.node("Mul", [b.node("MatMul", [q, k]), scale]), mask])
    context = b.node("MatMul", [b.node("Softmax", [scores], axis=-1), v])
    merge = b.const(np.array([0, 0, shape.hidden]), "shape")
    context = b.node("Reshape", [b.node("Transpose", [context], perm=[0, 2, 1, 3]), merge])
    return _dense(b, context, shape.hidden, shape.hidden)


def _gelu(b: GraphBuilder, x: str) -> str:
    erf = b.node("Erf", [b.node("Div", [x, b.float_const(math.sqrt(2.0))])])
    half = b.node("Mul", [x, b.float_const(0.5)])
    return b.node("Mul", [half, b.node("Add", [erf, b.float_const(1.0)])])


def _encoder_layer(b: GraphBuilder, x: str, mask: str, shape: BertShape) -> str:
    x = _layer_norm(b, b.node("Add", [_attention(b, x, mask, shape), x]), shape.hidden)
    hidden = _gelu(b, _dense(b, x, shape.hidden, shape.intermediate))
    return _layer_norm(
        b, b.node("Add", [_dense(b, hidden, shape.intermediate, shape.hidden), x]), shape.hidden
    )


def _embeddings(b: GraphBuilder, ids: str, segments: str, shape: BertShape) -> str:
    word = b.weight(b.draw((VOCAB_SIZE, shape.hidden), _INIT_STD), prefix="word_emb")
    position = b.weight(b.draw((MAX_POSITIONS, shape.hidden), _INIT_STD), prefix="pos_emb")
    token_type = b.weight(b.draw((TYPE_VOCAB_SIZE, shape.hidden), _INIT_STD), prefix="type_emb")
    seq_len = b.node("Shape", [ids], start=1, end=2)
    positions = b.node("Slice", [position, b.const(np.array([0])), seq_len, b.const(np.array([0]))])
    summed = b.node(
        "Add", [b.node("Gather", [word, ids]), b.node("Gather", [token_type, segments])]
    )
    return _layer_norm(b, b.node("Add", [summed, positions]), shape.hidden)


def _attention_bias(b: GraphBuilder, input_mask: str) -> str:
    """0 where a token may be attended to, -10000 on padding; shaped [batch, 1, 1, seq]."""
    keep = b.node("Cast", [input_mask], to=b.float_type)
    padding = b.node("Sub", [b.float_const(1.0), keep])
    bias = b.node("Mul", [padding, b.float_const(_MASK_VALUE)])
    return b.node("Unsqueeze", [bias, b.const(np.array([1, 2]))])


def _add_bert(b: GraphBuilder, shape: BertShape) -> None:
    ids, mask, segments = (b.add_input(t.name, TensorProto.INT64, _DIMS) for t in INPUTS)

    x = _embeddings(b, ids, segments, shape)
    attention_bias = _attention_bias(b, mask)
    for _ in range(shape.layers):
        x = _encoder_layer(b, x, attention_bias, shape)

    logits = _dense(b, x, shape.hidden, 2)
    start, end = b.node_multi("Split", [logits, b.const(np.array([1, 1]))], 2, axis=-1)
    squeeze_axis = b.const(np.array([-1]))
    for tensor, spec in zip((start, end), OUTPUTS):
        squeezed = b.to_float32(b.node("Squeeze", [tensor, squeeze_axis]))
        b.named_node("Identity", [squeezed], spec.name)
        b.add_output(spec.name, TensorProto.FLOAT, _DIMS)


build_bert = GraphGenerator(
    graph_name="bert_squad", title="BERT-Large SQuAD", shapes=SHAPES, add_graph=_add_bert
)
