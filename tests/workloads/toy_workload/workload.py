"""The toy workload: four numbers in, their sum out; a dataset is a text file of four numbers a
line, and accuracy is the share of answers equal to their line's sum."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from mlperf_mig.errors import DatasetError
from mlperf_mig.workloads.workload import (
    ONE_ANSWER,
    CheckerModel,
    ReferenceScript,
    ResponseFormat,
    Score,
    TensorSpec,
    Workload,
)

WIDTH = 4


@attrs.define(kw_only=True)
class NumbersSource:
    """The lines of a numbers file, each a sample; `labels` are their sums."""

    benchmark: Workload
    rows: np.ndarray
    synthetic: bool = attrs.field(default=False, init=False)
    description: str = "numbers file"

    @property
    def total_count(self) -> int:
        return len(self.rows)

    @property
    def performance_count(self) -> int:
        return min(self.benchmark.performance_sample_count, self.total_count)

    @property
    def labels(self) -> np.ndarray:
        return self.rows.sum(axis=1)

    def fill(self, indices: Sequence[int], out: Mapping[str, np.ndarray]) -> None:
        (array,) = out.values()
        array[: len(indices)] = self.rows[np.asarray(indices, dtype=np.int64)]


def _read_rows(path: str) -> np.ndarray:
    try:
        lines = Path(path).read_text(encoding="utf-8").split("\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"cannot read numbers file {path!r}: {exc}") from None
    try:
        rows = [[float(v) for v in line.split()] for line in lines if line.strip()]
    except ValueError:
        raise DatasetError(f"numbers file {path!r} holds a line that is not numbers") from None
    if not rows or any(len(r) != WIDTH for r in rows):
        raise DatasetError(f"numbers file {path!r} must hold lines of {WIDTH} numbers")
    return np.asarray(rows, dtype=np.float32)


@attrs.frozen(kw_only=True)
class Toy(Workload):
    def settings_path(self) -> Path:
        return Path(__file__).with_name("settings.toml")

    def build_graph(
        self,
        *,
        variant: str,
        precision: str,
        seed: int,
        act_amax: Mapping[str, float] | None = None,
    ) -> tuple[Any, list[str]]:
        from onnx import TensorProto, helper

        graph = helper.make_graph(
            [helper.make_node("ReduceSum", ["values"], ["total"], keepdims=0)],
            "toy",
            [helper.make_tensor_value_info("values", TensorProto.FLOAT, ["N", WIDTH])],
            [helper.make_tensor_value_info("total", TensorProto.FLOAT, ["N"])],
        )
        return helper.make_model(graph), []

    def calibration_feeds(self, batch: int, seed: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        return {"values": rng.random((batch, WIDTH), dtype=np.float32)}

    def fill_synthetic(
        self,
        *,
        seed: int,
        total_count: int,
        indices: Sequence[int],
        out: Mapping[str, np.ndarray],
        scratch: dict[str, Any],
    ) -> None:
        for row, index in enumerate(indices):
            out["values"][row] = np.random.default_rng((seed, int(index))).random(WIDTH)

    def check_dataset(self, dataset: str, vocab: str | None) -> None:
        _read_rows(dataset)

    def open_dataset(self, dataset: str, *, vocab: str | None, limit: int | None) -> Any:
        rows = _read_rows(dataset)
        return NumbersSource(benchmark=self, rows=rows[:limit] if limit else rows)

    def write_payload(self, outputs: Mapping[str, np.ndarray], payload: np.ndarray) -> None:
        total = np.asarray(outputs["total"], dtype=np.float32).reshape(-1)
        payload[: len(total)] = total

    def score(self, source: Any, answers: Mapping[int, bytes]) -> Score:
        right = [
            abs(float(np.frombuffer(data, dtype=np.float32)[0]) - float(source.labels[index]))
            < 1e-4
            for index, data in answers.items()
        ]
        return Score(value=100.0 * sum(right) / max(1, len(right)), count=len(right))

    def accuracy_figures(
        self, value: float, count: int, extra: Mapping[str, float]
    ) -> dict[str, float]:
        return {"accuracy": value, "total": count}

    def accuracy_line(self, figures: Mapping[str, float]) -> str:
        return f"accuracy={float(figures['accuracy']):.3f}%, total={int(figures['total'])}"

    def known_outputs(
        self, samples: Sequence[Mapping[str, np.ndarray]], codes: Sequence[int]
    ) -> dict[str, np.ndarray]:
        return {"total": np.array([code % 1000 for code in codes], dtype=np.float32)}

    def known_payload(self, sample: Mapping[str, np.ndarray]) -> bytes:
        return np.float32(self.sample_code(sample) % 1000).tobytes()


TOY = Toy(
    name="toy",
    listing_order=90,
    conf_model_name="resnet50",  # LoadGen's mlperf.conf knows only its own models' names
    submission_names=("toy",),
    inputs=(TensorSpec(name="values", dtype="float32", shape=(None, WIDTH)),),
    outputs=(TensorSpec(name="total", dtype="float32", shape=(None,)),),
    performance_sample_count=8,
    server_latency_bound_ms=100.0,
    offline_min_samples=1,
    accuracy_metric="exact",
    accuracy_target=50.0,
    required_audits=(),
    official_weights="none: the toy computes a sum",
    checker_models=(
        CheckerModel(
            name="toy",
            folders=("toy",),
            performance_sample_count=8,
            offline_min_samples=1,
            min_query_count=(("Offline", 1),),
            server_latency_bound_ns=None,
            required_scenarios=(("edge", ("Offline",)), ("datacenter,edge", ("Offline",))),
            accuracy_target=50.0,
            accuracy_pattern=r"^accuracy=([\d\.]+)%",
            accuracy_delta_percent=1.0,
        ),
    ),
    reference_script=ReferenceScript(
        how="the toy's own scorer: the share of answers equal to their line's sum",
        command="(none: the toy has no MLCommons script)",
        why="a toy",
    ),
    response=ResponseFormat(kind=ONE_ANSWER, shape=(), dtype="float32"),
)
