"""The unified Dispatcher's bookkeeping, against recording links: where each batch goes (least
outstanding work per compute slice, within each worker's window), that a reply completes exactly
the samples of its batches in their order, and that a dead worker's batches are sent again."""

from __future__ import annotations

import pickle
from typing import Any

from mlperf_mig.runner.unified import Dispatcher, _groups, _rows_of

BATCH = 4


class RecordingLink:
    """Stands in for a worker's pipe: keeps what the dispatcher sends."""

    def __init__(self) -> None:
        self.sent: list[tuple[Any, ...]] = []

    def send(self, message: tuple[Any, ...]) -> None:
        self.sent.append(message)

    def send_bytes(self, data: bytes) -> None:
        """What the dispatcher sends batches with: a message pickled by itself."""
        self.sent.append(pickle.loads(data))

    def batches(self) -> list[tuple[int, list[int]]]:
        """(batch id, sample ids) of every batch sent here."""
        return [(m[1], m[2]) for m in self.sent if m[0] == "batch"]


def _dispatcher(weights: tuple[float, ...]) -> tuple[Dispatcher, list[RecordingLink], list[Any]]:
    links = [RecordingLink() for _ in weights]
    completed: list[Any] = []
    dispatcher = Dispatcher(
        links,  # type: ignore[arg-type]  # only send() and send_bytes() are used
        weights,
        batch_size=BATCH,
        complete=lambda ids, blob, size: completed.append((list(ids), blob, size)),
    )
    return dispatcher, links, completed


def _submit_batches(dispatcher: Dispatcher, count: int, first_id: int = 0) -> None:
    for k in range(count):
        ids = list(range(first_id + BATCH * k, first_id + BATCH * (k + 1)))
        dispatcher.submit(ids, ids, ids)


def _owner(links: list[RecordingLink]) -> list[int]:
    """For batch ids 0, 1, 2, ...: the worker each went to."""
    owners = {bid: w for w, link in enumerate(links) for bid, _ in link.batches()}
    return [owners[bid] for bid in sorted(owners)]


def test_batches_go_to_the_least_outstanding_work_per_slice() -> None:
    """Weights 2 and 1, batches of 4: loads (outstanding + 4) / weight pick 0, 0 (tie: first),
    1, 0, 0 (tie), then 1; the windows (16 and 8 samples) then hold the 7th back."""
    dispatcher, links, _ = _dispatcher((2.0, 1.0))
    _submit_batches(dispatcher, 7)
    assert _owner(links) == [0, 0, 1, 0, 0, 1]


def test_a_reply_frees_its_window_for_the_next_batch() -> None:
    """When worker 0 answers one batch, the held-back 7th batch goes to it."""
    dispatcher, links, _ = _dispatcher((2.0, 1.0))
    _submit_batches(dispatcher, 7)
    dispatcher.done(0, [0], b"\x00" * 4 * BATCH, 4)
    assert _owner(links) == [0, 0, 1, 0, 0, 1, 0]


def test_a_reply_completes_its_batches_samples_in_order() -> None:
    """A reply for two merged batches completes their ids in the batches' order, with its blob."""
    dispatcher, _, completed = _dispatcher((1.0,))
    _submit_batches(dispatcher, 2, first_id=100)
    blob = bytes(range(8 * 4))
    dispatcher.done(0, [0, 1], blob, 4)
    assert completed == [(list(range(100, 108)), blob, 4)]
    assert dispatcher.completed == 8 and dispatcher.served == [8]


def test_a_dead_workers_batches_go_to_the_others() -> None:
    """The batches in flight on a worker that died are sent again, same samples, to another."""
    dispatcher, links, _ = _dispatcher((1.0, 1.0))
    _submit_batches(dispatcher, 2)
    lost = links[1].batches()
    dispatcher.worker_died(1)
    resent = [ids for _, ids in links[0].batches()][-len(lost) :]
    assert resent == [ids for _, ids in lost] and dispatcher.alive == [True, False]


def test_consecutive_rows_go_out_as_a_range() -> None:
    """A batch whose rows are consecutive is described by a range; scattered rows by a list."""
    dispatcher, links, _ = _dispatcher((1.0,))
    dispatcher.submit([1, 2, 3, 4], [8, 9, 10, 11], [0, 0, 0, 0])
    dispatcher.submit([5, 6, 7, 8], [3, 9, 4, 5], [0, 0, 0, 0])
    rows = [m[3] for m in links[0].sent if m[0] == "batch"]
    assert rows == [range(8, 12), [3, 9, 4, 5]]


def test_merged_batches_run_in_groups_of_at_most_the_batch_size() -> None:
    """A worker's merged batches of 3, 2, 4 and 1 samples run as (3, 2) and (4, 1) for batch 6,
    and each group's rows are its batches' rows in order."""
    sizes = [3, 2, 4, 1]
    starts = [0, 10, 20, 30]
    batches = [(k, [], range(s, s + n), []) for k, (s, n) in enumerate(zip(starts, sizes))]
    groups = _groups(batches, 6)
    assert [[b[0] for b in group] for group in groups] == [[0, 1], [2, 3]]
    assert _rows_of(groups[0]).tolist() == [0, 1, 2, 10, 11]
