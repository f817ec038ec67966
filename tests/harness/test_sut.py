"""SUT internals with a recording stand-in for LoadGen: batching, payloads, failures, and every
answer checked against its own sample with the known-answer backend."""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Mapping

import numpy as np
import pytest

from mlperf_mig.engines.backends.known_answer import KnownAnswerBackend, expected_payload
from mlperf_mig.engines.backends.null import NullBackend
from mlperf_mig.harness import progress as progress_module
from mlperf_mig.harness import sut as sut_module
from mlperf_mig.harness.samples import SampleLibrary, input_layouts
from mlperf_mig.harness.sut import (
    OFFLINE_COMPLETION_SAMPLES,
    BatchingSUT,
    BatchRunner,
    InlineSUT,
    contiguous_batches,
    contiguous_order,
    response_payload,
)
from mlperf_mig.workloads import Workload
from mlperf_mig.workloads.bert import BERT
from mlperf_mig.workloads.resnet50 import RESNET50
from mlperf_mig.workloads.samples import SyntheticSource


class Response:
    """LoadGen's QuerySampleResponse: id, data (address) and size, all writable."""

    def __init__(self, qid: int, ptr: int, size: int) -> None:
        self.id, self.data, self.size = qid, ptr, size


class RecordingLoadGen:
    """Records QuerySamplesComplete calls as (id, payload bytes) pairs.

    Like LoadGen, a response holds only the id, address and size; ids and payload bytes are read
    when QuerySamplesComplete is called, so a response or buffer reused before then shows here
    as on LoadGen.
    """

    def __init__(self) -> None:
        self.calls: list[list[tuple[int, bytes]]] = []
        self.lock = threading.Lock()

    def QuerySampleResponse(self, qid: int, ptr: int, size: int) -> Response:
        return Response(qid, ptr, size)

    def QuerySamplesComplete(self, responses: list[Response]) -> None:
        with self.lock:
            self.calls.append([(r.id, _read(r.data, r.size)) for r in responses])

    def completed_ids(self) -> list[int]:
        return sorted(qid for call in self.calls for qid, _ in call)


def _read(ptr: int, size: int) -> bytes:
    return ctypes.string_at(ptr, size) if size else b""


class FailingBackend(NullBackend):
    """Raises on every batch."""

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise RuntimeError("device lost")


def _runner(
    benchmark: Workload, lg: RecordingLoadGen, *, backend=None, batch_size: int = 4, progress=None
) -> BatchRunner:
    library = SampleLibrary.allocate(input_layouts(benchmark), capacity=8, total_count=16)
    library.load(
        list(range(8, 16)),
        SyntheticSource(benchmark=benchmark, total_count=16, performance_count=8),
    )
    return BatchRunner(
        lg=lg,
        backend=backend or NullBackend(benchmark),
        library=library,
        batch_size=batch_size,
        progress=progress,
    )


def test_offline_completes_every_sample_in_batches() -> None:
    """Offline runs all samples in batches of the batch size, one completion call per batch."""
    lg = RecordingLoadGen()
    sut = InlineSUT(_runner(RESNET50, lg), offline=True)
    ids = list(range(100, 120))
    sut.issue(ids, [8 + i % 8 for i in range(20)])
    assert lg.completed_ids() == ids
    assert [len(call) for call in lg.calls] == [4, 4, 4, 4, 4]


