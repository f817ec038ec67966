"""Unified mode's dispatch of large queries: chunks sized by the layout's rate, rows-only
messages for workers that read the shared arrays, and chunks run in backend calls of at most
the batch size."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest

from mlperf_mig.runner import unified
from mlperf_mig.runner.unified import Dispatcher, _run_in_batches

BATCH = 4
LARGEST = 16


class RecordingLink:
    """Stands in for a worker's pipe: keeps what the dispatcher sends."""

    def __init__(self) -> None:
        self.sent: list[tuple[Any, ...]] = []

    def send(self, message: tuple[Any, ...]) -> None:
        self.sent.append(message)

    def send_bytes(self, data: bytes | memoryview) -> None:
        if bytes(data[:1]) == b"\x80":  # a pickle (protocol 2 or later)
            self.send(pickle.loads(data))
        else:  # raw rows for a worker's copy of the samples
            self.sent.append(("raw", bytes(data)))

    def batches(self) -> list[tuple[Any, ...]]:
        return [m for m in self.sent if m[0] == "batch"]


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture(name="clock")
def fixture_clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(unified, "time", clock)
    return clock


def _dispatcher(
    *, rows_only: list[bool] | None = None
) -> tuple[Dispatcher, RecordingLink, list[tuple[list[int], bytes, int]]]:
    link = RecordingLink()
    completed: list[tuple[list[int], bytes, int]] = []
    dispatcher = Dispatcher(
        [link],  # type: ignore[list-item]  # only send() is used
        (1.0,),
        batch_size=BATCH,
        complete=lambda ids, blob, size: completed.append((list(ids), blob, size)),
        largest_batch=LARGEST,
        rows_only=rows_only,
    )
    return dispatcher, link, completed


def _submit(dispatcher: Dispatcher, count: int) -> None:
    ids = np.arange(1000, 1000 + count, dtype=np.uint64)
    dispatcher.submit(ids, np.arange(count), np.arange(count))


def test_a_fast_worker_gets_chunks_of_several_batches(clock: Clock) -> None:
    """A worker that served its first batch in 1 ms (4000 samples/s, 80 in CHUNK_SECONDS) is
    sent chunks of the largest size (16) from then on, two of them (its window)."""
    dispatcher, link, _ = _dispatcher(rows_only=[True])
    _submit(dispatcher, 100)
    clock.now += 0.001
    dispatcher.done(0, [link.batches()[0][1]], b"\0" * 4 * BATCH, 4)
    sizes = [len(m[3]) for m in link.batches()]
    assert sizes == [BATCH, BATCH, LARGEST, LARGEST]


def test_a_worker_that_does_not_read_the_shared_arrays_gets_no_chunks(clock: Clock) -> None:
    """A fast worker that did not say it reads the shared arrays (a cluster node's actor runs
    what it is sent in one call) keeps getting batches of the batch size."""
    dispatcher, link, _ = _dispatcher()
    _submit(dispatcher, 100)
    clock.now += 0.001
    dispatcher.done(0, [link.batches()[0][1]], b"\0" * 4 * BATCH, 4)
    assert [len(m[2]) for m in link.batches()] == [BATCH, BATCH, BATCH]


def test_a_slow_worker_keeps_batches_of_the_batch_size(clock: Clock) -> None:
    """A worker that took 1 s for its first batch (4 samples/s) keeps getting single batches."""
    dispatcher, link, _ = _dispatcher(rows_only=[True])
    _submit(dispatcher, 100)
    clock.now += 1.0
    dispatcher.done(0, [link.batches()[0][1]], b"\0" * 4 * BATCH, 4)
    assert [len(m[3]) for m in link.batches()] == [BATCH, BATCH, BATCH]


def test_a_chunk_is_completed_with_its_samples_in_order(clock: Clock) -> None:
    """The reply to a chunk completes exactly the chunk's sample ids, in the query's order."""
    dispatcher, link, completed = _dispatcher(rows_only=[True])
    _submit(dispatcher, 100)
    clock.now += 0.001
    for message in link.batches()[:2]:
        dispatcher.done(0, [message[1]], b"\0" * 4 * BATCH, 4)
    chunk = link.batches()[2]
    dispatcher.done(0, [chunk[1]], b"\0" * 4 * LARGEST, 4)
    assert completed[-1][0] == list(range(1008, 1008 + LARGEST))


