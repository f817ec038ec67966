"""Unified mode: one LoadGen and one SUT for the whole layout, dispatching to the instance workers.

Processes of one unified round (all spawned and supervised by the runner, like independent mode):
    coordinator   LoadGen + QSL + DispatchingSUT (`coordinate`); its log is the layout's result
    workers       one per instance (`serve_instance`): load the engine, serve batches, reply
The sample set lives once in shared memory (`SharedSamples`, created by the runner): the
coordinator's QSL writes loaded samples into it, the workers read the rows they are sent. Batches
go out as descriptors ("batch", batch id, sample ids, rows, dataset indices), the rows a `range`
when they are consecutive; a worker that reads the shared arrays says so with its target
("target", target, True, key) (key: of a target reused from the cache folder, else None;
harness/reuse.py) and is sent ("batch", batch id, None, rows, None): the sample ids stay
in the coordinator's table of batches in flight. Responses come back as plain (batch ids, bytes, item size)
(LoadGen's QuerySampleResponse does not unpickle, trap 7). Offline orders its query as the
independent SUT does (`contiguous_order`), so that a worker reads most batches as views of the
shared arrays; other batches are gathered into one reused buffer per worker.

Dispatch is least outstanding work weighted by capacity: each batch goes to the worker with the
smallest (outstanding + batch) / compute slices, and a worker holds at most WINDOW_BATCHES batches
per compute slice, so a saturated layout (Offline) is fed in proportion to what each instance
actually completes, and a lightly loaded one (Server) sends each query to the least busy capacity.
A worker that dies, or answers nothing for the reply timeout with work in flight (hung), has its
in-flight batches re-sent to the others; every sample is completed and the run names it.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import heapq
import itertools
import json
import logging
import pickle
import selectors
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from multiprocessing import shared_memory
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

if TYPE_CHECKING:
    from mlperf_mig.harness.loadgen_test import LoadGenTest
    from mlperf_mig.harness.task import InstanceTask

log = logging.getLogger(__name__)

WINDOW_BATCHES = 2
# A large query (Offline) goes out in chunks of several batches where a worker is fast enough:
# one message, one reply and one QuerySamplesComplete per chunk instead of per batch (a round
# trip cost the coordinator ~0.3 ms on the 2-core test machine, as much as LoadGen's own work
# for 256 samples; null backend, layout 7: 440k samples/s with 256-sample messages, ~800k with
# chunks of 2048). A chunk holds what the whole layout completes in CHUNK_SECONDS, scaled by the
# worker's weight against the mean: sized by the worker's own rate, chunks shrank as instances
# were added (56 instances sharing the same rate got 56x smaller chunks, and the coordinator's
# messages a sample grew with the instance count). A slow layout still completes every batch on
# its own (latencies and progress stay as fine-grained as its batches), and as the query runs
# out chunks shrink to each worker's share of what is left, so that the last ones end together.
CHUNK_SAMPLES = 2048
CHUNK_PAYLOAD_BYTES = 1 << 20
CHUNK_SECONDS = 0.02
SERVER_FLUSH_S = 0.001
ISSUE_TIMED_EVERY = 16  # the coordinator times one issue callback in this many (_CpuClock)
# samples go to a worker's copy of the shared arrays (a cluster node's) in messages of about
# this size (a ResNet50 sample is 588 KiB)
MIRROR_FRAME_BYTES = 8 << 20
# ids, rows (a range when consecutive), dataset indices (a list, or an array until sent)
_Batch = tuple[list[int], Sequence[int], Sequence[int] | np.ndarray]
_POLL_S = 0.5
_SMALL_BATCH = 16
_PICKLE_PROTOCOL = pickle.HIGHEST_PROTOCOL
_PROGRESS_INTERVAL_S = 0.5


# --- shared sample memory ------------------------------------------------------------------------
@attrs.frozen(kw_only=True)
class SharedArraySpec:
    """How to attach one input's sample array in shared memory: [capacity, *sample shape]."""

    input_name: str
    shm_name: str
    shape: tuple[int, ...]
    dtype: str


class SharedSamples:
    """The sample set of a unified run, once, in shared memory; owned (and unlinked) by the runner."""

    def __init__(self, layouts: Sequence[Any], capacity: int) -> None:
        self._blocks: list[shared_memory.SharedMemory] = []
        specs = []
        try:
            for layout in layouts:
                shape = (capacity, *layout.shape)
                size = int(np.prod(shape)) * np.dtype(layout.dtype).itemsize
                block = shared_memory.SharedMemory(create=True, size=max(size, 1))
                self._blocks.append(block)
                specs.append(
                    SharedArraySpec(
                        input_name=layout.name, shm_name=block.name, shape=shape, dtype=layout.dtype
                    )
                )
        except BaseException:
            self.close()
            raise
        self.specs = tuple(specs)
        self.nbytes = sum(b.size for b in self._blocks)
        log.info(
            "shared samples: %s (%d bytes)", " ".join(b.name for b in self._blocks), self.nbytes
        )

    def close(self) -> None:
        """Release and unlink every block (the workers' mappings stay valid until they exit)."""
        for block in self._blocks:
            block.close()
            block.unlink()
        self._blocks = []

    def __enter__(self) -> SharedSamples:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def attach_samples(
    specs: Sequence[SharedArraySpec],
) -> tuple[dict[str, np.ndarray], list[shared_memory.SharedMemory]]:
    """Numpy views of the shared sample arrays, and the blocks that must outlive them.

    The mappings are released when the process exits; the runner unlinks the blocks.
    """
    blocks = [shared_memory.SharedMemory(name=spec.shm_name) for spec in specs]
    arrays = {
        spec.input_name: np.ndarray(spec.shape, dtype=spec.dtype, buffer=block.buf)
        for spec, block in zip(specs, blocks)
    }
    return arrays, blocks