def test_completions_are_reported_to_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch runner tells its progress callback the completed count (here after every
    batch: an interval of 0)."""
    monkeypatch.setattr(progress_module, "PROGRESS_INTERVAL_S", 0.0)
    reports: list[int] = []
    sut = InlineSUT(_runner(RESNET50, RecordingLoadGen(), progress=reports.append), offline=False)
    sut.issue([100, 101, 102], [8, 9, 10])
    sut.issue([103], [11])
    assert reports == [3, 4]


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


# --- every answer reaches its own sample (known-answer backend) -------------------------------
TOTAL = 300  # samples in the source; the library holds CAPACITY of them, in shuffled rows
CAPACITY = 40


def _known_answer_runner(
    benchmark: Workload,
    lg: RecordingLoadGen,
    *,
    batch_size: int,
    completion_samples: int = 0,
    backend: KnownAnswerBackend | None = None,
) -> tuple[BatchRunner, list[int]]:
    """A runner over the known-answer backend; returns it and the loaded sample indices."""
    source = SyntheticSource(benchmark=benchmark, total_count=TOTAL, performance_count=CAPACITY)
    library = SampleLibrary.allocate(input_layouts(benchmark), capacity=CAPACITY, total_count=TOTAL)
    loaded = np.random.default_rng(1).choice(TOTAL, CAPACITY, replace=False).tolist()
    library.load(loaded, source)
    runner = BatchRunner(
        lg=lg,
        backend=backend or KnownAnswerBackend(benchmark),
        library=library,
        batch_size=batch_size,
        completion_samples=completion_samples,
    )
    return runner, loaded


def _query(loaded: list[int], count: int, seed: int) -> tuple[list[int], list[int]]:
    """`count` samples drawn from the loaded ones with repeats; ids unrelated to the indices."""
    indices = np.random.default_rng(seed).choice(loaded, count).tolist()
    return [10_000 + 7 * k for k in range(count)], indices


def _expected_answers(benchmark: Workload, indices: list[int]) -> dict[int, bytes]:
    """The known-answer payload of each sample index."""
    source = SyntheticSource(benchmark=benchmark, total_count=TOTAL, performance_count=CAPACITY)
    expected = {}
    for index in set(indices):
        sample = {
            layout.name: np.empty((1, *layout.shape), layout.dtype)
            for layout in input_layouts(benchmark)
        }
        source.fill([index], sample)
        expected[index] = expected_payload(
            benchmark, {name: array[0] for name, array in sample.items()}
        )
    return expected


def _assert_known_answers(
    lg: RecordingLoadGen, benchmark: Workload, ids: list[int], indices: list[int]
) -> None:
    """Every id was completed once, with the payload of its own sample."""
    expected = _expected_answers(benchmark, indices)
    completed = [response for call in lg.calls for response in call]
    assert sorted(qid for qid, _ in completed) == sorted(ids)
    answers = dict(completed)
    wrong = [qid for qid, index in zip(ids, indices) if answers[qid] != expected[index]]
    assert not wrong, f"{len(wrong)} of {len(ids)} samples got another sample's answer"


@pytest.mark.parametrize("benchmark", [RESNET50, BERT], ids=["resnet50", "bert"])
def test_offline_answers_survive_the_completion_batch(
    benchmark: Workload, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Offline stages answers for OFFLINE_COMPLETION_SAMPLES at a time: with partial batches of 7
    and rows taken out of order, every sample still gets its own answer when LoadGen reads it."""
    monkeypatch.setattr(sut_module, "OFFLINE_COMPLETION_INTERVAL_S", 3600.0)  # only size flushes
    lg = RecordingLoadGen()
    runner, loaded = _known_answer_runner(
        benchmark, lg, batch_size=7, completion_samples=OFFLINE_COMPLETION_SAMPLES
    )
    ids, indices = _query(loaded, 1100, seed=2)
    InlineSUT(runner, offline=True).issue(ids, indices)
    _assert_known_answers(lg, benchmark, ids, indices)
    # 73 batches of 7 fill the 512-sample staging buffer (511), twice, then 78 are left
    assert [len(call) for call in lg.calls] == [511, 511, 78]


class FailsOnceBackend(KnownAnswerBackend):
    """The known-answer backend, raising on its second batch only."""

    calls = 0

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.calls += 1
        if self.calls == 2:
            raise RuntimeError("device lost")
        return super().run(feeds)


def test_failed_batch_leaves_staged_answers_intact() -> None:
    """A batch that fails between staged ones is completed without data; the others keep their
    own answers."""
    lg = RecordingLoadGen()
    runner, loaded = _known_answer_runner(
        RESNET50, lg, batch_size=7, completion_samples=64, backend=FailsOnceBackend(RESNET50)
    )
    ids, indices = _query(loaded, 40, seed=4)
    InlineSUT(runner, offline=True).issue(ids, indices)
    completed = [response for call in lg.calls for response in call]
    assert sorted(qid for qid, _ in completed) == sorted(ids)
    failed = [qid for qid, data in completed if data == b""]
    assert len(failed) == 7 and runner.failed_samples == 7
    expected, answers = _expected_answers(RESNET50, indices), dict(completed)
    assert all(answers[q] == expected[i] for q, i in zip(ids, indices) if q not in failed)


@pytest.mark.parametrize("benchmark", [RESNET50, BERT], ids=["resnet50", "bert"])
def test_stream_answers_reach_their_samples(benchmark: Workload) -> None:
    """Stream queries of scattered rows (copied, not viewed) in batches of 3: each its own answer."""
    lg = RecordingLoadGen()
    runner, loaded = _known_answer_runner(benchmark, lg, batch_size=3)
    sut = InlineSUT(runner, offline=False)
    all_ids, all_indices = [], []
    for seed in range(12):
        ids, indices = _query(loaded, 8, seed=seed)
        ids = [qid + 100 * seed for qid in ids]
        sut.issue(ids, indices)
        all_ids += ids
        all_indices += indices
    _assert_known_answers(lg, benchmark, all_ids, all_indices)
    assert {len(call) for call in lg.calls} == {3, 2}  # 8 samples: batches of 3, 3 and 2


@pytest.mark.parametrize("benchmark", [RESNET50, BERT], ids=["resnet50", "bert"])
def test_server_answers_reach_their_samples(benchmark: Workload) -> None:
    """Server's batcher merges queries into dynamic batches: each sample keeps its own answer."""
    lg = RecordingLoadGen()
    runner, loaded = _known_answer_runner(benchmark, lg, batch_size=5)
    sut = BatchingSUT(runner, window_s=0.002)
    ids, indices = _query(loaded, 120, seed=3)
    sut.start()
    for start in range(0, 120, 3):  # queries of 3 samples (coalesced queries)
        sut.issue(ids[start : start + 3], indices[start : start + 3])
    sut.stop()
    _assert_known_answers(lg, benchmark, ids, indices)