def test_a_rows_only_worker_is_sent_neither_ids_nor_indices(clock: Clock) -> None:
    """A worker that reads the shared arrays gets ("batch", id, None, rows, None)."""
    dispatcher, link, _ = _dispatcher(rows_only=[True])
    _submit(dispatcher, 8)
    assert link.batches() == [
        ("batch", 0, None, range(0, 4), None),
        ("batch", 1, None, range(4, 8), None),
    ]


def test_other_workers_are_sent_ids_and_indices_as_lists(clock: Clock) -> None:
    """A worker that did not say it reads the shared arrays (a cluster node) gets the sample
    ids and dataset indices of its batch as lists of ints."""
    dispatcher, link, _ = _dispatcher()
    dispatcher.submit(
        np.array([7, 8, 9, 10], dtype=np.uint64), np.arange(4), np.array([5, 3, 1, 2])
    )
    assert link.batches() == [("batch", 0, [7, 8, 9, 10], range(0, 4), [5, 3, 1, 2])]


def test_samples_not_yet_cut_fail_when_every_worker_is_gone(clock: Clock) -> None:
    """When the last worker dies, its batches in flight and the samples still queued are all
    completed without data and counted as failed."""
    dispatcher, _, completed = _dispatcher()
    _submit(dispatcher, 20)
    dispatcher.worker_died(0)
    assert sorted(i for ids, _, _ in completed for i in ids) == list(range(1000, 1020))
    assert dispatcher.failed_samples == 20 and all(blob == b"" for _, blob, _ in completed)


def test_a_chunk_runs_in_backend_calls_of_at_most_the_batch_size() -> None:
    """Ten rows with batch size 4 run as calls of 4, 4 and 2 rows, each writing its payloads
    where its rows start."""
    calls: list[list[int]] = []

    def run(part: np.ndarray, out: np.ndarray) -> None:
        calls.append(part.tolist())
        out[: len(part)] = part * 10

    payloads = _run_in_batches(np.arange(10), 4, run, np.zeros(16, dtype=np.int64))
    assert calls == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert payloads.tolist() == [r * 10 for r in range(10)]


def test_a_dead_workers_chunk_is_cut_again_for_the_others(clock: Clock) -> None:
    """The chunks in flight at a worker that dies go to a worker that runs what it is sent in
    one call (a cluster node) in batches of at most the batch size, every sample once."""
    links = [RecordingLink(), RecordingLink()]
    dispatcher = Dispatcher(
        links,  # type: ignore[arg-type]  # only send() is used
        (1.0, 1.0),
        batch_size=BATCH,
        complete=lambda ids, blob, size: None,
        largest_batch=LARGEST,
        rows_only=[True, False],
    )
    _submit(dispatcher, 200)
    clock.now += 0.001
    dispatcher.done(0, [links[0].batches()[0][1]], b"\0" * 4 * BATCH, 4)
    assert max(len(m[3]) for m in links[0].batches()) == LARGEST
    before = len(links[1].batches())
    dispatcher.worker_died(0)
    answered = 0
    while answered < len(links[1].batches()):  # worker 1 serves everything that is left
        message = links[1].batches()[answered]
        dispatcher.done(1, [message[1]], b"\0" * 4 * len(message[2]), 4)
        answered += 1
    served = [i for m in links[1].batches() for i in m[2]]
    assert len(links[1].batches()) > before and max(len(m[2]) for m in links[1].batches()) <= BATCH
    assert len(served) == len(set(served)) == 200 - BATCH  # all but worker 0's one answered batch
    assert dispatcher.completed == 200


def test_a_worker_silent_for_the_reply_timeout_is_dropped_and_its_batches_go_to_the_others(
    clock: Clock,
) -> None:
    """A worker with a batch in flight that answers nothing for the reply timeout is dropped
    (stalled), its samples go to the worker that answered, its late reply is ignored, and an
    idle worker is never dropped for silence: every sample completes once."""
    links = [RecordingLink(), RecordingLink()]
    completed: list[int] = []
    dispatcher = Dispatcher(
        links,  # type: ignore[arg-type]  # only send() is used
        (1.0, 1.0),
        batch_size=BATCH,
        complete=lambda ids, blob, size: completed.extend(ids),
        reply_timeout_s=5.0,
    )
    _submit(dispatcher, 2 * BATCH)
    (silent,), (answered,) = links[0].batches(), links[1].batches()
    clock.now += 4.0
    dispatcher.done(1, [answered[1]], b"\0" * 4 * BATCH, 4)
    dispatcher.check_stalled()
    assert dispatcher.alive == [True, True]
    clock.now += 1.5
    dispatcher.check_stalled()
    assert dispatcher.alive == [False, True] and dispatcher.stalled == [0]
    assert [m[2] for m in links[1].batches()[1:]] == [silent[2]]
    dispatcher.done(0, [silent[1]], b"\0" * 4 * BATCH, 4)  # it wakes: ignored
    dispatcher.done(1, [links[1].batches()[1][1]], b"\0" * 4 * BATCH, 4)
    clock.now += 60.0
    dispatcher.check_stalled()
    assert dispatcher.alive == [False, True]
    assert sorted(completed) == list(range(1000, 1000 + 2 * BATCH))