# --- jobs ------------------------------------------------------------------------------------------
@attrs.frozen(kw_only=True)
class CoordinatorJob:
    """Payload of the coordinator: the layout's LoadGen test and the links to the workers."""

    task: InstanceTask  # of the whole layout (engine None: no model here)
    samples: tuple[SharedArraySpec, ...]
    performance_count: int  # LoadGen's; the shared arrays may hold a few rows more (MultiStream)
    links: tuple[Connection, ...]
    names: tuple[str, ...]
    weights: tuple[float, ...]
    batch_size: int
    synthetic_weights: bool
    ready_timeout_s: float
    reply_timeout_s: float | None = None  # a worker silent this long with work in flight is dropped
    # the target message ("target", ...) of each link already known to the runner (a cluster
    # node's, measured by the driver before the coordinator started), None for a link whose
    # worker sends its own; empty: every worker sends its own
    preset_targets: tuple[tuple[Any, ...] | None, ...] = ()


@attrs.frozen(kw_only=True)
class ServeJob:
    """Payload of one instance worker: its engine, the shared samples and its link."""

    task: InstanceTask  # of this instance (engine, threads, loadgen scenario, settings)
    samples: tuple[SharedArraySpec, ...]
    link: Connection
    batch_size: int


# --- the dispatcher (coordinator side) -------------------------------------------------------------
class Dispatcher:
    """Least-outstanding-work dispatch, weighted by capacity, with re-send on worker death."""

    def __init__(
        self,
        links: Sequence[Connection],
        weights: Sequence[float],
        *,
        batch_size: int,
        complete: Callable[[Sequence[int], bytes, int], None],
        reply_timeout_s: float | None = None,
        largest_batch: int | None = None,
        rows_only: Sequence[bool] | None = None,
        mirrors: Sequence[bool] | None = None,
        flush_s: float | None = None,
        arrays: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        """`largest_batch` (at least `batch_size`): the most samples one message may carry when a
        query is large and a worker fast enough (see CHUNK_SECONDS); batch_size when None.
        `rows_only[i]`: worker i reads the shared arrays and is sent rows without sample ids
        or dataset indices (every worker gets all three when None). `mirrors[i]`: worker i
        reads a copy of them (a cluster node's), which each load fills from `arrays` (the
        shared sample arrays, `mirror_samples`).
        `flush_s`: submitted samples wait up to this long and go out together (`flush`, called
        by the receiver at least that often): one message a worker a flush, not one a query
        (Server: a pipe write cost ~30 us on the 2-core test machine, most of a query's cost)."""
        self.flush_s = flush_s
        self._links = list(links)
        self._rows_only = list(rows_only) if rows_only is not None else [False] * len(self._links)
        self._mirrors = SampleMirrors(self._links, arrays or {}, mirrors)
        self._reply_timeout_s = reply_timeout_s
        self._stopped = False
        self._waiting_since: list[float | None] = [None] * len(self._links)
        self.stalled: list[int] = []
        self._weights = [float(w) for w in weights]
        self._largest = max(batch_size, largest_batch or batch_size)
        # batches a worker may hold; the window in samples is that many of its current chunk
        self._slots = [max(1, round(WINDOW_BATCHES * w)) for w in self._weights]
        self._chunk = [batch_size] * len(self._links)
        self._first_send: float | None = None  # of the query being chunked
        self._mean_weight = sum(self._weights) / max(1, len(self._weights))
        self._live_weight = sum(self._weights)
        # the most samples one reply can hold: a window of the largest chunks, and one more
        self.largest_reply = max(self._slots, default=0) * self._largest + self._largest
        self._batch_size = batch_size
        self._complete = complete
        self._lock = threading.Lock()
        # a batch is (LoadGen sample ids, rows of the shared sample arrays, dataset indices);
        # _pending holds whole batches (to re-send), _queries the submitted samples not yet cut
        self._pending: collections.deque[_Batch] = collections.deque()
        self._queries: collections.deque[_Query] = collections.deque()
        self._queued = 0  # samples in _queries
        self._inflight: list[dict[int, _Batch]] = [{} for _ in self._links]
        self._outstanding = [0] * len(self._links)
        # the least loaded worker of each weight without a scan of all: per weight a heap of
        # (outstanding, worker), an entry stale once the worker's outstanding work changed
        self._heaps: dict[float, list[tuple[int, int]]] = {}
        self._members: dict[float, list[int]] = {}
        for worker, weight in enumerate(self._weights):
            self._heaps.setdefault(weight, []).append((0, worker))
            self._members.setdefault(weight, []).append(worker)
        self._next_stall_check = 0.0
        self.alive = [True] * len(self._links)
        self.served = [0] * len(self._links)
        self.completed = 0
        self.messages = 0  # batches sent and replies read: what a sample costs the dispatch
        self.failed_samples = 0
        self.error: str | None = None
        self._aborted = False
        self._ids = itertools.count()

    def abort(self, error: str) -> None:
        """Fail the run (a sample could not be loaded): every sample submitted from now on is
        completed at once, without data and without the workers."""
        with self._lock:
            if self.error is None:
                self.error = error
                log.error("run failed, samples are completed without data: %s", error)
            self._aborted = True

    def submit(
        self,
        ids: Sequence[int] | np.ndarray,
        rows: Sequence[int] | np.ndarray,
        indices: Sequence[int] | np.ndarray,
    ) -> None:
        """Queue samples and send what the windows allow; they are cut into batches (or chunks,
        see CHUNK_SECONDS) as they go out. Workers read the rows (sent as a `range` where a
        batch's rows are consecutive); `indices` (the samples' dataset indices) let a remote
        worker cache sample data."""
        with self._lock:
            if self._aborted:
                self.failed_samples += len(ids)
                self.completed += len(ids)
                self._complete(_int_list(ids), b"", 0)
                return
            if len(ids):
                self._queries.append(_Query(ids, rows, indices))
                self._queued += len(ids)
            if self.flush_s is None:
                self._pump()

    def flush(self) -> None:
        """Send what was submitted and the windows allow (the receiver calls it)."""
        if self._queries or self._pending:
            with self._lock:
                self._pump()

    def _choose(self, size: int) -> int | None:
        """The live worker whose (outstanding + size) / weight is least, among those with room
        in their window (ties: the lowest index); None when every window is full. Its cost
        grows with the number of distinct weights, not of workers."""
        best, best_key = None, None
        for weight in self._heaps:
            worker = self._least_loaded(weight)
            if worker is None:
                continue
            key = ((self._outstanding[worker] + size) / weight, worker)
            if best_key is None or key < best_key:
                best, best_key = worker, key
        return best

    def _least_loaded(self, weight: float) -> int | None:
        """The worker of one weight with the least outstanding work and room in its window."""
        heap = self._heaps[weight]
        while heap and (not self.alive[heap[0][1]] or heap[0][0] != self._outstanding[heap[0][1]]):
            heapq.heappop(heap)
        if not heap:
            return None
        worker = heap[0][1]
        if self._outstanding[worker] < self._slots[worker] * self._chunk[worker]:
            return worker
        if self._largest == self._batch_size:  # windows of one weight are alike: all full
            return None
        # chunks differ between workers (Offline): another may have room; once a chunk, not a
        # query, so the scan costs little
        room = [
            (self._outstanding[w], w)
            for w in self._members[weight]
            if self.alive[w] and self._outstanding[w] < self._slots[w] * self._chunk[w]
        ]
        return min(room)[1] if room else None

    def _account(self, worker: int, samples: int) -> None:
        """Change the worker's outstanding samples by `samples` and record its new load."""
        self._outstanding[worker] += samples
        heap = self._heaps[self._weights[worker]]
        heapq.heappush(heap, (self._outstanding[worker], worker))
        if len(heap) > 8 * len(self._links) + 64:  # drop the stale entries now and then
            heap[:] = [(o, w) for o, w in heap if o == self._outstanding[w] and self.alive[w]]
            heapq.heapify(heap)

    def _pump(self) -> None:
        while self._pending or self._queries:
            if not any(self.alive):
                self._fail_pending()
                return
            if self._pending:
                size = len(self._pending[0][0])
            else:
                size = min(self._batch_size, self._queued)
            worker = self._choose(size)
            if worker is None:
                return
            batch = self._pending.popleft() if self._pending else self._cut(self._cut_size(worker))
            batch_id = next(self._ids)
            ids, rows, indices = batch
            if self._rows_only[worker]:
                message: tuple[Any, ...] = ("batch", batch_id, None, rows, None)
            else:
                message = ("batch", batch_id, ids, rows, _int_list(indices))
            try:
                # plain pickle: a third cheaper than Connection.send's ForkingPickler
                self._links[worker].send_bytes(pickle.dumps(message, _PICKLE_PROTOCOL))
            except (BrokenPipeError, OSError):
                self._pending.appendleft(batch)
                self._mark_dead(worker)
                continue
            self._inflight[worker][batch_id] = batch
            self._account(worker, len(ids))
            self.messages += 1
            now = time.monotonic()
            if self._waiting_since[worker] is None:
                self._waiting_since[worker] = now
            if self._first_send is None:
                self._first_send = now

    def _cut_size(self, worker: int) -> int:
        """Samples of the worker's next message: its chunk, or while fewer samples are queued
        than a chunk for every worker, its share of them (whole batches, at least one)."""
        chunk = self._chunk[worker]
        if chunk == self._batch_size:
            return chunk
        share = self._queued * self._weights[worker] / max(self._live_weight, 1e-9)
        batches = -(-int(share) // self._batch_size)
        return max(self._batch_size, min(chunk, batches * self._batch_size))

    def _cut(self, size: int) -> _Batch:
        """The next `size` submitted samples as one batch: several queued queries (Server's
        of one sample each, when the windows were full) go out as one message."""
        query = self._queries[0]
        if query.left >= size or len(self._queries) == 1:
            part_ids, part_rows, part_indices = query.take(size)
            if not query.left:
                self._queries.popleft()
            self._queued -= len(part_ids)
            return _int_list(part_ids), _row_descriptor(part_rows), part_indices
        # the rows' descriptor is made once for the message, not once a query
        ids: list[int] = []
        rows: list[int] = []
        indices: list[int] = []
        while self._queries and len(ids) < size:
            query = self._queries[0]
            part_ids, part_rows, part_indices = query.take(size - len(ids))
            ids += _int_list(part_ids)
            rows += _int_list(part_rows)
            indices += _int_list(part_indices)
            if not query.left:
                self._queries.popleft()
        self._queued -= len(ids)
        return ids, _row_descriptor(rows), indices

    def _resize_chunk(self, worker: int, now: float) -> None:
        """The worker's next chunks: CHUNK_SECONDS of the layout's rate so far, scaled by the
        worker's weight against the mean, in whole batches, at least one batch and at most
        `largest_batch`. Only a worker that reads the shared arrays (or a copy) gets chunks: it
        splits them into backend calls of its batch size."""
        first = self._first_send
        if not self._rows_only[worker] or self._largest == self._batch_size:
            return
        if first is None or now <= first:
            return
        self._chunk[worker] = chunk_samples(
            self.completed / (now - first),
            self._weights[worker] / self._mean_weight,
            self._batch_size,
            self._largest,
        )

    def done(self, worker: int, batch_ids: Sequence[int], blob: bytes, item_size: int) -> None:
        """A worker's reply: complete its samples with LoadGen and send more work."""
        with self._lock:
            if not self.alive[worker]:
                return  # its batches were re-sent to the others when it was given up
            self.messages += 1
            ids: list[int] = []
            for batch_id in batch_ids:
                ids.extend(self._inflight[worker].pop(batch_id)[0])
            self._account(worker, -len(ids))
            self.served[worker] += len(ids)
            self.completed += len(ids)
            now = time.monotonic()
            self._waiting_since[worker] = now if self._outstanding[worker] else None
            self._resize_chunk(worker, now)
            if self.flush_s is None:  # else the receiver flushes after the replies it read
                self._pump()
        self._complete(ids, blob, item_size)

    def check_stalled(self) -> None:
        """Drop every worker that has had work in flight and answered nothing for the reply
        timeout (hung, or stopped with SIGSTOP): its batches go to the others."""
        now = time.monotonic()
        if self._reply_timeout_s is None or now < self._next_stall_check:
            return
        self._next_stall_check = now + _POLL_S
        with self._lock:
            for worker, since in enumerate(self._waiting_since):
                if self.alive[worker] and since is not None and now - since > self._reply_timeout_s:
                    log.warning(
                        "worker %d answered nothing for %.0f s; dropping it", worker, now - since
                    )
                    self.stalled.append(worker)
                    self._mark_dead(worker)
            self._pump()

    def worker_died(self, worker: int) -> None:
        with self._lock:
            if self._stopped:
                return  # it ended because the test is over, not lost
            self._mark_dead(worker)
            self._pump()

    def _mark_dead(self, worker: int) -> None:
        if not self.alive[worker]:
            return
        self.alive[worker] = False
        self._live_weight -= self._weights[worker]
        self._waiting_since[worker] = None
        batches = list(self._inflight[worker].values())
        self._inflight[worker].clear()
        self._outstanding[worker] = 0
        self._mirrors.drop(worker)
        for batch in reversed(batches):
            if len(batch[0]) > self._batch_size:  # a chunk: cut again for whoever takes it
                self._queries.appendleft(_Query(batch[0], list(batch[1]), batch[2]))
                self._queued += len(batch[0])
            else:
                self._pending.appendleft(batch)
        log.warning("worker %d is gone; re-sending its %d in-flight batches", worker, len(batches))

    def _fail_pending(self) -> None:
        if self.error is None:
            self.error = "every instance worker is gone; samples completed without data"
            log.error(self.error)
        while self._pending:
            ids = self._pending.popleft()[0]
            self.failed_samples += len(ids)
            self.completed += len(ids)
            self._complete(ids, b"", 0)
        self._queued = 0
        while self._queries:
            query = self._queries.popleft()
            ids = query.cut(query.left)[0]
            self.failed_samples += len(ids)
            self.completed += len(ids)
            self._complete(ids, b"", 0)

    def mirror_samples(self, count: int, timeout_s: float) -> None:
        """Fill every live worker's copy of the shared arrays with rows 0..count-1 (a load just
        wrote them) and wait until each says it has them (SampleMirrors); one that has not
        within `timeout_s` is given up (its batches go to the others). LoadGen loads samples
        only when no query is in flight, so no batch is sent meanwhile."""
        with self._lock:
            for worker in self._mirrors.send(count, self.alive):
                self._mark_dead(worker)
        for worker in self._mirrors.wait(count, timeout_s):
            self.worker_died(worker)

    @property
    def mirror_cpu_s(self) -> float:
        """CPU spent sending loaded samples to the workers' copies."""
        return self._mirrors.cpu_s

    def samples_taken(self, worker: int) -> None:
        """Worker `worker` has the samples of the last load (its answer to mirror_samples)."""
        self._mirrors.taken(worker)

    def stop_workers(self) -> None:
        """Tell every worker still listening (given up on or not) that the test is over."""
        with self._lock:
            self._stopped = True
            for link in self._links:
                with contextlib.suppress(BrokenPipeError, OSError):
                    link.send(("stop",))


class SampleMirrors:
    """The workers that keep a copy of the shared sample arrays (a cluster node's), which each
    load fills: ("samples", ...) frames (`send_rows`), then ("sync", count), which a worker
    answers ("loaded", count) once it has them. Both unified coordinators (samples and token
    streams) send through it and hand it the answers their receivers read."""

    def __init__(
        self,
        links: Sequence[Connection],
        arrays: Mapping[str, np.ndarray],
        mirrors: Sequence[bool] | None,
    ) -> None:
        """`mirrors[i]`: worker i keeps a copy of `arrays` (none does when None)."""
        self._links = list(links)
        self._arrays = arrays
        self._mirrors = list(mirrors) if mirrors is not None else [False] * len(self._links)
        self._waiting: set[int] = set()  # workers yet to take the samples of a load
        self._taken = threading.Condition()
        self.cpu_s = 0.0  # CPU sending loaded samples to the workers' copies

    def send(self, count: int, alive: Sequence[bool]) -> list[int]:
        """Send rows 0..count-1 of the arrays to every live worker that keeps a copy; the
        workers whose link failed (lost)."""
        workers = [w for w, m in enumerate(self._mirrors) if m and alive[w]]
        with self._taken:
            self._waiting.update(workers)
        began = time.thread_time()
        failed = []
        for worker in workers:
            try:
                send_rows(self._links[worker], self._arrays, 0, count)
                self._links[worker].send(("sync", count))
            except (BrokenPipeError, OSError):
                self.drop(worker)
                failed.append(worker)
        self.cpu_s += time.thread_time() - began
        return failed

    def wait(self, count: int, timeout_s: float) -> list[int]:
        """Wait until every worker sent to has answered; those that have not within
        `timeout_s` (logged, to be given up)."""
        deadline = time.monotonic() + timeout_s
        with self._taken:
            while self._waiting and time.monotonic() < deadline:
                self._taken.wait(min(_POLL_S, max(0.0, deadline - time.monotonic())))
            late = sorted(self._waiting)
            self._waiting.clear()
        for worker in late:
            log.error(
                "worker %d did not take the %d loaded samples within %.0f s; dropping it",
                worker,
                count,
                timeout_s,
            )
        return late

    def taken(self, worker: int) -> None:
        """Worker `worker` answered ("loaded", count)."""
        with self._taken:
            self._waiting.discard(worker)
            self._taken.notify_all()

    def drop(self, worker: int) -> None:
        """Worker `worker` is lost: no load waits for it."""
        self.taken(worker)


def send_rows(link: Connection, arrays: Mapping[str, np.ndarray], start: int, stop: int) -> None:
    """Rows start..stop-1 of the shared arrays to a worker that keeps a copy of them: for each
    part of about MIRROR_FRAME_BYTES, ("samples", first row, count, input names), then the
    rows of each input as one raw message (the worker reads them straight into its copy)."""
    names = list(arrays)
    row_bytes = sum(a[0].nbytes for a in arrays.values()) or 1
    step = max(1, MIRROR_FRAME_BYTES // row_bytes)
    for first in range(start, stop, step):
        count = min(stop, first + step) - first
        link.send(("samples", first, count, names))
        for name in names:
            link.send_bytes(
                np.ascontiguousarray(arrays[name][first : first + count]).data.cast("B")
            )


class _Query:
    """Submitted samples not yet sent, cut into batches from the front as workers take them."""

    def __init__(
        self,
        ids: Sequence[int] | np.ndarray,
        rows: Sequence[int] | np.ndarray,
        indices: Sequence[int] | np.ndarray,
    ) -> None:
        self._ids = ids
        # a list stays a list (a Server query: plain Python costs less than numpy)
        self._rows = rows if isinstance(rows, list) else np.asarray(rows, dtype=np.int64)
        self._indices = indices
        self._next = 0
        self.left = len(ids)

    def take(self, size: int) -> tuple[Any, Any, Any]:
        """The next `size` samples (fewer at the end): their ids, rows and dataset indices,
        as slices of what was submitted."""
        start, end = self._next, self._next + size
        self._next = min(end, len(self._rows))
        self.left = len(self._rows) - self._next
        return self._ids[start:end], self._rows[start:end], self._indices[start:end]

    def cut(self, size: int) -> _Batch:
        """The next `size` samples (fewer at the end) as one batch."""
        ids, rows, indices = self.take(size)
        return _int_list(ids), _row_descriptor(rows), indices


def _int_list(values: Sequence[int] | np.ndarray) -> list[int]:
    """Python ints, as LoadGen's responses and the pipe's messages take them."""
    return values.tolist() if isinstance(values, np.ndarray) else list(values)


def _row_descriptor(rows: Sequence[int] | np.ndarray) -> Sequence[int]:
    """A batch's rows as sent: `range(first, last + 1)` when consecutive, else a list."""
    if len(rows) <= _SMALL_BATCH:  # a Server query or a few: plain Python costs less than numpy
        small = [int(r) for r in rows]
        if small and all(b - a == 1 for a, b in itertools.pairwise(small)):
            return range(small[0], small[-1] + 1)
        return small
    rows = np.asarray(rows, dtype=np.int64)
    if len(rows) and rows[-1] - rows[0] == len(rows) - 1 and bool(np.all(np.diff(rows) == 1)):
        return range(int(rows[0]), int(rows[-1]) + 1)
    return rows.tolist()


class _Receiver(threading.Thread):
    """Reads the workers' replies and hands them to the dispatcher; notices dead workers. One
    selector registered once: a wake-up costs the replies that are ready, not the workers."""

    def __init__(self, links: Sequence[Connection], dispatcher: Dispatcher) -> None:
        super().__init__(name="mlperf-mig-receiver", daemon=True)
        self._links = list(links)
        self._dispatcher = dispatcher
        self._stopping = threading.Event()

    def run(self) -> None:
        with selectors.DefaultSelector() as selector:
            for worker, link in enumerate(self._links):
                selector.register(link, selectors.EVENT_READ, worker)
            flush_s = self._dispatcher.flush_s
            while selector.get_map() and not self._stopping.is_set():
                for key, _ in selector.select(timeout=flush_s or _POLL_S):
                    worker = key.data
                    link = self._links[worker]
                    try:
                        message = link.recv()
                    except (EOFError, OSError):
                        selector.unregister(link)
                        self._dispatcher.worker_died(worker)
                        continue
                    if message[0] == "done":
                        _, batch_ids, blob, item_size = message
                        self._dispatcher.done(worker, batch_ids, blob, item_size)
                    elif message[0] == "loaded":
                        self._dispatcher.samples_taken(worker)
                    elif message[0] == "error":  # a remote worker's model raised
                        log.error("worker %d failed: %s", worker, message[1])
                        selector.unregister(link)
                        self._dispatcher.worker_died(worker)
                if flush_s is not None:
                    self._dispatcher.flush()
                self._dispatcher.check_stalled()

    def stop(self) -> None:
        self._stopping.set()
        self.join()


# --- coordinator entry -----------------------------------------------------------------------------
def _collect_targets(
    job: CoordinatorJob, timeout_s: float
) -> tuple[dict[int, float | None], set[int], dict[int, str], set[int]]:
    """Each worker's calibrated target (None when it calibrated nothing), sent before it waits
    at the barrier, the workers that read the shared arrays (rows only), the cache keys of
    the targets an earlier run measured (harness/reuse.py), and the workers that read a copy of
    the shared arrays which each load must fill (a cluster node's); a worker missing from the
    answer died or did not report in time."""
    targets: dict[int, float | None] = {}
    rows_only: set[int] = set()
    mirrors: set[int] = set()
    cached: dict[int, str] = {}
    waiting = dict(enumerate(job.links))
    for worker, preset in enumerate(job.preset_targets):
        if preset is not None:
            _take_target(worker, preset, targets, rows_only, cached, mirrors)
            del waiting[worker]
    deadline = time.monotonic() + timeout_s
    while waiting and time.monotonic() < deadline:
        by_link = {id(link): i for i, link in waiting.items()}
        for ready in wait(list(waiting.values()), timeout=deadline - time.monotonic()):
            worker = by_link[id(ready)]
            link = waiting[worker]  # `ready` as the Connection it is
            try:
                message = link.recv()
            except (EOFError, OSError):
                del waiting[worker]
                continue
            if message[0] == "target":
                _take_target(worker, message, targets, rows_only, cached, mirrors)
                del waiting[worker]
    return targets, rows_only, cached, mirrors


def _take_target(
    worker: int,
    message: tuple[Any, ...],
    targets: dict[int, float | None],
    rows_only: set[int],
    cached: dict[int, str],
    mirrors: set[int],
) -> None:
    """Record a worker's ("target", target, rows only, cache key, mirror) message."""
    targets[worker] = message[1]
    if len(message) > 2 and message[2]:
        rows_only.add(worker)
    if len(message) > 3 and isinstance(message[3], str):
        cached[worker] = message[3]
    if len(message) > 4 and message[4]:
        mirrors.add(worker)


def largest_chunk(batch_size: int, payload_bytes: int) -> int:
    """The largest Offline chunk: whole batches, up to CHUNK_SAMPLES samples and
    CHUNK_PAYLOAD_BYTES of replies (a BERT reply is 3 KiB a sample), at least one batch."""
    samples = min(CHUNK_SAMPLES, CHUNK_PAYLOAD_BYTES // max(payload_bytes, 1))
    return max(1, samples // batch_size) * batch_size


def chunk_samples(layout_rate: float, relative_weight: float, batch_size: int, largest: int) -> int:
    """A worker's chunk (see CHUNK_SECONDS): what the layout completes in CHUNK_SECONDS at
    `layout_rate` samples/s, times the worker's weight over the mean weight, in whole batches,
    at least one and at most `largest` samples."""
    batches = int(layout_rate * CHUNK_SECONDS * relative_weight) // batch_size
    return max(batch_size, min(largest, batches * batch_size))


def combined_target(loadgen_scenario: str, targets: Sequence[float | None]) -> float | None:
    """The layout's target from the instances': QPS add up, latencies take the best instance."""
    from mlperf_mig.harness.calibration import SERVER_CAP_QPS

    known = [t for t in targets if t is not None]
    if not known:
        return None
    if loadgen_scenario == "Offline":
        return sum(known)
    if loadgen_scenario == "Server":
        return min(sum(known), SERVER_CAP_QPS)
    return min(known)


def coordinate(
    job: CoordinatorJob, *, before_start: Callable[[], None], progress: Callable[[int], None]
) -> dict[str, Any]:
    """Worker entry of the coordinator: run the layout's LoadGen test over the instance workers."""
    from mlperf_mig.harness.loadgen_test import LoadGenTest

    with LoadGenTest(job.task) as test:
        return _coordinate(job, test, before_start=before_start, progress=progress)


def _coordinate(
    job: CoordinatorJob,
    test: LoadGenTest,
    *,
    before_start: Callable[[], None],
    progress: Callable[[int], None],
) -> dict[str, Any]:
    import mlperf_loadgen as lg

    from mlperf_mig.engines.backend import DeviceReport
    from mlperf_mig.errors import DatasetError
    from mlperf_mig.harness.instance import target_was_wrong
    from mlperf_mig.harness.loadgen_test import running
    from mlperf_mig.harness.reuse import WorkCache
    from mlperf_mig.harness.samples import SampleLibrary
    from mlperf_mig.harness.sut import ResponsePool, contiguous_order, payload_layout

    source = test.source
    targets, rows_only, cached, mirrors = _collect_targets(job, job.ready_timeout_s)
    calibrated = (
        combined_target(test.task.loadgen_scenario, list(targets.values()))
        if test.calibrates
        else None
    )
    # a layout target made (in part) of targets an earlier run measured says so
    cached_keys = (
        [cached[w] for w, t in targets.items() if t is not None and w in cached]
        if calibrated
        else []
    )
    arrays, _blocks = attach_samples(job.samples)  # the blocks keep the mappings alive
    library = SampleLibrary(arrays, total_count=source.total_count)
    last_progress = [0.0]

    def complete(ids: Sequence[int], blob: bytes, item_size: int) -> None:
        if blob and item_size == item_bytes and len(ids) <= len(pool):
            staging.reshape(-1).view(np.uint8)[: len(blob)] = np.frombuffer(blob, dtype=np.uint8)
            pool.set_ids(0, ids)
            lg.QuerySamplesComplete(pool.first(len(ids)))
        else:
            keep = np.frombuffer(blob, dtype=np.uint8) if blob else None
            base = 0 if keep is None else keep.ctypes.data
            response = lg.QuerySampleResponse
            lg.QuerySamplesComplete(
                [
                    response(qid, base + k * item_size if item_size else 0, item_size)
                    for k, qid in enumerate(ids)
                ]
            )
        now = time.monotonic()
        if now - last_progress[0] >= _PROGRESS_INTERVAL_S:
            last_progress[0] = now
            progress(dispatcher.completed)

    offline = test.task.loadgen_scenario == "Offline"
    shape, dtype = payload_layout(test.benchmark)
    dispatcher = Dispatcher(
        job.links,
        job.weights,
        batch_size=job.batch_size,
        complete=complete,
        reply_timeout_s=job.reply_timeout_s,
        largest_batch=largest_chunk(job.batch_size, np.empty(shape, dtype=dtype).nbytes)
        if offline
        else None,
        rows_only=[i in rows_only for i in range(len(job.links))],
        mirrors=[i in mirrors for i in range(len(job.links))],
        # Server: queries go out together once a millisecond (the latency bound is 15 ms or more)
        flush_s=SERVER_FLUSH_S if test.task.loadgen_scenario == "Server" else None,
        arrays=arrays,
    )
    # A reply holds at most a worker's window and one batch more. Replies are completed one at
    # a time (by the receiver thread), so one staging buffer and its reused responses serve all.
    staging = np.empty((dispatcher.largest_reply, *shape), dtype=dtype)
    pool = ResponsePool(lg, staging)
    item_bytes = staging[0].nbytes
    for i in range(len(job.links)):
        if i not in targets:
            dispatcher.worker_died(i)

    receiver = _Receiver(job.links, dispatcher)
    clock = _CpuClock(receiver)
    messages_before = [0]

    def barrier() -> None:
        before_start()
        messages_before[0] = dispatcher.messages

    def issue(ids: Sequence[int], indices: Sequence[int]) -> None:
        if not clock.running:
            _issue(ids, indices)
            return
        if clock.queries % ISSUE_TIMED_EVERY:
            _issue(ids, indices)
            clock.queries += 1
            return
        # the first query and every ISSUE_TIMED_EVERY-th after it are timed (a CPU clock read
        # costs ~0.7 us here, two of them a tenth of a Server query's dispatch)
        began = time.thread_time()
        _issue(ids, indices)
        clock.issue_timed_s += time.thread_time() - began
        clock.issue_timed += 1
        clock.queries += 1

    def _issue(ids: Sequence[int], indices: Sequence[int]) -> None:
        if offline:  # batches of consecutive rows: the workers read them as views
            index_array = np.fromiter(indices, dtype=np.int64, count=len(indices))
            rows = library.slots(index_array)
            order = contiguous_order(rows)
            # arrays: the dispatcher makes lists of each batch's ids as it sends them
            dispatcher.submit(
                np.fromiter(ids, dtype=np.uint64, count=len(ids))[order],
                rows[order],
                index_array[order],
            )
            return
        try:  # a Server query (one sample, mostly): its row without numpy
            query_rows = [row_of[index] for index in indices]
        except KeyError:
            raise DatasetError("LoadGen issued a sample that is not loaded") from None
        dispatcher.submit(ids, query_rows, indices)

    row_of: dict[int, int] = {}  # the loaded samples' rows, by dataset index

    def load(indices: Sequence[int]) -> None:
        # generated samples come from the cache folder when an earlier run kept them (a copy
        # into the shared arrays; harness/reuse.py); a node's copy takes them before the test
        WorkCache.for_cache_dir(test.task.cache_dir).load_samples(library, indices, source)
        row_of.update(zip(indices, library.slots(list(indices)).tolist()))
        if mirrors:
            dispatcher.mirror_samples(library.loaded_count, job.ready_timeout_s)

    def unload(indices: Sequence[int]) -> None:
        library.unload(indices)
        for index in indices:
            row_of.pop(index, None)

    receiver_cpu: list[float] = []

    def stop_serving() -> None:
        receiver_cpu.append(clock._thread_cpu())  # before the thread ends
        dispatcher.stop_workers()
        receiver.stop()

    log.info("LoadGen test over %d workers", len(job.links))
    # what exists now lives for the whole test: the collector stops scanning it (its full
    # collections took ~6% of the coordinator's time at 600k samples/s)
    gc.freeze()
    # A sample that cannot be loaded, or a failed barrier, fails the run (samples complete
    # without data) instead of unwinding through LoadGen.
    test.run(
        issue=issue,
        flush=lambda: None,
        load=load,
        unload=unload,
        abort=lambda exc: dispatcher.abort(f"{type(exc).__name__}: {exc}"),
        calibrated_target=calibrated,
        before_start=clock.started_after(barrier),
        serving=running(receiver.start, stop_serving),
        performance_count=job.performance_count,
        target_cached=bool(cached_keys),
    )
    progress(dispatcher.completed)
    clock.report(
        "dispatch",
        dispatcher.completed,
        receiver_cpu[0] if receiver_cpu else None,
        dispatcher.messages - messages_before[0],
        mirror_cpu_s=dispatcher.mirror_cpu_s,
    )
    result = test.result(
        dispatcher,
        device=DeviceReport(backend="unified", provider="dispatch", device=",".join(job.names)),
        weights_synthetic=job.synthetic_weights,
    )
    if cached_keys and target_was_wrong(result):  # the next run measures every instance again
        work = WorkCache.for_cache_dir(test.task.cache_dir)
        for key in cached_keys:
            work.forget_key(
                key, f"the layout's test was INVALID: {'; '.join(result.invalid_reasons)}"
            )
    return {
        "result": result.to_dict(),
        "served": dict(zip(job.names, dispatcher.served)),
        "lost_workers": [n for n, alive in zip(job.names, dispatcher.alive) if not alive],
        "stalled_workers": [job.names[i] for i in dispatcher.stalled],
    }


# --- instance worker entry -------------------------------------------------------------------------
def serve_instance(
    job: ServeJob,
    *,
    before_start: Callable[[], None],
    progress: Callable[[int], None],
    open_backend: Callable[[], Any] | None = None,
) -> dict[str, Any]:
    """Worker entry of one instance: load the engine, report a target, serve batches until stop.

    `open_backend` replaces the task's backend (tests use it to give instances known speeds).
    """
    from mlperf_mig.harness.instance import open_task_backend, reused_or_measured_target
    from mlperf_mig.harness.reuse import WorkCache, key_digest
    from mlperf_mig.harness.samples import SampleLibrary
    from mlperf_mig.harness.sut import payload_layout, response_payload

    task = job.task
    benchmark = task.benchmark
    arrays, _blocks = attach_samples(job.samples)  # the blocks keep the mappings alive
    library = SampleLibrary(arrays, total_count=0)
    reused: dict[str, np.ndarray] = {}  # the gather buffer, allocated at the first scattered batch
    shape, dtype = payload_layout(benchmark)
    payloads = [np.empty((job.batch_size, *shape), dtype=dtype)]  # grown for a chunk

    def gather(rows: np.ndarray, contiguous: bool | None = None) -> dict[str, np.ndarray]:
        """Views of the shared arrays for consecutive rows, else copies into the reused buffer."""
        if not reused:
            reused.update(
                (name, np.empty((job.batch_size, *a.shape[1:]), dtype=a.dtype))
                for name, a in arrays.items()
            )
        return library.gather(rows, reused, contiguous=contiguous)

    def run_group(group: list[tuple[Any, ...]]) -> np.ndarray:
        """The payloads of a run of batches (or of one chunk)."""
        rows = _rows_of(group)
        if len(rows) > len(payloads[0]):
            payloads[0] = np.empty((len(rows), *shape), dtype=dtype)
        consecutive = True if len(group) == 1 and isinstance(group[0][2], range) else None
        return _run_in_batches(
            rows,
            job.batch_size,
            lambda part, out: response_payload(
                benchmark, backend.run(gather(part, consecutive)), out
            ),
            payloads[0],
        )

    backend = open_backend() if open_backend is not None else open_task_backend(task, benchmark)
    served = 0
    busy_s = 0.0
    try:
        # the target is timed on this worker's own path: rows copied out of shared memory (or
        # taken from the cache folder, where an earlier run measured it with the same inputs)
        target, cached, inputs = reused_or_measured_target(
            task,
            benchmark,
            backend,
            None,
            batch_size=job.batch_size,
            path="shared memory",
            work=WorkCache.for_cache_dir(task.cache_dir),
            serve_path=(gather, min(len(a) for a in arrays.values())),
        )
        # rows only: this worker reads the shared arrays; the key of a cached target, which the
        # coordinator drops if the layout's test finds it wrong
        job.link.send(("target", target, True, key_digest(inputs) if cached and inputs else None))
        clock = _CpuClock()
        clock.started_after(before_start)()
        stop = False
        while not stop:
            batches, stop = _next_batches(job.link, job.batch_size)
            for group in _groups(batches, job.batch_size):
                began = time.perf_counter()
                payload = run_group(group)
                busy_s += time.perf_counter() - began
                job.link.send(("done", [b[0] for b in group], payload.tobytes(), payload[0].nbytes))
                served += len(payload)
                progress(served)
        clock.report("serving", served)
        device = backend.device.to_dict()
    finally:
        backend.close()
    return {"served": served, "busy_s": round(busy_s, 3), "device": device}


class _CpuClock:
    """This process's CPU time from the start barrier's release to the end of its test: what
    the coordinator (LoadGen's threads and the dispatch) or a serving worker costs a sample,
    logged as one JSON line (benchmarks/fleet_dispatch.py reads it). The coordinator also
    counts its own code apart (`dispatch_cpu_s`: the issue callbacks, one in ISSUE_TIMED_EVERY
    timed and scaled to all, and the
    receiver thread): LoadGen's threads wait for a Server query's time partly by spinning,
    which fills an idle core and is not the dispatch's cost."""

    def __init__(self, thread: threading.Thread | None = None) -> None:
        self.queries = 0
        self.issue_timed = 0  # issue callbacks timed (the first and every ISSUE_TIMED_EVERY-th)
        self.issue_timed_s = 0.0  # their CPU
        self._thread = thread  # the receiver, whose CPU clock is read from here
        self._started: tuple[float, float, float] | None = None

    def _thread_cpu(self) -> float:
        if self._thread is None or self._thread.ident is None:
            return 0.0
        try:
            return time.clock_gettime(time.pthread_getcpuclockid(self._thread.ident))
        except OSError:  # the thread has ended
            return self._started[2] if self._started else 0.0

    def started_after(self, barrier: Callable[[], None]) -> Callable[[], None]:
        """`barrier`, then the clock starts (the timed part of the test begins)."""

        def start() -> None:
            barrier()
            self.queries = 0
            self.issue_timed = 0
            self.issue_timed_s = 0.0
            self._started = (time.process_time(), time.monotonic(), self._thread_cpu())

        return start

    @property
    def issue_s(self) -> float:
        """The issue callbacks' CPU: the timed ones', scaled to every query."""
        if not self.issue_timed:
            return 0.0
        return self.issue_timed_s * self.queries / self.issue_timed

    @property
    def running(self) -> bool:
        return self._started is not None

    def report(
        self,
        what: str,
        samples: int,
        thread_cpu: float | None = None,
        messages: int | None = None,
        mirror_cpu_s: float = 0.0,
    ) -> None:
        """Log the cost; `thread_cpu`: the receiver's CPU clock read before it ended;
        `messages`: batches sent and replies read; `mirror_cpu_s`: what sending loaded
        samples to the workers' copies (a cluster's nodes) took, the first load's before the
        clock started."""
        if self._started is None:
            return
        cost = {
            "samples": samples,
            "queries": self.queries,
            "messages": messages,
            "cpu_s": round(time.process_time() - self._started[0], 4),
            "wall_s": round(time.monotonic() - self._started[1], 4),
        }
        if self._thread is not None and thread_cpu is not None:
            cost["dispatch_cpu_s"] = round(self.issue_s + thread_cpu - self._started[2], 4)
            cost["issue_cpu_s"] = round(self.issue_s, 4)  # of it, the issue callbacks'
        if mirror_cpu_s:
            cost["mirror_cpu_s"] = round(mirror_cpu_s, 4)
        log.info("%s cost %s", what, json.dumps(cost))


def _run_in_batches(
    rows: np.ndarray,
    batch_size: int,
    run: Callable[[np.ndarray, np.ndarray], Any],
    out: np.ndarray,
) -> np.ndarray:
    """The payloads of `rows` in the first rows of `out`, from calls `run(part, out rows from
    the part's first)` of at most `batch_size` rows each (a chunk is larger than a batch)."""
    for start in range(0, len(rows), batch_size):
        run(rows[start : start + batch_size], out[start:])
    return out[: len(rows)]


def _groups(batches: list[tuple[Any, ...]], batch_size: int) -> list[list[tuple[Any, ...]]]:
    """Merged batches (batch id, sample ids, rows, indices) in runs of at most `batch_size`
    samples, in order: each run is one reply (and one backend call; a chunk larger than the
    batch size is a run of its own, run in several)."""
    groups: list[list[tuple[Any, ...]]] = []
    size = batch_size
    for batch in batches:
        count = len(batch[2])
        if size + count > batch_size:
            groups.append([])
            size = 0
        groups[-1].append(batch)
        size += count
    return groups


def _rows_of(group: list[tuple[Any, ...]]) -> np.ndarray:
    """The shared-array rows of a run of batches, as one int64 array."""
    if len(group) == 1 and isinstance(group[0][2], range):
        row = group[0][2]
        return np.arange(row.start, row.stop, dtype=np.int64)
    return np.fromiter((r for b in group for r in b[2]), dtype=np.int64)


def _next_batches(link: Connection, batch_size: int) -> tuple[list[tuple[Any, ...]], bool]:
    """Block for the next batch, merge what else is queued up to `batch_size` samples.

    Returns the batches (batch id, sample ids, rows, dataset indices) and whether a stop
    message came. Rows are a `range` where they are consecutive, else a list.
    """
    batches: list[tuple[Any, ...]] = []
    size = 0
    while not batches or (size < batch_size and link.poll()):
        message = link.recv()
        if message[0] == "stop":
            return batches, True
        batches.append(message[1:])
        size += len(message[3])
    return batches, False
