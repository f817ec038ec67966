"""Systems under test: how LoadGen's queries reach the backend and how responses go back.

Every SUT is a LoadGen FastSUT (ids and indices arrive as two plain int lists). Offline,
SingleStream and MultiStream run the backend inside the issue callback, in batches of the
recipe's size; Offline orders its samples so that batches are views of the sample library and
completes them in bulk (OFFLINE_COMPLETION_SAMPLES per QuerySamplesComplete call), the stream
scenarios complete each query with one call. Responses are LoadGen objects made once per
staging row and reused (`ResponsePool`): setting a sample id costs a third of making a response.
Server only enqueues in the issue callback; a
batcher thread forms dynamic batches within a window well under the latency bound and completes
each batch with one call. Every issued sample is completed, even when the backend raises (trap
11): the error is recorded and the run is marked failed.
"""

from __future__ import annotations

import collections
import logging
import sys
import threading
import time
from collections.abc import Callable, Sequence
from itertools import repeat
from typing import Any

import numpy as np

from mlperf_mig.engines.backend import Backend
from mlperf_mig.errors import WorkloadError
from mlperf_mig.harness.progress import CompletionCounter
from mlperf_mig.harness.samples import SampleLibrary
from mlperf_mig.harness.settings import LoadGenModule
from mlperf_mig.workloads.workload import ONE_ANSWER, Workload

logger = logging.getLogger(__name__)

LoadGenResponse = Any  # an lg.QuerySampleResponse (mlperf_loadgen ships no type information)

OFFLINE_COMPLETION_SAMPLES = 512
OFFLINE_COMPLETION_INTERVAL_S = 0.05  # a slow backend completes every batch


def contiguous_order(rows: np.ndarray) -> np.ndarray:
    """An order of Offline samples in which consecutive samples sit in consecutive rows.

    Offline may process its samples in any order. Taking one sample of every loaded row in row
    order, then the next round, makes most batches a contiguous slice of the library, which is
    gathered as a view instead of a copy (a ResNet50 sample is 588 KiB). Two stable sorts (radix
    sorts on 16-bit keys): by row, then that order by the sample's rank among its row's samples.
    """
    if not len(rows):
        return np.zeros(0, dtype=np.int64)
    top = int(rows.max()) + 1
    by_row = np.argsort(_narrow(rows, top), kind="stable")
    counts = np.bincount(rows, minlength=top)
    starts = np.cumsum(counts) - counts
    rank = np.arange(len(rows)) - np.repeat(starts, counts)
    return by_row[np.argsort(_narrow(rank, int(counts.max())), kind="stable")]


def _narrow(keys: np.ndarray, top: int) -> np.ndarray:
    """`keys` (all below `top`) as uint16 when they fit: numpy radix-sorts 16-bit keys."""
    return keys.astype(np.uint16) if top <= 1 << 16 else keys


def contiguous_batches(rows: np.ndarray, batch_size: int) -> np.ndarray:
    """For each batch of `batch_size` consecutive entries: are its rows consecutive?"""
    count = len(rows)
    starts = np.arange(0, count, batch_size)
    ends = np.minimum(starts + batch_size, count)
    breaks = np.flatnonzero(np.diff(rows) != 1)  # break i lies between entries i and i+1
    if not len(breaks):
        return np.ones(len(starts), dtype=bool)
    first_break = np.searchsorted(breaks, starts)
    return (first_break >= len(breaks)) | (
        breaks[np.minimum(first_break, len(breaks) - 1)] >= ends - 1
    )


def permutation_rounds(rows: np.ndarray, loaded: int) -> int:
    """How many leading runs of `loaded` entries of `rows` are each a permutation of
    0..loaded-1 (LoadGen's Offline equal issue), checked in one bincount."""
    count = len(rows) // loaded if loaded else 0
    if not count:
        return 0
    head = rows[: count * loaded].reshape(count, loaded)
    if int(head.max()) >= loaded:
        return 0
    keys = head + (np.arange(count, dtype=np.int64) * loaded)[:, None]
    hits = np.bincount(keys.ravel(), minlength=count * loaded)
    if np.count_nonzero(hits) == len(hits):  # every key once: every run is a permutation
        return count
    bad = np.flatnonzero((hits.reshape(count, loaded) != 1).any(axis=1))
    return int(bad[0]) if len(bad) else count


