"""Unified mode for a generative workload: one LoadGen for the layout, token streams from every
instance.

The coordinator and the instance workers are the unified round's (runner/unified.py: the same
jobs, shared sample memory and target handshake); what travels differs. A request goes out as
("add", [(sample id, row), ...]) to the worker with the fewest requests in flight per compute
slice (continuous batching: it joins that worker's running batch at its next step). A worker
steps its generator and sends ("first", ids, first tokens) as the first tokens appear and
("done", ids, lengths, token bytes) as requests finish; the coordinator hands both to one
TokenCompleter (harness/token_sut.py), so every first token reaches LoadGen before its request
completes. A worker that dies has its requests completed empty and is named.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any

import numpy as np

from mlperf_mig.workloads.generation import TokenEvent

if TYPE_CHECKING:
    from mlperf_mig.harness.loadgen_test import LoadGenTest
    from mlperf_mig.harness.token_sut import TokenCompleter
    from mlperf_mig.runner.unified import CoordinatorJob, ServeJob

log = logging.getLogger(__name__)

_POLL_S = 0.2


class TokenDispatcher:
    """Sends each request to the least loaded live worker; turns replies into token events."""

    def __init__(
        self, links: Sequence[Connection], weights: Sequence[float], completer: TokenCompleter
    ) -> None:
        self._links = list(links)
        self._weights = [max(float(w), 1e-9) for w in weights]
        self._completer = completer
        self._lock = threading.Lock()
        self.in_flight: list[set[int]] = [set() for _ in links]
        self.alive = [True] * len(links)
        self.served = [0] * len(links)

    def submit(self, ids: Sequence[int], rows: Sequence[int]) -> None:
        """Send each request to the worker with the fewest in flight per unit of capacity."""
        out: dict[int, list[tuple[int, int]]] = {}
        with self._lock:
            for request, row in zip(ids, rows, strict=True):
                live = [w for w, ok in enumerate(self.alive) if ok]
                if not live:
                    self._completer.empty([int(request)], "every instance worker is gone")
                    continue
                worker = min(live, key=lambda w: (len(self.in_flight[w]) + 1) / self._weights[w])
                self.in_flight[worker].add(int(request))
                out.setdefault(worker, []).append((int(request), int(row)))
        for worker, requests in out.items():
            try:
                self._links[worker].send(("add", requests))
            except (OSError, ValueError):
                self.worker_died(worker)

    def first(self, worker: int, ids: Sequence[int], tokens: bytes) -> None:
        values = np.frombuffer(tokens, dtype=np.int32)
        events = [
            TokenEvent(request=int(r), token=int(t), first=True, finished=False)
            for r, t in zip(ids, values.tolist(), strict=True)
        ]
        with self._lock:
            self._completer.first_tokens(events)

    def done(self, worker: int, ids: Sequence[int], lengths: Sequence[int], blob: bytes) -> None:
        values = np.frombuffer(blob, dtype=np.int32)
        ends = np.cumsum(lengths).tolist()
        starts = [0, *ends[:-1]]
        events = [
            TokenEvent(
                request=int(r), token=int(values[e - 1]) if e > s else 0, first=False,
                finished=True, tokens=values[s:e],
            )
            for r, s, e in zip(ids, starts, ends, strict=True)
        ]  # fmt: skip
        with self._lock:
            self._completer.finished(events, f"instance worker {worker}")
            self.in_flight[worker].difference_update(int(r) for r in ids)
            self.served[worker] += len(ids)

    def worker_died(self, worker: int) -> None:
        with self._lock:
            if not self.alive[worker]:
                return
            self.alive[worker] = False
            lost = sorted(self.in_flight[worker])
            self.in_flight[worker].clear()
            self._completer.empty(lost, f"instance worker {worker} exited with requests in flight")

    def stop_workers(self) -> None:
        for worker, link in enumerate(self._links):
            if self.alive[worker]:
                with contextlib.suppress(OSError, ValueError):  # a worker gone is named already
                    link.send(("stop",))


class _Receiver(threading.Thread):
    def __init__(self, links: Sequence[Connection], dispatcher: TokenDispatcher) -> None:
        super().__init__(name="mlperf-mig-token-receiver", daemon=True)
        self._links = list(links)
        self._dispatcher = dispatcher
        self._stopping = threading.Event()

    def run(self) -> None:
        index = {id(link): i for i, link in enumerate(self._links)}
        open_links = list(self._links)
        while open_links and not (self._stopping.is_set() and not any(
            self._dispatcher.in_flight[index[id(link)]] for link in open_links
        )):  # fmt: skip
            for ready in wait(open_links, timeout=_POLL_S):
                link = self._links[index[id(ready)]]
                worker = index[id(ready)]
                try:
                    message = link.recv()
                except (EOFError, OSError):
                    open_links.remove(link)
                    self._dispatcher.worker_died(worker)
                    continue
                if message[0] == "first":
                    self._dispatcher.first(worker, message[1], message[2])
                elif message[0] == "done":
                    self._dispatcher.done(worker, message[1], message[2], message[3])

    def stop(self) -> None:
        self._stopping.set()
        self.join()


def coordinate(
    job: CoordinatorJob, *, before_start: Callable[[], None], progress: Callable[[int], None]
) -> dict[str, Any]:
    """Worker entry of the coordinator of a generative workload's unified round."""
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
    from mlperf_mig.harness.loadgen_test import running
    from mlperf_mig.harness.samples import SampleLibrary
    from mlperf_mig.harness.token_sut import TokenCompleter
    from mlperf_mig.runner.unified import _collect_targets, attach_samples, combined_target

    source = test.source
    targets, _rows_only, _cached, _mirrors = _collect_targets(job, job.ready_timeout_s)
    calibrated = (
        combined_target(test.task.loadgen_scenario, list(targets.values()))
        if test.calibrates
        else None
    )
    arrays, _blocks = attach_samples(job.samples)  # the blocks keep the mappings alive
    library = SampleLibrary(arrays, total_count=source.total_count)
    completer = TokenCompleter(
        lg, needs_first_token=test.task.loadgen_scenario != "Offline", progress=progress
    )
    dispatcher = TokenDispatcher(job.links, job.weights, completer)
    for worker in range(len(job.links)):
        if worker not in targets:
            dispatcher.worker_died(worker)
    receiver = _Receiver(job.links, dispatcher)

    def issue(ids: Sequence[int], indices: Sequence[int]) -> None:
        dispatcher.submit(ids, library.slots(indices).tolist())

    def stop_serving() -> None:
        receiver.stop()
        dispatcher.stop_workers()

    test.run(
        issue=issue,
        flush=lambda: None,
        load=lambda indices: library.load(indices, source),
        unload=library.unload,
        abort=lambda exc: completer.record_error(f"{type(exc).__name__}: {exc}", 0),
        calibrated_target=calibrated,
        before_start=before_start,
        serving=running(receiver.start, stop_serving),
        performance_count=job.performance_count,
    )
    progress(completer.completed)
    result = test.result(
        completer,
        device=DeviceReport(backend="unified", provider="dispatch", device=",".join(job.names)),
        weights_synthetic=job.synthetic_weights,
    )
    return {
        "result": result.to_dict(),
        "served": dict(zip(job.names, dispatcher.served, strict=True)),
        "lost_workers": [n for n, ok in zip(job.names, dispatcher.alive, strict=True) if not ok],
        "stalled_workers": [],
    }


