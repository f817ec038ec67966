"""Unified mode for a generative workload: one LoadGen for the layout, token streams from every
instance.

The coordinator and the instance workers are the unified round's (runner/unified.py: the same
jobs, shared sample memory and target handshake); what travels differs. A request goes out as
("add", [(sample id, row), ...]) to the worker with the fewest requests in flight per compute
slice (continuous batching: it joins that worker's running batch at its next step), passing over
one quiet with requests running while another answers (QUIET_PASSED_OVER_S). A worker
steps its generator and sends ("first", ids, first tokens) as the first tokens appear and
("done", ids, lengths, token bytes) as requests finish; the coordinator hands both to one
TokenCompleter (harness/token_sut.py), so every first token reaches LoadGen before its request
completes. A worker that dies has its requests completed empty and is named; so has one that
sends nothing for the reply timeout while it has requests running (hung, or stopped), and what
it sends later is ignored.

An instance on a cluster node (cluster/serving.py) speaks the same protocol over its data channel:
`serve_requests` is the one loop of both, fed by a local worker's pipe or by the node's reader
thread. The node keeps a copy of the prompt arrays, which each LoadGen load fills before the
timed part (unified.SampleMirrors: the node answers ("loaded", count)); a node whose model raises
answers ("error", why), and a closed channel or an error loses the instance as a dead local
worker is lost.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from mlperf_mig.workloads.generation import TokenEvent

if TYPE_CHECKING:
    from mlperf_mig.engines.backend import Backend
    from mlperf_mig.harness.loadgen_test import LoadGenTest
    from mlperf_mig.harness.task import InstanceTask
    from mlperf_mig.harness.token_sut import TokenCompleter
    from mlperf_mig.runner.unified import CoordinatorJob, SampleMirrors, ServeJob
    from mlperf_mig.workloads.generation import TokenGenerator

log = logging.getLogger(__name__)

_POLL_S = 0.2
# An instance with requests running that has sent nothing for this long is passed over for new
# requests while another is not so quiet: one that hangs then holds what it had when it went
# quiet until the reply timeout loses it, not its share of every request issued meanwhile (a
# working instance sends whenever a request of its batch starts or ends).
QUIET_PASSED_OVER_S = 2.0


class TokenDispatcher:
    """Sends each request to the least loaded live worker; turns replies into token events."""

    def __init__(
        self,
        links: Sequence[Connection],
        weights: Sequence[float],
        completer: TokenCompleter,
        *,
        names: Sequence[str] | None = None,
        mirrors: SampleMirrors | None = None,
        reply_timeout_s: float | None = None,
    ) -> None:
        """`names`: who each worker is, in the run's errors; `mirrors`: the workers that keep a
        copy of the prompt arrays (cluster nodes'), filled at each load (`mirror_samples`);
        `reply_timeout_s`: a worker with requests running that sends nothing this long is lost
        (`check_stalled`; never when None). A worker sends after each step that starts or ends a
        request, so the timeout must exceed one request's generation alone."""
        self._links = list(links)
        self._weights = [max(float(w), 1e-9) for w in weights]
        self._completer = completer
        self._names = (
            list(names)
            if names is not None
            else [f"instance worker {w}" for w in range(len(links))]
        )
        self._mirrors = mirrors
        self._lock = threading.Lock()
        self._reply_timeout_s = reply_timeout_s
        self._quiet_since: list[float | None] = [None] * len(links)  # running, and not heard since
        self._next_stall_check = 0.0
        self.in_flight: list[set[int]] = [set() for _ in links]
        self.alive = [True] * len(links)
        self.served = [0] * len(links)
        self.stalled: list[int] = []  # workers lost to the reply timeout

    def submit(self, ids: Sequence[int], rows: Sequence[int]) -> None:
        """Send each request to the worker with the fewest in flight per unit of capacity, of
        those not quiet for QUIET_PASSED_OVER_S with requests running (of all live ones when
        every one is)."""
        out: dict[int, list[tuple[int, int]]] = {}
        now = time.monotonic()
        with self._lock:
            live = [w for w, ok in enumerate(self.alive) if ok]
            answering = [w for w in live if not self._quiet_for(w, now, QUIET_PASSED_OVER_S)]
            choices = answering or live
            for request, row in zip(ids, rows, strict=True):
                if not choices:
                    self._completer.empty([int(request)], "every instance worker is gone")
                    continue
                worker = min(choices, key=lambda w: (len(self.in_flight[w]) + 1) / self._weights[w])
                if not self.in_flight[worker]:
                    self._quiet_since[worker] = now
                self.in_flight[worker].add(int(request))
                out.setdefault(worker, []).append((int(request), int(row)))
        for worker, requests in out.items():
            try:
                self._links[worker].send(("add", requests))
            except (OSError, ValueError):
                self.worker_died(worker)

    def first(self, worker: int, ids: Sequence[int], tokens: bytes) -> None:
        """Worker `worker` made the first tokens of requests `ids` (int32 bytes, one each)."""
        values = np.frombuffer(tokens, dtype=np.int32)
        with self._lock:
            running = self.in_flight[worker]  # a lost worker's requests completed already
            events = [
                TokenEvent(request=int(r), token=int(t), first=True, finished=False)
                for r, t in zip(ids, values.tolist(), strict=True)
                if int(r) in running
            ]
            self._heard(worker)
            if events:
                self._completer.first_tokens(events)

    def done(self, worker: int, ids: Sequence[int], lengths: Sequence[int], blob: bytes) -> None:
        """Worker `worker` finished requests `ids`: their outputs, `lengths` int32 ids each, one
        after another in `blob`."""
        values = np.frombuffer(blob, dtype=np.int32)
        ends = np.cumsum(lengths).tolist()
        starts = [0, *ends[:-1]]
        with self._lock:
            running = self.in_flight[worker]  # a lost worker's requests completed already
            events = [
                TokenEvent(
                    request=int(r), token=int(values[e - 1]) if e > s else 0, first=False,
                    finished=True, tokens=values[s:e],
                )
                for r, s, e in zip(ids, starts, ends, strict=True)
                if int(r) in running
            ]  # fmt: skip
            running.difference_update(e.request for e in events)
            self.served[worker] += len(events)
            self._heard(worker)
            if events:
                self._completer.finished(events, self._names[worker])

    def _quiet_for(self, worker: int, now: float, seconds: float) -> bool:
        """Whether `worker` has had requests running and sent nothing for more than `seconds`."""
        since = self._quiet_since[worker]
        return since is not None and now - since > seconds

    def _heard(self, worker: int) -> None:
        """Worker `worker` sent a message (under the lock): its silence starts again."""
        self._quiet_since[worker] = time.monotonic() if self.in_flight[worker] else None

    def check_stalled(self) -> None:
        """Lose every worker that has had requests running and sent nothing for the reply
        timeout (hung, or stopped with SIGSTOP): its requests complete empty, named."""
        now = time.monotonic()
        timeout_s = self._reply_timeout_s
        if timeout_s is None or now < self._next_stall_check:
            return
        self._next_stall_check = now + _POLL_S  # the receiver calls it after every message
        with self._lock:
            quiet = [
                (w, now - since)
                for w, since in enumerate(self._quiet_since)
                if since is not None and self.alive[w] and now - since > timeout_s
            ]
        for worker, silent_s in quiet:
            log.warning("worker %d sent nothing for %.0f s; dropping it", worker, silent_s)
            self.stalled.append(worker)
            self.worker_died(worker, f"it sent nothing for {silent_s:.3g} s")

    def worker_died(self, worker: int, why: str | None = None) -> None:
        """Worker `worker` is lost (its process or channel closed, or its model raised: `why`):
        its requests in flight complete empty, the run fails naming it, no load waits for it."""
        with self._lock:
            if not self.alive[worker]:
                return
            self.alive[worker] = False
            self._quiet_since[worker] = None
            lost = sorted(self.in_flight[worker])
            self.in_flight[worker].clear()
            if self._mirrors is not None:
                self._mirrors.drop(worker)
            what = f"failed ({why})" if why else "exited"
            self._completer.empty(lost, f"{self._names[worker]} {what} with requests in flight")

    def mirror_samples(self, count: int, timeout_s: float) -> None:
        """Fill every live worker's copy of the prompt arrays with rows 0..count-1 (a load just
        wrote them) and wait until each has them; one that has not within `timeout_s` is lost.
        LoadGen loads samples only when no request is in flight."""
        if self._mirrors is None:
            return
        with self._lock:
            failed = self._mirrors.send(count, self.alive)
        for worker in failed:
            self.worker_died(worker, "its data channel closed while it took the samples")
        for worker in self._mirrors.wait(count, timeout_s):
            self.worker_died(worker, f"it did not take the loaded samples within {timeout_s:g} s")

    def samples_taken(self, worker: int) -> None:
        """Worker `worker` has the samples of the last load (its answer to mirror_samples)."""
        if self._mirrors is not None:
            self._mirrors.taken(worker)

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
                elif message[0] == "loaded":  # a node's copy of the prompts took a load
                    self._dispatcher.samples_taken(worker)
                elif message[0] == "error":  # a node's model raised: it serves no more
                    log.error("worker %d failed: %s", worker, message[1])
                    open_links.remove(link)
                    self._dispatcher.worker_died(worker, str(message[1]))
            self._dispatcher.check_stalled()

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
    from mlperf_mig.runner.unified import (
        SampleMirrors,
        _collect_targets,
        attach_samples,
        combined_target,
    )

    source = test.source
    targets, _rows_only, _cached, mirrors = _collect_targets(job, job.ready_timeout_s)
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
    dispatcher = TokenDispatcher(
        job.links,
        job.weights,
        completer,
        names=[f"instance {name}" for name in job.names],
        mirrors=SampleMirrors(job.links, arrays, [w in mirrors for w in range(len(job.links))])
        if mirrors
        else None,
        reply_timeout_s=job.reply_timeout_s,
    )
    for worker in range(len(job.links)):
        if worker not in targets:
            dispatcher.worker_died(worker)
    receiver = _Receiver(job.links, dispatcher)

    def issue(ids: Sequence[int], indices: Sequence[int]) -> None:
        dispatcher.submit(ids, library.slots(indices).tolist())

    def load(indices: Sequence[int]) -> None:
        library.load(indices, source)
        dispatcher.mirror_samples(library.loaded_count, job.ready_timeout_s)

    def stop_serving() -> None:
        receiver.stop()
        dispatcher.stop_workers()

    test.run(
        issue=issue,
        flush=lambda: None,
        load=load,
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
        "stalled_workers": [job.names[w] for w in dispatcher.stalled],
    }


@attrs.define
class GenerationTally:
    """What an instance's generator did while serving: requests finished, seconds stepping."""

    served: int = 0
    busy_s: float = 0.0


def open_generation(task: InstanceTask, backend: Backend) -> tuple[TokenGenerator, float | None]:
    """The instance's generator on its open `backend`, and its calibrated target (None when the
    task calibrates nothing), timed on the first prompts of the task's source."""
    from mlperf_mig.harness import datasets
    from mlperf_mig.harness.instance import batch_size_of, open_generator
    from mlperf_mig.harness.samples import input_layouts
    from mlperf_mig.harness.settings import merge_settings
    from mlperf_mig.harness.token_sut import first_prompts, generation_target

    benchmark = task.benchmark
    settings = merge_settings(task.settings, benchmark, task.loadgen_scenario)
    generator = open_generator(task, benchmark, backend, max_new_tokens=settings.new_tokens)
    try:
        target = None
        if settings.calibrates:
            source = datasets.open_source(task)
            warm = first_prompts(source, input_layouts(benchmark), batch_size_of(task))
            target = generation_target(
                generator, warm, task.loadgen_scenario, batch_size=batch_size_of(task)
            )
    except BaseException:
        generator.close()
        raise
    return generator, target


def serve_requests(
    generator: TokenGenerator,
    prompts: np.ndarray,
    lengths: np.ndarray,
    *,
    receive: Callable[[float], tuple[Any, ...] | None],
    send: Callable[[tuple[Any, ...]], None],
    tally: GenerationTally,
    progress: Callable[[int], None] | None = None,
) -> None:
    """Step `generator` over the requests the coordinator sends, until it says stop and none is
    left: the one loop of a local instance worker (its pipe) and of a cluster node (its data
    channel). `receive(timeout_s)`: the coordinator's next message, None when none came within
    `timeout_s` (EOFError when it is gone); `send(message)`: one message to it.

    In: ("add", [(request id, row), ...]), whose prompts are prompts[row, :lengths[row]];
    ("sync", count) -> ("loaded", count) (a node's copy of the prompts took a load's rows);
    ("stop",). Out, after each step: ("first", ids, int32 token bytes) for its first tokens,
    then ("done", ids, lengths, int32 token bytes) for its finished requests. A message of
    another kind raises ValueError; what the generator raises propagates."""
    stopping = False
    while not (stopping and generator.pending == 0):
        while (message := receive(0 if generator.pending else _POLL_S)) is not None:
            kind = message[0]
            if kind == "stop":
                stopping = True
                break
            if kind == "add":
                for request, row in message[1]:
                    generator.add(request, prompts[row, : int(lengths[row])].copy())
            elif kind == "sync":
                send(("loaded", message[1]))
            else:
                raise ValueError(f"unknown message {kind!r} from the coordinator")
        if not generator.pending:
            continue
        began = time.perf_counter()
        events = generator.step()
        tally.busy_s += time.perf_counter() - began
        firsts = [e for e in events if e.first]
        if firsts:
            send(
                ("first", [e.request for e in firsts],
                 np.array([e.token for e in firsts], dtype=np.int32).tobytes())
            )  # fmt: skip
        done = [e for e in events if e.finished]
        if done:
            outputs = [np.zeros(0, dtype=np.int32) if e.tokens is None else e.tokens for e in done]
            send(
                ("done", [e.request for e in done], [len(o) for o in outputs],
                 np.concatenate(outputs).astype(np.int32).tobytes())
            )  # fmt: skip
            tally.served += len(done)
            if progress is not None:
                progress(tally.served)


def serve_instance(
    job: ServeJob,
    *,
    before_start: Callable[[], None],
    progress: Callable[[int], None],
    open_backend: Callable[[], Any] | None = None,
) -> dict[str, Any]:
    """One instance worker of a generative workload's unified round: its generator, fed with
    the requests the coordinator sends, stepped while any is running."""
    from mlperf_mig.harness.instance import open_task_backend
    from mlperf_mig.harness.token_sut import PROMPT_IDS, PROMPT_LENGTH
    from mlperf_mig.runner.unified import attach_samples

    task = job.task
    link = job.link
    arrays, _blocks = attach_samples(job.samples)  # the blocks keep the mappings alive
    backend = (
        open_backend() if open_backend is not None else open_task_backend(task, task.benchmark)
    )
    tally = GenerationTally()
    try:
        generator, target = open_generation(task, backend)
        try:
            link.send(("target", target, True, None))
            before_start()
            serve_requests(
                generator,
                arrays[PROMPT_IDS],
                arrays[PROMPT_LENGTH],
                receive=lambda timeout_s: link.recv() if link.poll(timeout_s) else None,
                send=link.send,
                tally=tally,
                progress=progress,
            )
            device = backend.device.to_dict()
        finally:
            generator.close()
    finally:
        backend.close()
    return {"served": tally.served, "busy_s": round(tally.busy_s, 3), "device": device}