def _ids_of_rows(
    ids: Sequence[int], base: int, perm: np.ndarray, first: int, end: int
) -> list[int]:
    """The ids of the samples of rows first..end-1 of a round (`perm`: each sample's row), in
    row order."""
    positions = np.argsort(perm, kind="stable")[first:end]
    return [ids[base + p] for p in positions.tolist()]


def payload_layout(benchmark: Workload) -> tuple[tuple[int, ...], str]:
    """Shape (without the batch axis) and dtype of one sample's response payload.

    The SUTs here and the unified dispatcher ask this before LoadGen starts; they answer each
    sample once, whole (ONE_ANSWER), so a workload whose responses are of another kind is
    refused by name here."""
    if benchmark.response.kind != ONE_ANSWER:
        raise WorkloadError(
            f"the {benchmark.name} workload answers with {benchmark.response.kind!r} responses; "
            f"this harness's SUTs give {ONE_ANSWER!r} responses only"
        )
    return benchmark.response.shape, benchmark.response.dtype


def response_payload(
    benchmark: Workload, outputs: dict[str, np.ndarray], out: np.ndarray | None = None
) -> np.ndarray:
    """Per-sample payloads in the reference formats (the workload writes them), one row per
    sample, C-contiguous; written into the first rows of `out` when given, else a new array."""
    count = len(outputs[benchmark.outputs[0].name])
    if out is not None:
        payload = out[:count]
    else:
        shape, dtype = payload_layout(benchmark)
        payload = np.empty((count, *shape), dtype=dtype)
    benchmark.write_payload(outputs, payload)
    return payload


class ResponsePool:
    """One LoadGen QuerySampleResponse per row of a payload buffer, made once and reused.

    Response k points at row k of `payloads`; completing `count` samples whose payloads are in
    rows 0..count-1 only sets their ids. LoadGen reads ids, addresses and payloads inside
    QuerySamplesComplete, so the objects (and the rows) are free again when it returns.
    """

    def __init__(self, lg: LoadGenModule, payloads: np.ndarray) -> None:
        size = payloads[0].nbytes if len(payloads) else 0
        base = payloads.ctypes.data
        response = lg.QuerySampleResponse
        self._responses = [response(0, base + k * size, size) for k in range(len(payloads))]

    def __len__(self) -> int:
        return len(self._responses)

    def set_ids(self, start: int, ids: Sequence[int]) -> None:
        """Give responses start.. the ids `ids` (their samples' payloads are in those rows)."""
        chunk = self._responses[start : start + len(ids)]
        collections.deque(map(setattr, chunk, repeat("id"), ids), maxlen=0)

    def first(self, count: int) -> list[LoadGenResponse]:
        """The first `count` responses, for one QuerySamplesComplete call."""
        return self._responses[:count]