def serve_instance(
    job: ServeJob,
    *,
    before_start: Callable[[], None],
    progress: Callable[[int], None],
    open_backend: Callable[[], Any] | None = None,
) -> dict[str, Any]:
    """One instance worker of a generative workload's unified round: its generator, fed with
    the requests the coordinator sends, stepped while any is running."""
    from mlperf_mig.harness import datasets
    from mlperf_mig.harness.instance import batch_size_of, open_generator, open_task_backend
    from mlperf_mig.harness.samples import input_layouts
    from mlperf_mig.harness.settings import merge_settings
    from mlperf_mig.harness.token_sut import (
        PROMPT_IDS,
        PROMPT_LENGTH,
        first_prompts,
        generation_target,
    )
    from mlperf_mig.runner.unified import attach_samples

    task = job.task
    benchmark = task.benchmark
    arrays, _blocks = attach_samples(job.samples)  # the blocks keep the mappings alive
    settings = merge_settings(task.settings, benchmark, task.loadgen_scenario)
    backend = open_backend() if open_backend is not None else open_task_backend(task, benchmark)
    generator = open_generator(task, benchmark, backend, max_new_tokens=settings.new_tokens)
    served = 0
    busy_s = 0.0
    try:
        target = None
        if settings.calibrates:
            source = datasets.open_source(task)
            warm = first_prompts(source, input_layouts(benchmark), batch_size_of(task))
            target = generation_target(
                generator, warm, task.loadgen_scenario, batch_size=batch_size_of(task)
            )
        job.link.send(("target", target, True, None))
        before_start()
        prompts, lengths = arrays[PROMPT_IDS], arrays[PROMPT_LENGTH]
        stopping = False
        while not (stopping and generator.pending == 0):
            while job.link.poll(0 if generator.pending else _POLL_S):
                message = job.link.recv()
                if message[0] == "stop":
                    stopping = True
                    break
                for request, row in message[1]:
                    generator.add(request, prompts[row, : int(lengths[row])].copy())
            if not generator.pending:
                continue
            began = time.perf_counter()
            events = generator.step()
            busy_s += time.perf_counter() - began
            firsts = [e for e in events if e.first]
            if firsts:
                job.link.send(
                    ("first", [e.request for e in firsts],
                     np.array([e.token for e in firsts], dtype=np.int32).tobytes())
                )  # fmt: skip
            done = [e for e in events if e.finished]
            if done:
                outputs = [
                    np.zeros(0, dtype=np.int32) if e.tokens is None else e.tokens for e in done
                ]
                job.link.send(
                    ("done", [e.request for e in done], [len(o) for o in outputs],
                     np.concatenate(outputs).astype(np.int32).tobytes())
                )  # fmt: skip
                served += len(done)
                progress(served)
        device = backend.device.to_dict()
    finally:
        generator.close()
        backend.close()
    return {"served": served, "busy_s": round(busy_s, 3), "device": device}