def _fleet(
    weights: list[float], *, mirrors: list[bool] | None = None
) -> tuple[Dispatcher, list[RecordingLink]]:
    links = [RecordingLink() for _ in weights]
    dispatcher = Dispatcher(
        links,  # type: ignore[arg-type]  # only send() is used
        weights,
        batch_size=BATCH,
        complete=lambda ids, blob, size: None,
        rows_only=[True] * len(weights),
        mirrors=mirrors,
    )
    return dispatcher, links


def test_each_query_goes_to_the_least_loaded_capacity_among_many_workers() -> None:
    """With 56 workers of two weights, every one-sample query goes where (outstanding + 1) /
    weight is least (ties: the lowest index), as a scan of every worker would choose."""
    weights = [1.0] * 28 + [2.0] * 28
    dispatcher, links = _fleet(weights)
    outstanding = [0] * len(weights)
    for query in range(300):
        room = [w for w in range(len(weights)) if outstanding[w] < round(2 * weights[w]) * BATCH]
        expected = min(room, key=lambda w: ((outstanding[w] + 1) / weights[w], w))
        dispatcher.submit([query], [query % 8], [query % 8])
        sent = [
            w for w, link in enumerate(links) if link.batches() and link.batches()[-1][1] == query
        ]
        assert sent == [expected]
        outstanding[expected] += 1
        if query % 3 == 0:  # the worker answers now and then
            dispatcher.done(expected, [query], b"", 0)
            outstanding[expected] -= 1


def test_queries_queued_behind_full_windows_go_out_as_one_message() -> None:
    """Server queries that wait for a window (one sample each) are sent together when it opens:
    one message of several samples, not one a query."""
    dispatcher, (link,) = _fleet([1.0])
    window = 2 * BATCH  # samples: two batches' worth
    for query in range(window + 3):
        dispatcher.submit([query], [query], [query])
    assert [len(m[3]) for m in link.batches()] == [1] * window
    dispatcher.done(0, [link.batches()[0][1]], b"", 0)
    assert len(link.batches()) == window + 1
    assert list(link.batches()[-1][3]) == [window, window + 1, window + 2]


def test_a_load_waits_until_every_mirroring_worker_has_the_samples() -> None:
    """mirror_samples sends the loaded rows of the shared arrays to each worker that keeps a
    copy of them (a cluster node), then a sync, and returns once each answered; one that does
    not answer in time is given up, and its share goes to the others."""
    rows = np.arange(64 * 3, dtype=np.float32).reshape(64, 3)
    links = [RecordingLink() for _ in range(3)]
    dispatcher = Dispatcher(
        links,  # type: ignore[arg-type]  # only send() is used
        (1.0, 1.0, 1.0),
        batch_size=BATCH,
        complete=lambda ids, blob, size: None,
        rows_only=[True] * 3,
        mirrors=[True, True, False],
        arrays={"x": rows},
    )
    links[0].send = lambda message: (  # type: ignore[method-assign]
        RecordingLink.send(links[0], message),
        dispatcher.samples_taken(0) if message[0] == "sync" else None,
    )
    dispatcher.mirror_samples(64, timeout_s=0.5)
    expected = [("samples", 0, 64, ["x"]), ("raw", rows.tobytes()), ("sync", 64)]
    assert links[0].sent == expected and links[1].sent == expected and links[2].sent == []
    assert dispatcher.alive == [True, False, True]