class BatchRunner:
    """Runs batches on the backend and completes their samples; counts and records errors.

    Payloads are staged in one buffer, with a reused response per row (`ResponsePool`). Stream
    and Server batches are completed as soon as they ran; Offline completes up to
    `completion_samples` at a time with one QuerySamplesComplete call, and at least every
    OFFLINE_COMPLETION_INTERVAL_S, so that a slow backend still reports each batch (latencies
    and progress stay meaningful). A failed batch is completed at once, without data.
    """

    def __init__(
        self,
        *,
        lg: LoadGenModule,
        backend: Backend,
        library: SampleLibrary,
        batch_size: int,
        progress: Callable[[int], None] | None = None,
        completion_samples: int = 0,
    ) -> None:
        self._lg = lg
        self._backend = backend
        self._library = library
        self._benchmark = backend.benchmark
        self.batch_size = batch_size
        self._feeds = {
            name: np.empty((batch_size, *buf.shape[1:]), dtype=buf.dtype)
            for name, buf in library.buffers.items()
        }
        shape, dtype = payload_layout(self._benchmark)
        self._staging = np.empty((max(batch_size, completion_samples), *shape), dtype=dtype)
        self._pool = ResponsePool(lg, self._staging)
        self._staged = 0
        self._last_flush = time.monotonic()
        self._counter = CompletionCounter(progress)
        self.failed_samples = 0
        self.error: str | None = None
        self.aborted = False
        self._round: np.ndarray | None = None  # Offline: one round's payloads, by row
        self._rows: np.ndarray | None = None  # Offline: 0..loaded-1

    @property
    def completed(self) -> int:
        """Samples completed so far (what the LoadGen test reports)."""
        return self._counter.completed

    def abort(self, exc: Exception) -> None:
        """Fail the run and complete every further sample at once, without the backend."""
        self._record_error(exc, 0)
        self.aborted = True

    def run_offline(self, ids: Sequence[int], indices: Sequence[int]) -> None:
        """Run the whole Offline query in batches of consecutive library rows.

        LoadGen issues an Offline query as rounds: each run of `loaded` samples is a permutation
        of the loaded set (equal issue). Such a round is run in row order (every batch a view of
        the library) and completed in LoadGen's own order, ids taken as LoadGen gave them, as the
        bare pooled SUT does; only the payloads are put back in that order (one np.take a
        completion). Whatever is not such a round (the last, partial one; any other issue order)
        is run in `contiguous_order`, its ids permuted with it.
        """
        try:
            rows = self._library.slots(indices)
            loaded = self._library.loaded_count
            # a round smaller than a batch would run as smaller batches: reorder instead
            rounds = permutation_rounds(rows, loaded) if loaded >= self.batch_size else 0
        except Exception as exc:
            self._complete_empty(ids, exc)
            return
        if rounds:
            self.flush()
            payloads, row_range = self._round_payloads(loaded), self._row_range(loaded)
        for round_number in range(rounds):
            self._run_round(ids, rows, round_number * loaded, payloads, row_range)
        done = rounds * loaded
        if done < len(ids):
            self._run_reordered(ids[done:] if done else ids, rows[done:])
        self.flush()

    def _run_round(
        self,
        ids: Sequence[int],
        rows: np.ndarray,
        base: int,
        payloads: np.ndarray,
        row_range: np.ndarray,
    ) -> None:
        """Run rows 0..loaded-1 (the samples at base.. of the query, a permutation of them) in
        batches of consecutive rows, payloads into `payloads` by row; complete them in the
        query's order at the end, or, once a batch took longer than
        OFFLINE_COMPLETION_INTERVAL_S (a slow backend), each batch as it ran (its ids gathered
        by row)."""
        size = self.batch_size
        loaded = len(row_range)
        perm = rows[base : base + loaded]  # the row of each sample of the round, in query order
        pending = 0  # rows [pending, end) ran but are not completed yet
        for start in range(0, loaded, size):
            end = min(start + size, loaded)
            try:
                if self.aborted:
                    raise RuntimeError("the run was aborted")
                feeds = self._library.gather(row_range[start:end], self._feeds, contiguous=True)
                outputs = self._backend.run(feeds)
                response_payload(self._benchmark, outputs, payloads[start:])
            except Exception as exc:
                self._complete_rows(ids, base, perm, pending, start, payloads)
                self._complete_empty(_ids_of_rows(ids, base, perm, start, end), exc)
                pending = end
                continue
            if time.monotonic() - self._last_flush >= OFFLINE_COMPLETION_INTERVAL_S:
                self._complete_rows(ids, base, perm, pending, end, payloads)
                pending = end
        if pending == 0:
            self._complete_in_order(ids, base, perm, payloads)
        else:
            self._complete_rows(ids, base, perm, pending, loaded, payloads)

    def _complete_in_order(
        self, ids: Sequence[int], base: int, perm: np.ndarray, payloads: np.ndarray
    ) -> None:
        """Complete a whole round in the query's order: ids sliced as LoadGen gave them, each
        sample's payload taken from its row."""
        step = len(self._staging)
        for start in range(0, len(perm), step):
            chunk = perm[start : start + step]
            count = len(chunk)
            np.take(payloads, chunk, axis=0, out=self._staging[:count])
            self._pool.set_ids(0, ids[base + start : base + start + count])
            self._lg.QuerySamplesComplete(self._pool.first(count))
            self._counter.add(count)
        self._last_flush = time.monotonic()

    def _complete_rows(
        self,
        ids: Sequence[int],
        base: int,
        perm: np.ndarray,
        first: int,
        end: int,
        payloads: np.ndarray,
    ) -> None:
        """Complete the samples of rows first..end-1 of a round (their payloads in those rows)."""
        if first >= end:
            return
        row_ids = _ids_of_rows(ids, base, perm, first, end)
        step = len(self._staging)
        for start in range(0, len(row_ids), step):
            chunk = row_ids[start : start + step]
            count = len(chunk)
            self._staging[:count] = payloads[first + start : first + start + count]
            self._pool.set_ids(0, chunk)
            self._lg.QuerySamplesComplete(self._pool.first(count))
            self._counter.add(count)
        self._last_flush = time.monotonic()

    def _round_payloads(self, loaded: int) -> np.ndarray:
        """The payload buffer of a round, one row per library row (kept across queries)."""
        if self._round is None or len(self._round) != loaded:
            shape, dtype = payload_layout(self._benchmark)
            self._round = np.empty((loaded, *shape), dtype=dtype)
        return self._round

    def _row_range(self, loaded: int) -> np.ndarray:
        if self._rows is None or len(self._rows) != loaded:
            self._rows = np.arange(loaded, dtype=np.int64)
        return self._rows

    def _run_reordered(self, ids: Sequence[int], rows: np.ndarray) -> None:
        """Run samples in an order that keeps batches contiguous (`contiguous_order`).

        Reordering costs about 0.15 us a sample; copying a scattered batch costs more already
        for BERT's 9 KiB samples (1.5 us) and far more for ResNet50's 588 KiB.
        """
        size = self.batch_size
        try:
            order = contiguous_order(rows)
            rows = rows[order]
            ids = np.fromiter(ids, dtype=np.uint64, count=len(ids))[order].tolist()
            contiguous = contiguous_batches(rows, size).tolist()
        except Exception as exc:
            self._complete_empty(ids, exc)
            return
        for batch, start in enumerate(range(0, len(ids), size)):
            end = start + size
            self.run_rows(ids[start:end], rows[start:end], contiguous[batch], defer=True)

    def run_chunked(self, ids: Sequence[int], indices: Sequence[int]) -> None:
        """Run a stream query (or a Server batch) in batches of at most `batch_size`."""
        try:
            rows = self._library.slots(indices)
        except Exception as exc:
            self._complete_empty(ids, exc)
            return
        size = self.batch_size
        for start in range(0, len(ids), size):
            self.run_rows(ids[start : start + size], rows[start : start + size], None, defer=False)

    def run_rows(
        self, ids: Sequence[int], rows: np.ndarray, contiguous: bool | None, *, defer: bool
    ) -> None:
        """Run one batch (at most `batch_size` library rows); complete it now unless `defer`."""
        count = len(ids)
        if self._staged + count > len(self._staging):
            self.flush()
        try:
            if self.aborted:
                raise RuntimeError("the run was aborted")
            feeds = self._library.gather(rows, self._feeds, contiguous=contiguous)
            outputs = self._backend.run(feeds)
            response_payload(self._benchmark, outputs, self._staging[self._staged :])
        except Exception as exc:
            self._complete_empty(ids, exc)
            return
        self._pool.set_ids(self._staged, ids)
        self._staged += count
        if not defer or time.monotonic() - self._last_flush >= OFFLINE_COMPLETION_INTERVAL_S:
            self.flush()

    def flush(self) -> None:
        """Complete every staged sample with one call; LoadGen copies the payloads in it."""
        if not self._staged:
            return
        count, self._staged = self._staged, 0
        self._lg.QuerySamplesComplete(self._pool.first(count))
        self._last_flush = time.monotonic()
        self._counter.add(count)

    def _record_error(self, exc: Exception, count: int) -> None:
        if self.error is None:
            self.error = f"{type(exc).__name__}: {exc}"
            logger.error("run failed, samples are completed without data: %s", self.error)
        self.failed_samples += count

    def _complete_empty(self, ids: Sequence[int], exc: Exception) -> None:
        """Complete `ids` at once without data (after what is staged) and record the error."""
        self.flush()
        self._record_error(exc, len(ids))
        response = self._lg.QuerySampleResponse
        self._lg.QuerySamplesComplete([response(qid, 0, 0) for qid in ids])
        self._last_flush = time.monotonic()
        self._counter.add(len(ids))


