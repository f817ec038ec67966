"""A small ONNX graph builder shared by the ResNet50 and BERT generators.

One builder writes the same graph in three precisions from the same random draws:
- fp32: float32 weights and compute.
- fp16: float16 weights and compute; the callers cast at the interface, so the official float32
  / int64 inputs and outputs are kept.
- int8: float32 graph in which every convolution and fully connected layer reads its activation
  through QuantizeLinear -> DequantizeLinear (symmetric, per tensor) and its weight as an int8
  initializer through DequantizeLinear (symmetric, per output channel): the explicit quantization
  TensorRT builds INT8 engines from.

Activation scales of the int8 graph come from `act_amax`, the largest magnitude each quantized
tensor reached in a calibration run of the fp32 graph (see models.py). The builder names tensors by
a counter that Q/DQ nodes do not advance, so a tensor has the same name in every precision.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
PRODUCER = "mlperf-mig"

_FLOAT_TYPES = {"fp32": TensorProto.FLOAT, "fp16": TensorProto.FLOAT16, "int8": TensorProto.FLOAT}
_NUMPY_FLOATS = {"fp32": np.float32, "fp16": np.float16, "int8": np.float32}


def pow2_amax(amax: float) -> float:
    """Round a calibrated range up to a power of two, so that tiny numeric noise between machines
    does not change the generated file."""
    return float(2.0 ** math.ceil(math.log2(max(amax, 2.0**-20))))


class GraphBuilder:
    """Accumulates nodes and initializers; deterministic for a given seed and call sequence."""

    def __init__(
        self, *, precision: str, seed: int, act_amax: Mapping[str, float] | None = None
    ) -> None:
        if precision == "int8" and act_amax is None:
            raise ValueError("an int8 graph needs the calibrated activation ranges (act_amax)")
        self.precision = precision
        self.float_type = _FLOAT_TYPES[precision]
        self.np_float = _NUMPY_FLOATS[precision]
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self.quant_points: list[str] = []  # tensors read through Q/DQ in the int8 graph
        self._act_amax = act_amax or {}
        self._counter = itertools.count()
        self._dequantized: dict[str, str] = {}

    # --- names and plumbing ---------------------------------------------------------------
    def fresh(self, prefix: str) -> str:
        return f"{prefix}_{next(self._counter)}"

    def node(self, op: str, inputs: Sequence[str], **attrs) -> str:
        """Add a node with one output; returns the output's name."""
        return self.node_multi(op, inputs, 1, **attrs)[0]

    def node_multi(self, op: str, inputs: Sequence[str], n_out: int, **attrs) -> list[str]:
        """Add a node with `n_out` outputs; returns their names."""
        outs = [self.fresh(op.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=outs[0], **attrs))
        return outs

    def named_node(self, op: str, inputs: Sequence[str], output: str, **attrs) -> str:
        """Add a node whose output has a fixed (interface) name."""
        self.nodes.append(helper.make_node(op, list(inputs), [output], name=output, **attrs))
        return output

    def const(self, array: np.ndarray, prefix: str = "const") -> str:
        """An initializer stored exactly as given (shapes, indices, interface-typed constants)."""
        name = self.fresh(prefix)
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def derived_const(self, array: np.ndarray | np.generic, name: str) -> str:
        """An initializer named after another tensor; does not advance the counter, so the
        int8-only constants leave every other name as in the fp32 graph."""
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def float_const(self, value: float | np.ndarray, prefix: str = "const") -> str:
        """A constant in the graph's compute type."""
        return self.const(np.asarray(value, dtype=self.np_float), prefix)

    # --- weights ------------------------------------------------------------------------------
    def draw(self, shape: Sequence[int], std: float) -> np.ndarray:
        """Deterministic float32 weights N(0, std^2); every precision draws the same numbers."""
        return (self.rng.standard_normal(tuple(shape), dtype=np.float32) * np.float32(std)).astype(
            np.float32, copy=False
        )

    def weight(self, array: np.ndarray, prefix: str = "w") -> str:
        """A float weight, stored in the compute type (biases, embeddings, norms)."""
        return self.const(array.astype(self.np_float, copy=False), prefix)

    def gemm_weight(self, array: np.ndarray, *, axis: int, prefix: str = "w") -> str:
        """A convolution or matmul weight: int8 + per-channel DequantizeLinear in the int8 graph."""
        if self.precision != "int8":
            return self.weight(array, prefix)
        reduce_axes = tuple(a for a in range(array.ndim) if a != axis)
        amax = np.abs(array).max(axis=reduce_axes)
        scale = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
        shape = [1] * array.ndim
        shape[axis] = -1
        q = np.clip(np.rint(array / scale.reshape(shape)), -127, 127).astype(np.int8)
        name = self.fresh(prefix)
        self.initializers.append(numpy_helper.from_array(q, name))
        scale_name = self.derived_const(scale, f"{name}_scale")
        zero_name = self.derived_const(np.zeros(scale.shape, dtype=np.int8), f"{name}_zero")
        out = f"{name}_dq"
        self.nodes.append(
            helper.make_node(
                "DequantizeLinear", [name, scale_name, zero_name], [out], name=out, axis=axis
            )
        )
        return out

    def quantized(self, x: str) -> str:
        """The activation `x` as a gemm reads it: through Q/DQ in the int8 graph, else as is."""
        if x not in self.quant_points:
            self.quant_points.append(x)
        if self.precision != "int8":
            return x
        if x in self._dequantized:
            return self._dequantized[x]
        try:
            amax = self._act_amax[x]
        except KeyError:
            raise ValueError(f"no calibrated range for tensor {x!r}") from None
        scale = self.derived_const(np.float32(pow2_amax(amax) / 127.0), f"{x}_scale")
        zero = self.derived_const(np.int8(0), f"{x}_zero")
        q, dq = f"{x}_q", f"{x}_dq"
        self.nodes.append(helper.make_node("QuantizeLinear", [x, scale, zero], [q], name=q))
        self.nodes.append(helper.make_node("DequantizeLinear", [q, scale, zero], [dq], name=dq))
        self._dequantized[x] = dq
        return dq

    # --- interface --------------------------------------------------------------------------------
    def add_input(self, name: str, elem_type: int, shape: Sequence[int | str]) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem_type, list(shape)))
        return name

    def add_output(self, name: str, elem_type: int, shape: Sequence[int | str]) -> None:
        self.outputs.append(helper.make_tensor_value_info(name, elem_type, list(shape)))

    def to_float(self, x: str) -> str:
        """Cast an interface float32 tensor into the compute type (no-op unless fp16)."""
        if self.float_type == TensorProto.FLOAT:
            return x
        return self.node("Cast", [x], to=self.float_type)

    def to_float32(self, x: str) -> str:
        """Cast a compute-type tensor back to float32 for the interface (no-op unless fp16)."""
        if self.float_type == TensorProto.FLOAT:
            return x
        return self.node("Cast", [x], to=TensorProto.FLOAT)

    def model(self, graph_name: str, doc: str) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, graph_name, self.inputs, self.outputs, initializer=self.initializers
        )
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", OPSET)],
            producer_name=PRODUCER,
            doc_string=doc,
        )
        model.ir_version = 8
        return model


@attrs.frozen(kw_only=True)
class GraphGenerator:
    """One generated model: its name, its shapes per variant and the function that adds its graph.

    `add_graph(builder, shape)` adds the inputs, layers and outputs; calling the generator with
    variant, precision, seed and (for int8) act_amax returns the model and the names of the
    tensors that the int8 graph quantizes.
    """

    graph_name: str
    title: str  # opens the model's doc string
    shapes: Mapping[str, Any]
    add_graph: Callable[[GraphBuilder, Any], None]

    def __call__(
        self,
        *,
        variant: str,
        precision: str,
        seed: int,
        act_amax: Mapping[str, float] | None = None,
    ) -> tuple[onnx.ModelProto, list[str]]:
        builder = GraphBuilder(precision=precision, seed=seed, act_amax=act_amax)
        self.add_graph(builder, self.shapes[variant])
        doc = (
            f"{self.title} ({variant}, {precision}, seed {seed}), synthetic weights from mlperf-mig"
        )
        return builder.model(self.graph_name, doc), list(builder.quant_points)