def test_rows_go_to_a_workers_copy_in_parts_of_about_the_frame_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rows of 12 bytes in frames of 40 bytes go as parts of 3 rows, each a header and the
    raw rows of every input, in order."""
    monkeypatch.setattr(unified, "MIRROR_FRAME_BYTES", 40)
    link = RecordingLink()
    x = np.arange(8 * 2, dtype=np.float32).reshape(8, 2)
    y = np.arange(8, dtype=np.float32).reshape(8, 1)
    unified.send_rows(link, {"x": x, "y": y}, 1, 8)  # type: ignore[arg-type]
    headers = [m for m in link.sent if m[0] == "samples"]
    assert headers == [
        ("samples", 1, 3, ["x", "y"]),
        ("samples", 4, 3, ["x", "y"]),
        ("samples", 7, 1, ["x", "y"]),
    ]
    raw = [m[1] for m in link.sent if m[0] == "raw"]
    assert raw[0] == x[1:4].tobytes() and raw[1] == y[1:4].tobytes() and raw[-1] == y[7:8].tobytes()


def test_chunks_do_not_shrink_as_workers_are_added_at_the_same_layout_rate(clock: Clock) -> None:
    """At the same layout rate (4096 samples/s), 2 and 8 equal workers get chunks of the
    same size (80 samples: CHUNK_SECONDS of the layout's rate): the coordinator's messages a
    sample do not grow with the instance count, though each of the 8 is 4x slower."""
    sizes = {}
    for count in (2, 8):
        links = [RecordingLink() for _ in range(count)]
        dispatcher = Dispatcher(
            links,  # type: ignore[arg-type]  # only send() is used
            [1.0] * count,
            batch_size=BATCH,
            complete=lambda ids, blob, size: None,
            largest_batch=128,
            rows_only=[True] * count,
        )
        began = clock.now
        dispatcher.submit(np.arange(100_000), np.arange(100_000), np.arange(100_000))
        for link_index, link in enumerate(links):
            for message in link.batches()[:2]:  # each answer at the layout's 4096 samples/s
                clock.now = began + (dispatcher.completed + BATCH) / 4096
                dispatcher.done(link_index, [message[1]], b"\0" * 4 * BATCH, 4)
        sizes[count] = [len(link.batches()[-1][3]) for link in links]
        clock.now += 1.0
    assert sizes[2] == [80] * 2 and sizes[8] == [80] * 8


def test_chunks_shrink_to_each_workers_share_as_the_query_runs_out(clock: Clock) -> None:
    """When fewer samples are left than a chunk for every worker, each is sent its share of
    what is left (whole batches), so the last chunks end together."""
    links = [RecordingLink(), RecordingLink()]
    dispatcher = Dispatcher(
        links,  # type: ignore[arg-type]  # only send() is used
        (1.0, 1.0),
        batch_size=BATCH,
        complete=lambda ids, blob, size: None,
        largest_batch=LARGEST,
        rows_only=[True, True],
    )
    dispatcher.submit(np.arange(40), np.arange(40), np.arange(40))  # 4 batches go out
    clock.now += 0.001
    dispatcher.done(0, [links[0].batches()[0][1]], b"\0" * 4 * BATCH, 4)  # 24 left, chunk 16
    assert [len(m[3]) for m in links[0].batches()][2:4] == [12, 8]  # half of 24, then of 12


def test_server_queries_wait_for_the_flush_and_go_out_together() -> None:
    """With a flush interval, submitted queries are not sent one by one: the receiver's flush
    sends what came meanwhile as one message (a pipe write cost most of a query)."""
    link = RecordingLink()
    dispatcher = Dispatcher(
        [link],  # type: ignore[list-item]  # only send() is used
        (1.0,),
        batch_size=BATCH,
        complete=lambda ids, blob, size: None,
        rows_only=[True],
        flush_s=0.001,
    )
    for query in range(3):
        dispatcher.submit([query], [query + 10], [query + 10])
    assert link.batches() == []
    dispatcher.flush()
    assert [list(m[3]) for m in link.batches()] == [[10, 11, 12]]


def test_the_issue_cpu_is_the_timed_callbacks_scaled_to_every_query() -> None:
    """The coordinator times one issue callback in ISSUE_TIMED_EVERY; the cost line's issue CPU
    is theirs scaled to every query (none timed: none known)."""
    clock = unified._CpuClock()
    assert clock.issue_s == 0.0
    clock.queries, clock.issue_timed, clock.issue_timed_s = 32, 2, 0.002
    assert clock.issue_s == pytest.approx(0.032)