def _equal_issue(
    loaded: list[int], rounds: int, extra: int, seed: int
) -> tuple[list[int], list[int]]:
    """A query as LoadGen's Offline issues it: `rounds` permutations of the loaded samples, then
    `extra` samples of one more; ids unrelated to the indices."""
    rng = np.random.default_rng(seed)
    order = [rng.permutation(len(loaded)) for _ in range(rounds + 1)]
    picks = np.concatenate(order)[: rounds * len(loaded) + extra]
    return [50_000 + 3 * k for k in range(len(picks))], [loaded[p] for p in picks.tolist()]


@pytest.mark.parametrize("benchmark", [RESNET50, BERT], ids=["resnet50", "bert"])
def test_equal_issue_rounds_complete_in_query_order_with_their_answers(
    benchmark: Workload, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rounds that permute the loaded set run in row order and are completed in LoadGen's
    order, each sample with its own answer; the partial last round is run too."""
    monkeypatch.setattr(sut_module, "OFFLINE_COMPLETION_INTERVAL_S", 3600.0)
    lg = RecordingLoadGen()
    runner, loaded = _known_answer_runner(benchmark, lg, batch_size=7, completion_samples=16)
    ids, indices = _equal_issue(loaded, rounds=3, extra=11, seed=5)
    InlineSUT(runner, offline=True).issue(ids, indices)
    _assert_known_answers(lg, benchmark, ids, indices)
    rounds_completed = [qid for call in lg.calls for qid, _ in call][: 3 * CAPACITY]
    assert rounds_completed == ids[: 3 * CAPACITY]  # the query's own order, not the rows'
    assert runner.completed == len(ids) and runner.error is None


def test_slow_backend_completes_each_round_batch_as_it_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With a backend slower than the completion interval, every batch of a round is completed
    when it has run (its samples' own answers), not at the end of the round."""
    monkeypatch.setattr(sut_module, "OFFLINE_COMPLETION_INTERVAL_S", 0.0)
    lg = RecordingLoadGen()
    runner, loaded = _known_answer_runner(RESNET50, lg, batch_size=8, completion_samples=16)
    ids, indices = _equal_issue(loaded, rounds=2, extra=0, seed=6)
    InlineSUT(runner, offline=True).issue(ids, indices)
    _assert_known_answers(lg, RESNET50, ids, indices)
    assert [len(call) for call in lg.calls] == [8] * (2 * CAPACITY // 8)


def test_failed_round_batch_completes_its_samples_without_data() -> None:
    """A batch of a round that fails completes its samples empty; the rest keep their answers."""
    lg = RecordingLoadGen()
    runner, loaded = _known_answer_runner(
        RESNET50, lg, batch_size=8, completion_samples=16, backend=FailsOnceBackend(RESNET50)
    )
    ids, indices = _equal_issue(loaded, rounds=2, extra=0, seed=7)
    InlineSUT(runner, offline=True).issue(ids, indices)
    completed = [response for call in lg.calls for response in call]
    assert sorted(qid for qid, _ in completed) == sorted(ids)
    failed = {qid for qid, data in completed if data == b""}
    assert len(failed) == 8 and runner.failed_samples == 8
    expected, answers = _expected_answers(RESNET50, indices), dict(completed)
    assert all(answers[q] == expected[i] for q, i in zip(ids, indices) if q not in failed)


@pytest.mark.parametrize(
    ("rows", "loaded", "rounds"),
    [
        ([2, 0, 1, 1, 2, 0, 0], 3, 2),
        ([2, 0, 1, 1, 1, 0, 0, 1, 2], 3, 1),  # the second run repeats a row
        ([0, 3, 2, 1, 0, 2], 3, 0),  # a row beyond the loaded ones
        ([0, 1], 3, 0),  # shorter than one round
        ([], 0, 0),
    ],
)
def test_permutation_rounds_counts_leading_permutations(
    rows: list[int], loaded: int, rounds: int
) -> None:
    """Only leading runs that are each a permutation of the loaded rows count as rounds."""
    assert sut_module.permutation_rounds(np.asarray(rows, dtype=np.int64), loaded) == rounds


class CountingBackend(KnownAnswerBackend):
    """The known-answer backend, keeping the size of every batch it runs."""

    def __init__(self, benchmark: Workload) -> None:
        super().__init__(benchmark)
        self.sizes: list[int] = []

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.sizes.append(len(next(iter(feeds.values()))))
        return super().run(feeds)


def test_rounds_smaller_than_a_batch_still_run_full_batches() -> None:
    """With fewer loaded samples than a batch holds, the query is not cut into rounds: batches
    stay full (and every sample keeps its own answer)."""
    lg = RecordingLoadGen()
    backend = CountingBackend(RESNET50)
    runner, loaded = _known_answer_runner(
        RESNET50, lg, batch_size=64, completion_samples=64, backend=backend
    )
    ids, indices = _equal_issue(loaded, rounds=4, extra=0, seed=8)
    InlineSUT(runner, offline=True).issue(ids, indices)
    _assert_known_answers(lg, RESNET50, ids, indices)
    assert backend.sizes[:2] == [64, 64]
