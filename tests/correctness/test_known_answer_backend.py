"""The known-answer backend: answers are a function of the sample alone, distinct between
samples, and `expected_payload` agrees with what the harness makes of the backend's outputs."""

from __future__ import annotations

import numpy as np
import pytest

from mlperf_mig.engines import open_backend, resolve_spec
from mlperf_mig.engines.backends.known_answer import KnownAnswerBackend, expected_payload
from mlperf_mig.harness.samples import input_layouts
from mlperf_mig.harness.sut import response_payload
from mlperf_mig.workloads import Workload, get_workload
from mlperf_mig.workloads.bert import BERT
from mlperf_mig.workloads.resnet50 import RESNET50
from mlperf_mig.workloads.samples import SyntheticSource

BENCHMARKS = pytest.mark.parametrize("benchmark", [RESNET50, BERT], ids=["resnet50", "bert"])


def _samples(benchmark: Workload, indices: list[int]) -> dict[str, np.ndarray]:
    batch = {
        layout.name: np.empty((len(indices), *layout.shape), layout.dtype)
        for layout in input_layouts(benchmark)
    }
    SyntheticSource(benchmark=benchmark, total_count=1000, performance_count=64).fill(
        indices, batch
    )
    return batch


def _rows(batch: dict[str, np.ndarray], row: int) -> dict[str, np.ndarray]:
    return {name: array[row] for name, array in batch.items()}


@BENCHMARKS
def test_answer_depends_on_the_sample_not_its_batch(benchmark: Workload) -> None:
    """A sample gets the same payload alone and at another place in a larger batch."""
    backend = KnownAnswerBackend(benchmark)
    alone = response_payload(benchmark, backend.run(_samples(benchmark, [5])))
    batched = response_payload(benchmark, backend.run(_samples(benchmark, [9, 2, 5, 7])))
    assert alone[0].tobytes() == batched[2].tobytes()


@BENCHMARKS
def test_expected_payload_is_what_the_harness_sends(benchmark: Workload) -> None:
    """expected_payload(sample) equals the harness's payload of the backend's answer."""
    batch = _samples(benchmark, list(range(6)))
    payload = response_payload(benchmark, KnownAnswerBackend(benchmark).run(batch))
    assert [payload[row].tobytes() for row in range(6)] == [
        expected_payload(benchmark, _rows(batch, row)) for row in range(6)
    ]


def test_bert_samples_get_distinct_answers() -> None:
    """200 different BERT samples get 200 different payloads (the logits carry the whole code)."""
    batch = _samples(BERT, list(range(200)))
    assert len({expected_payload(BERT, _rows(batch, row)) for row in range(200)}) == 200


def test_resnet_answers_are_imagenet_classes_spread_over_samples() -> None:
    """ResNet50 answers are classes 0-999; 200 samples take well over 150 of them."""
    batch = _samples(RESNET50, list(range(200)))
    classes = [
        int(np.frombuffer(expected_payload(RESNET50, _rows(batch, row)), np.int32)[0])
        for row in range(200)
    ]
    assert min(classes) >= 0 and max(classes) < 1000 and len(set(classes)) > 150


def test_bert_span_lies_in_the_samples_context() -> None:
    """BERT's start and end are context tokens (segment 1, before the last [SEP]), end >= start."""
    batch = _samples(BERT, list(range(50)))
    outputs = KnownAnswerBackend(BERT).run(batch)
    starts = outputs["output_start_logits"].argmax(axis=1)
    ends = outputs["output_end_logits"].argmax(axis=1)
    for row in range(50):
        context = np.flatnonzero(batch["segment_ids"][row] == 1)[:-1]
        assert starts[row] in context and ends[row] in context and ends[row] >= starts[row]


def test_is_opened_through_the_engine_builder() -> None:
    """`--backend known_answer` resolves to a spec without a model file and opens in-process."""
    spec = resolve_spec(get_workload("resnet50"), backend="known_answer", variant="tiny")
    with open_backend(spec) as backend:
        assert spec.model is None and isinstance(backend, KnownAnswerBackend)
        assert backend.device.backend == "known_answer"


def test_a_model_file_is_refused() -> None:
    """A model file would be ignored (and its accuracy verdict false): one clear error."""
    import attrs

    from mlperf_mig.errors import ModelFileError

    spec = resolve_spec(get_workload("resnet50"), backend="known_answer", variant="tiny")
    message = r"computes no model, so model file 'x\.onnx' would be ignored"
    with pytest.raises(ModelFileError, match=message):
        open_backend(attrs.evolve(spec, model_path="x.onnx"))
