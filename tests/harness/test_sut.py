"""SUT internals with a recording stand-in for LoadGen: batching, payloads, failures."""

from __future__ import annotations

import threading
from collections.abc import Mapping

import numpy as np
import pytest

from mlperf_mig.benchmark import BERT, RESNET50, Benchmark
from mlperf_mig.engines.backends.null import NullBackend
from mlperf_mig.harness.samples import SampleLibrary, SyntheticSource, input_layouts
from mlperf_mig.harness.sut import (
    BatchingSUT,
    BatchRunner,
    InlineSUT,
    contiguous_batches,
    contiguous_order,
    response_payload,
)


class RecordingLoadGen:
    """Records QuerySamplesComplete calls as (id, payload bytes) pairs."""

    def __init__(self) -> None:
        self.calls: list[list[tuple[int, bytes]]] = []
        self.lock = threading.Lock()

    def QuerySampleResponse(self, qid: int, ptr: int, size: int) -> tuple[int, bytes]:
        data = (
            bytes(np.ctypeslib.as_array((np.ctypeslib.ctypes.c_ubyte * size).from_address(ptr)))
            if size
            else b""
        )
        return qid, data

    def QuerySamplesComplete(self, responses: list[tuple[int, bytes]]) -> None:
        with self.lock:
            self.calls.append(list(responses))

    def completed_ids(self) -> list[int]:
        return sorted(qid for call in self.calls for qid, _ in call)


class FailingBackend(NullBackend):
    """Raises on every batch."""

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise RuntimeError("device lost")


def _runner(
    benchmark: Benchmark, lg: RecordingLoadGen, *, backend=None, batch_size: int = 4
) -> BatchRunner:
    library = SampleLibrary.allocate(input_layouts(benchmark), capacity=8, total_count=16)
    library.load(
        list(range(8, 16)),
        SyntheticSource(benchmark=benchmark, total_count=16, performance_count=8),
    )
    return BatchRunner(
        lg=lg, backend=backend or NullBackend(benchmark), library=library, batch_size=batch_size
    )


def test_offline_completes_every_sample_in_batches() -> None:
    """Offline runs all samples in batches of the batch size, one completion call per batch."""
    lg = RecordingLoadGen()
    sut = InlineSUT(_runner(RESNET50, lg), offline=True)
    ids = list(range(100, 120))
    sut.issue(ids, [8 + i % 8 for i in range(20)])
    assert lg.completed_ids() == ids
    assert [len(call) for call in lg.calls] == [4, 4, 4, 4, 4]


def test_backend_error_still_completes_every_sample() -> None:
    """When the backend raises, every sample is completed without data and the error recorded."""
    lg = RecordingLoadGen()
    runner = _runner(BERT, lg, backend=FailingBackend(BERT))
    InlineSUT(runner, offline=True).issue(list(range(10)), [8 + i % 8 for i in range(10)])
    assert lg.completed_ids() == list(range(10))
    assert all(data == b"" for call in lg.calls for _, data in call)
    assert runner.error == "RuntimeError: device lost" and runner.failed_samples == 10


def test_unloaded_sample_is_completed_and_reported() -> None:
    """A sample index that was never loaded fails the run instead of hanging LoadGen."""
    lg = RecordingLoadGen()
    runner = _runner(RESNET50, lg)
    InlineSUT(runner, offline=False).issue([1, 2], [0, 9])
    assert lg.completed_ids() == [1, 2] and "not loaded" in runner.error


def test_server_batcher_completes_everything_before_stop() -> None:
    """Server's issue only enqueues; the batcher completes all queued samples before stopping."""
    lg = RecordingLoadGen()
    sut = BatchingSUT(_runner(RESNET50, lg, batch_size=3), window_s=0.001)
    sut.start()
    for qid in range(50):
        sut.issue([qid], [8 + qid % 8])
    sut.stop()
    assert lg.completed_ids() == list(range(50))
    assert max(len(call) for call in lg.calls) <= 3


def test_resnet_payload_is_the_class_as_int32() -> None:
    """ResNet50 answers with ArgMax minus the background class, as int32."""
    payload = response_payload(RESNET50, {"ArgMax:0": np.array([1, 1000], dtype=np.int64)})
    assert payload.dtype == np.int32 and payload.tolist() == [0, 999]


def test_bert_payload_interleaves_start_and_end() -> None:
    """BERT answers with float32 [384, 2]: start and end logits interleaved."""
    start = np.arange(2 * 384, dtype=np.float32).reshape(2, 384)
    payload = response_payload(BERT, {"output_start_logits": start, "output_end_logits": -start})
    assert payload.shape == (2, 384, 2) and payload[0].nbytes == 384 * 2 * 4
    assert payload[1, 5].tolist() == [start[1, 5], -start[1, 5]]


@pytest.mark.parametrize("capacity", [3, 64])
def test_contiguous_order_keeps_samples_and_makes_runs(capacity: int) -> None:
    """The Offline order is a permutation whose full rounds are consecutive rows."""
    rows = np.random.default_rng(0).integers(0, capacity, 500)
    order = contiguous_order(rows)
    assert sorted(order.tolist()) == list(range(500))
    ordered = rows[order]
    assert ordered[:capacity].tolist() == list(range(capacity))
    flags = contiguous_batches(ordered, capacity)
    expected = [
        bool(np.all(np.diff(ordered[s : s + capacity]) == 1)) for s in range(0, 500, capacity)
    ]
    assert flags.tolist() == expected
