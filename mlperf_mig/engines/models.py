"""ONNX model files: generated graphs (cached by content hash) and user-supplied files (checked).

A generated graph is a pure function of (benchmark, variant, precision, seed, GENERATOR_VERSION),
so it is generated once per cache folder and identified everywhere else by the SHA-256 of its
bytes. A user file (the official resnet50_v1.onnx or BERT model.onnx, or the user's own export) is
hashed and its interface checked against the benchmark before anything is built from it.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
import numpy as np

from mlperf_mig.engines import cache
from mlperf_mig.errors import ModelFileError
from mlperf_mig.workloads import TensorSpec, Workload

# onnx (and ml_dtypes, which it imports) is imported where a graph is built, read or checked:
# about 0.5 s of import that every worker forked from the runner's fork server paid, also
# when every model and engine is in the cache already.
if TYPE_CHECKING:
    import onnx

log = logging.getLogger(__name__)

# Bump whenever a generator changes its output: cached graphs of older versions are regenerated.
GENERATOR_VERSION = 1

_CALIBRATION_BATCH = 2


@attrs.frozen(kw_only=True)
class ModelFile:
    """An ONNX file on disk with the SHA-256 of its bytes."""

    path: Path
    sha256: str
    benchmark: Workload
    precision: str  # "fp32", "fp16" or "int8" (Q/DQ): what the graph computes in
    generated: bool


def generate_model(
    benchmark: Workload, *, variant: str, precision: str, seed: int = 0
) -> onnx.ModelProto:
    """Build the synthetic graph in memory (no cache). int8 graphs are calibrated on the fp32 one."""
    act_amax = None
    if precision == "int8":
        fp32_model, quant_points = benchmark.build_graph(
            variant=variant, precision="fp32", seed=seed
        )
        act_amax = calibrate(fp32_model, quant_points, benchmark, seed=seed)
        del fp32_model  # BERT-Large: 1.3 GB that the int8 build does not need
    model, _ = benchmark.build_graph(
        variant=variant, precision=precision, seed=seed, act_amax=act_amax
    )
    return model


def calibrate(
    model: onnx.ModelProto, tensors: list[str], benchmark: Workload, *, seed: int
) -> dict[str, float]:
    """Largest magnitude of each of `tensors` in one fp32 run on synthetic inputs (ONNX Runtime)."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    for name in tensors:
        probe.graph.output.append(onnx.helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(
        probe.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    values = session.run(tensors, benchmark.calibration_feeds(_CALIBRATION_BATCH, seed))
    return {name: float(np.abs(v).max()) for name, v in zip(tensors, values)}


def generated_model(
    benchmark: Workload,
    *,
    variant: str,
    precision: str,
    seed: int = 0,
    cache_dir: str | os.PathLike[str] | None = None,
) -> ModelFile:
    """The cached synthetic graph, generated first if it is missing or damaged."""
    name = benchmark.name
    path = (
        cache.cache_root(cache_dir)
        / "models"
        / f"{name}-{variant}-{precision}-seed{seed}-g{GENERATOR_VERSION}.onnx"
    )
    made_from = {
        "benchmark": name,
        "variant": variant,
        "precision": precision,
        "seed": seed,
        "generator_version": GENERATOR_VERSION,
    }
    meta = cache.read_valid(path, made_from)
    if meta is None:
        log.info("generating %s %s %s graph (seed %d) in %s", name, variant, precision, seed, path)

        def write(tmp: Path) -> None:
            model = generate_model(benchmark, variant=variant, precision=precision, seed=seed)
            tmp.write_bytes(model.SerializeToString())

        meta = cache.write_cached(path, write, made_from)
    return ModelFile(
        path=path, sha256=meta["sha256"], benchmark=benchmark, precision=precision, generated=True
    )


def user_model(path: str | os.PathLike[str], benchmark: Workload) -> ModelFile:
    """A user-supplied ONNX file, after checking that it loads and has the benchmark's interface."""
    bench = benchmark
    model_path = Path(path).expanduser()
    model = load_model_file(model_path)
    check_interface(model, bench, where=str(model_path))
    return ModelFile(
        path=model_path,
        sha256=cache.sha256_file(model_path),
        benchmark=bench,
        precision=graph_precision(model),
        generated=False,
    )


def graph_precision(model: onnx.ModelProto) -> str:
    """What a graph computes in: "int8" for explicit Q/DQ graphs, "fp16" for float16 weights, else "fp32"."""
    from onnx import TensorProto

    if any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in model.graph.node):
        return "int8"
    if any(t.data_type == TensorProto.FLOAT16 for t in model.graph.initializer):
        return "fp16"
    return "fp32"


def load_model_file(path: Path) -> onnx.ModelProto:
    """Parse an ONNX file (weights in external data files are not read)."""
    if path.is_dir():
        raise ModelFileError(
            f"model file {str(path)!r} is a folder; pass the path of an ONNX file in it"
        )
    if not path.is_file():
        raise ModelFileError(
            f"model file {str(path)!r} does not exist; pass the path of an ONNX file"
        )
    import onnx
    from google.protobuf.message import DecodeError

    try:
        model = onnx.load(str(path), load_external_data=False)
    except (DecodeError, OSError, ValueError, RuntimeError) as exc:
        raise ModelFileError(
            f"model file {str(path)!r} is not a readable ONNX model ({type(exc).__name__}); "
            "it may be truncated or corrupt: download or export it again"
        ) from None
    if model.ir_version == 0 or not model.graph.node:
        raise ModelFileError(
            f"model file {str(path)!r} holds no ONNX graph (corrupt or not an ONNX file); "
            "download or export it again"
        )
    return model


def check_interface(model: onnx.ModelProto, benchmark: Workload, *, where: str) -> None:
    """Raise one ModelFileError that lists expected and found tensors unless the model's inputs
    and outputs carry the benchmark's names, dtypes and shapes (dynamic axes are accepted)."""
    initializers = {t.name for t in model.graph.initializer}
    found_inputs = [v for v in model.graph.input if v.name not in initializers]
    found_outputs = list(model.graph.output)
    if _matches(found_inputs, benchmark.inputs) and _matches(found_outputs, benchmark.outputs):
        return
    raise ModelFileError(
        f"model file {where!r} does not have the {benchmark.name} interface: expected inputs "
        f"{_describe_specs(benchmark.inputs)} and outputs {_describe_specs(benchmark.outputs)}; "
        f"found inputs {_describe_values(found_inputs)} and outputs "
        f"{_describe_values(found_outputs)}"
    )


def _matches(values: list[onnx.ValueInfoProto], specs: tuple[TensorSpec, ...]) -> bool:
    by_name = {v.name: v for v in values}
    if set(by_name) != {s.name for s in specs}:
        return False
    return all(_value_matches(by_name[s.name], s) for s in specs)


def _value_matches(value: onnx.ValueInfoProto, spec: TensorSpec) -> bool:
    tensor_type = value.type.tensor_type
    if _dtype_name(tensor_type.elem_type) != spec.dtype:
        return False
    if not tensor_type.HasField("shape"):
        return True  # exporters may leave output shapes unspecified
    dims = tensor_type.shape.dim
    if len(dims) != len(spec.shape):
        return False
    # A symbolic or unknown dimension accepts anything; a fixed one must equal the official one.
    return all(
        not d.HasField("dim_value") or want is None or d.dim_value == want
        for d, want in zip(dims, spec.shape)
    )


def _dtype_name(elem_type: int) -> str:
    import onnx
    from onnx import TensorProto

    try:
        return str(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, ValueError):
        return TensorProto.DataType.Name(elem_type).lower()


def _describe_specs(specs: tuple[TensorSpec, ...]) -> str:
    return ", ".join(
        f"{s.name} {s.dtype} [{','.join('N' if d is None else str(d) for d in s.shape)}]"
        for s in specs
    )


def _describe_values(values: list[onnx.ValueInfoProto]) -> str:
    if not values:
        return "none"
    parts = []
    for v in values:
        tensor_type = v.type.tensor_type
        if tensor_type.HasField("shape"):
            dims = ",".join(
                str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?")
                for d in tensor_type.shape.dim
            )
            shape = f"[{dims}]"
        else:
            shape = "[?]"
        parts.append(f"{v.name} {_dtype_name(tensor_type.elem_type)} {shape}")
    return ", ".join(parts)