class InlineSUT:
    """Offline, SingleStream and MultiStream: the backend runs inside the issue callback."""

    def __init__(self, runner: BatchRunner, *, offline: bool) -> None:
        self.runner = runner
        self._issue = runner.run_offline if offline else runner.run_chunked

    def issue(self, ids: Sequence[int], indices: Sequence[int]) -> None:
        self._issue(ids, indices)

    def flush(self) -> None:
        """Nothing is held back: every query is complete when issue returns."""

    def start(self) -> None:
        """No threads to start."""

    def stop(self) -> None:
        """No threads to stop."""


class BatchingSUT:
    """Server: the issue callback only enqueues; one batcher thread forms dynamic batches.

    A batch closes when it holds `batch_size` samples or `window_s` after its first sample was
    taken, whichever comes first. The issue callback wakes the batcher only when it sleeps, and
    the interpreter's thread switch interval is shortened while the test runs, so that LoadGen's
    issue thread does not wait up to 5 ms for the GIL behind the batcher.
    """

    SWITCH_INTERVAL_S = 0.0002

    def __init__(self, runner: BatchRunner, *, window_s: float) -> None:
        self.runner = runner
        self.window_s = window_s
        self._queue: collections.deque[tuple[Sequence[int], Sequence[int]]] = collections.deque()
        self._wakeup = threading.Event()
        self._sleeping = False
        self._stopping = False
        self._saved_interval = sys.getswitchinterval()
        self._thread = threading.Thread(target=self._loop, name="mlperf-mig-batcher", daemon=True)

    def issue(self, ids: Sequence[int], indices: Sequence[int]) -> None:
        self._queue.append((ids, indices))
        if self._sleeping:
            self._wakeup.set()

    def flush(self) -> None:
        """The batcher drains the queue on its own."""

    def start(self) -> None:
        sys.setswitchinterval(self.SWITCH_INTERVAL_S)
        self._thread.start()

    def stop(self) -> None:
        """Stop the batcher after it has completed everything that was queued."""
        self._stopping = True
        self._wakeup.set()
        self._thread.join()
        sys.setswitchinterval(self._saved_interval)

    def _sleep(self, timeout: float | None) -> None:
        """Wait for an issue (or `timeout`) unless something is queued already."""
        self._sleeping = True
        self._wakeup.clear()
        if not self._queue and not self._stopping:
            self._wakeup.wait(timeout)
        self._sleeping = False

    def _loop(self) -> None:
        while True:
            if not self._queue:
                if self._stopping:
                    return
                self._sleep(None)
                continue
            ids, indices = self._take_batch()
            self.runner.run_chunked(ids, indices)

    def _take_batch(self) -> tuple[list[int], list[int]]:
        size = self.runner.batch_size
        ids: list[int] = []
        indices: list[int] = []
        deadline = time.monotonic() + self.window_s
        while True:
            while self._queue and len(ids) < size:
                more_ids, more_indices = self._queue.popleft()
                room = size - len(ids)
                if len(more_ids) > room:  # a coalesced query larger than the batch
                    self._queue.appendleft((more_ids[room:], more_indices[room:]))
                ids.extend(more_ids[:room])
                indices.extend(more_indices[:room])
            remaining = deadline - time.monotonic()
            if len(ids) >= size or remaining <= 0 or self._stopping:
                return ids, indices
            self._sleep(remaining)
