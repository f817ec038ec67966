"""ResNet50-v1.5 with the official MLPerf interface and synthetic weights.

v1.5 puts the stride of a downsampling bottleneck on its 3x3 convolution (v1 had it on the first
1x1). Batch normalisation is folded into the convolution biases, as inference engines do anyway.
Class 0 of the 1001 outputs is the background class of the TensorFlow original.
"""

from __future__ import annotations

import math

import attrs
from onnx import TensorProto

from mlperf_mig.workloads.onnx_graph import GraphBuilder, GraphGenerator
from mlperf_mig.workloads.resnet50.interface import INPUTS, OUTPUTS

NUM_CLASSES = OUTPUTS[1].sample_shape[0]
_IMAGE_SHAPE = INPUTS[0].sample_shape
# The last convolution of each residual branch starts small (like a zero-initialised final batch
# norm), so that the synthetic activations neither explode in fp16 nor vanish.
_BRANCH_GAIN = 0.2


@attrs.frozen(kw_only=True)
class ResNetShape:
    stem_width: int
    widths: tuple[int, ...]  # bottleneck widths per stage; the output has 4x as many channels
    blocks: tuple[int, ...]  # bottlenecks per stage


SHAPES = {
    "full": ResNetShape(stem_width=64, widths=(64, 128, 256, 512), blocks=(3, 4, 6, 3)),
    "tiny": ResNetShape(stem_width=8, widths=(8, 16, 32, 64), blocks=(1, 1, 1, 1)),
}


def _conv(
    b: GraphBuilder, x: str, cin: int, cout: int, kernel: int, stride: int, *, gain: float = 1.0
) -> str:
    std = gain * math.sqrt(2.0 / (cin * kernel * kernel))
    weight = b.gemm_weight(b.draw((cout, cin, kernel, kernel), std), axis=0, prefix="conv_w")
    bias = b.weight(b.draw((cout,), 0.01), prefix="conv_b")
    pad = kernel // 2
    return b.node(
        "Conv",
        [b.quantized(x), weight, bias],
        kernel_shape=[kernel, kernel],
        strides=[stride, stride],
        pads=[pad, pad, pad, pad],
    )


def _bottleneck(b: GraphBuilder, x: str, cin: int, width: int, stride: int) -> str:
    cout = 4 * width
    y = b.node("Relu", [_conv(b, x, cin, width, 1, 1)])
    y = b.node("Relu", [_conv(b, y, width, width, 3, stride)])  # v1.5: the stride is here
    y = _conv(b, y, width, cout, 1, 1, gain=_BRANCH_GAIN)
    shortcut = x if (stride == 1 and cin == cout) else _conv(b, x, cin, cout, 1, stride)
    return b.node("Relu", [b.node("Add", [y, shortcut])])


def _add_resnet50(b: GraphBuilder, shape: ResNetShape) -> None:
    image = b.add_input(INPUTS[0].name, TensorProto.FLOAT, ["N", *_IMAGE_SHAPE])

    x = b.node("Relu", [_conv(b, b.to_float(image), 3, shape.stem_width, 7, 2)])
    x = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    channels = shape.stem_width
    for stage, (width, blocks) in enumerate(zip(shape.widths, shape.blocks)):
        for block in range(blocks):
            stride = 2 if (stage > 0 and block == 0) else 1
            x = _bottleneck(b, x, channels, width, stride)
            channels = 4 * width

    pooled = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    fc_w = b.gemm_weight(b.draw((channels, NUM_CLASSES), 0.01), axis=1, prefix="fc_w")
    fc_b = b.weight(b.draw((NUM_CLASSES,), 0.01), prefix="fc_b")
    logits = b.to_float32(b.node("Add", [b.node("MatMul", [b.quantized(pooled), fc_w]), fc_b]))

    argmax, softmax = OUTPUTS
    b.named_node("ArgMax", [logits], argmax.name, axis=1, keepdims=0)
    b.named_node("Softmax", [logits], softmax.name, axis=1)
    b.add_output(argmax.name, TensorProto.INT64, ["N"])
    b.add_output(softmax.name, TensorProto.FLOAT, ["N", NUM_CLASSES])


build_resnet50 = GraphGenerator(
    graph_name="resnet50_v1_5", title="ResNet50-v1.5", shapes=SHAPES, add_graph=_add_resnet50
)
