"""The two MLPerf benchmarks and their official model interfaces (reference/mlperf.md section 2).

Every pillar reads these facts from here: the graph builders generate models with exactly these
tensors, the backends check user-supplied models against them, the harness shapes samples and
responses from them, and the submission writer takes its folder names from them.
"""

from __future__ import annotations

import attrs

from mlperf_mig.errors import UnknownBenchmarkError


@attrs.frozen(kw_only=True)
class TensorSpec:
    """One model input or output; `None` in `shape` is the dynamic batch dimension."""

    name: str
    dtype: str
    shape: tuple[int | None, ...]


@attrs.frozen(kw_only=True)
class Benchmark:
    """An MLPerf Inference benchmark: the model interface and the rules that depend on it."""

    name: str
    conf_model_name: (
        str  # the model name LoadGen's mlperf.conf uses (trap 3: "bert", not "bert-99")
    )
    submission_names: tuple[str, ...]  # result folder names the submission checker accepts
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    performance_sample_count: int
    server_latency_bound_ms: float
    offline_min_samples: int
    accuracy_metric: str
    accuracy_target: float

    def input_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.inputs)

    def output_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.outputs)


SEQ_LEN = 384

RESNET50 = Benchmark(
    name="resnet50",
    conf_model_name="resnet50",
    submission_names=("resnet50",),
    inputs=(TensorSpec(name="input_tensor:0", dtype="float32", shape=(None, 3, 224, 224)),),
    outputs=(
        TensorSpec(name="ArgMax:0", dtype="int64", shape=(None,)),
        TensorSpec(name="softmax_tensor:0", dtype="float32", shape=(None, 1001)),
    ),
    performance_sample_count=1024,
    server_latency_bound_ms=15.0,
    offline_min_samples=24576,
    accuracy_metric="top1",
    accuracy_target=0.99 * 76.46,
)

BERT = Benchmark(
    name="bert",
    conf_model_name="bert",
    submission_names=("bert-99", "bert-99.9"),
    inputs=tuple(
        TensorSpec(name=n, dtype="int64", shape=(None, SEQ_LEN))
        for n in ("input_ids", "input_mask", "segment_ids")
    ),
    outputs=tuple(
        TensorSpec(name=n, dtype="float32", shape=(None, SEQ_LEN))
        for n in ("output_start_logits", "output_end_logits")
    ),
    performance_sample_count=10833,
    server_latency_bound_ms=130.0,
    offline_min_samples=10833,
    accuracy_metric="f1",
    accuracy_target=0.99 * 90.874,
)

_BENCHMARKS = {b.name: b for b in (RESNET50, BERT)}


def get_benchmark(name: str) -> Benchmark:
    """Return the benchmark called `name` (case-insensitive; 'bert-99' and 'bert-99.9' mean bert)."""
    key = name.strip().lower()
    if key in ("bert-99", "bert-99.9"):
        key = "bert"
    try:
        return _BENCHMARKS[key]
    except KeyError:
        raise UnknownBenchmarkError(
            f"unknown benchmark {name!r}; expected one of {', '.join(_BENCHMARKS)}"
        ) from None


BENCHMARK_NAMES: tuple[str, ...] = tuple(_BENCHMARKS)
