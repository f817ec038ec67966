"""The SUT of a generative workload: prompts to a TokenGenerator, tokens back to LoadGen.

LoadGen's issue callback only enqueues (every scenario); one generation thread admits the queued
prompts into the generator (continuous batching: they join the running batch at its next step),
steps it, reports each request's first token with FirstTokenComplete as soon as its event arrives
(every scenario but Offline) and completes each request with its whole output (int32 token ids,
`n_tokens`) when it finishes.

`TokenCompleter` is the one path by which token responses reach LoadGen, and it keeps LoadGen's
rules, which LoadGen itself does not survive breaking (reference/llm.md section 2): a request
completed before its first token was reported would crash a SingleStream test (a segfault), so
the completer reports the first token itself and fails the run naming the generator; an output of
fewer than 2 tokens (TPOT undefined) fails the run too. Every issued request is completed, even
when the generator raises (trap 11).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

from mlperf_mig.harness.progress import CompletionCounter
from mlperf_mig.harness.samples import InputLayout, SampleLibrary
from mlperf_mig.harness.settings import LoadGenModule
from mlperf_mig.workloads.generation import MIN_NEW_TOKENS, TokenEvent, TokenGenerator
from mlperf_mig.workloads.samples import SampleSource

logger = logging.getLogger(__name__)

PROMPT_IDS = "input_ids"  # the sample library's padded prompt rows
PROMPT_LENGTH = "input_length"  # and each prompt's length


class TokenCompleter:
    """Reports first tokens and finished outputs to LoadGen; counts them and records errors."""

    def __init__(
        self,
        lg: LoadGenModule,
        *,
        needs_first_token: bool,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        self._lg = lg
        self.needs_first_token = needs_first_token
        self._first_sent: set[int] = set()
        self._counter = CompletionCounter(progress)
        self.failed_samples = 0
        self.tokens = 0
        self.error: str | None = None

    @property
    def completed(self) -> int:
        """Samples completed so far (what the LoadGen test reports)."""
        return self._counter.completed

    def record_error(self, message: str, count: int) -> None:
        if self.error is None:
            self.error = message
            logger.error("run failed: %s", message)
        self.failed_samples += count

    def first_tokens(self, events: Sequence[TokenEvent]) -> None:
        """FirstTokenComplete for every first-token event (nothing in Offline)."""
        if not self.needs_first_token or not events:
            return
        tokens = np.fromiter((e.token for e in events), dtype=np.int32, count=len(events))
        self._send_first([e.request for e in events], tokens)

    def _send_first(self, requests: Sequence[int], tokens: np.ndarray) -> None:
        response = self._lg.QuerySampleResponse
        base, size = tokens.ctypes.data, tokens.itemsize
        self._lg.FirstTokenComplete(
            [response(r, base + k * size, size, 1) for k, r in enumerate(requests)]
        )  # LoadGen copies the token inside the call: `tokens` outlives it
        self._first_sent.update(requests)

    def finished(self, events: Sequence[TokenEvent], generator: str) -> None:
        """QuerySamplesComplete with each finished request's whole output."""
        if not events:
            return
        outputs = [self._output(e, generator) for e in events]
        missing = [e for e in events if e.request not in self._first_sent]
        if self.needs_first_token and missing:
            self.record_error(
                f"{generator} finished {len(missing)} request(s) without a first-token event; "
                "their first tokens were reported at completion, so TTFT is not measured",
                0,
            )
            by_request = {e.request: out for e, out in zip(events, outputs, strict=True)}
            first = [
                int(by_request[e.request][0]) if len(by_request[e.request]) else 0 for e in missing
            ]
            self._send_first([e.request for e in missing], np.array(first, dtype=np.int32))
        response = self._lg.QuerySampleResponse
        self._lg.QuerySamplesComplete(
            [
                response(e.request, out.ctypes.data, out.nbytes, len(out))
                for e, out in zip(events, outputs, strict=True)
            ]
        )  # LoadGen copies the outputs inside the call
        self._first_sent.difference_update(e.request for e in events)
        self.tokens += sum(len(out) for out in outputs)
        self._counter.add(len(events))

    def _output(self, event: TokenEvent, generator: str) -> np.ndarray:
        tokens = event.tokens
        out = (
            np.ascontiguousarray(tokens, dtype=np.int32)
            if tokens is not None
            else np.zeros(0, dtype=np.int32)
        )
        if len(out) < MIN_NEW_TOKENS:
            self.record_error(
                f"{generator} finished a request with {len(out)} token(s); LoadGen's TPOT needs "
                f"at least {MIN_NEW_TOKENS}",
                1,
            )
        return out

    def empty(self, requests: Sequence[int], message: str) -> None:
        """Complete `requests` at once without data and fail the run with `message`."""
        if not requests:
            return
        self.record_error(message, len(requests))
        pending = [r for r in requests if r not in self._first_sent]
        response = self._lg.QuerySampleResponse
        if self.needs_first_token and pending:
            self._lg.FirstTokenComplete([response(r, 0, 0, 0) for r in pending])
        self._lg.QuerySamplesComplete([response(r, 0, 0, 0) for r in requests])
        self._first_sent.difference_update(requests)
        self._counter.add(len(requests))


class TokenStreamSUT:
    """Every scenario of a generative workload: the issue callback enqueues, one thread generates.

    `library` holds the prompts: `input_ids` rows padded to the longest prompt and
    `input_length`. The thread admits whatever was issued since its last step, steps the
    generator, and reports first tokens and finished outputs through the completer.
    """

    def __init__(
        self,
        *,
        completer: TokenCompleter,
        generator: TokenGenerator,
        library: SampleLibrary,
        name: str,
    ) -> None:
        self.completer = completer
        self._generator = generator
        self._library = library
        self._name = name
        self._queue: collections.deque[tuple[Sequence[int], Sequence[int]]] = collections.deque()
        self._running: set[int] = set()
        self._wakeup = threading.Event()
        self._stopping = False
        self.aborted = False
        self._thread = threading.Thread(target=self._loop, name="mlperf-mig-generator", daemon=True)

    # what the LoadGen test reads (CompletionCounts)
    @property
    def completed(self) -> int:
        return self.completer.completed

    @property
    def failed_samples(self) -> int:
        return self.completer.failed_samples

    @property
    def error(self) -> str | None:
        return self.completer.error

    def issue(self, ids: Sequence[int], indices: Sequence[int]) -> None:
        self._queue.append((ids, indices))
        self._wakeup.set()

    def flush(self) -> None:
        """The generation thread drains the queue on its own."""

    def abort(self, exc: Exception) -> None:
        """Fail the run: every further request is completed at once, without the generator."""
        self.completer.record_error(f"{type(exc).__name__}: {exc}", 0)
        self.aborted = True
        self._wakeup.set()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread once everything issued is complete."""
        self._stopping = True
        self._wakeup.set()
        self._thread.join()

    def _loop(self) -> None:
        while True:
            if self._queue:
                self._admit()
            if not self._running:
                if self._stopping and not self._queue:
                    return
                self._wakeup.wait(0.05)
                self._wakeup.clear()
                continue
            try:
                events = self._generator.step()
            except Exception as exc:
                self._fail_running(f"{self._name} failed: {type(exc).__name__}: {exc}")
                continue
            self._report(events)

    def _admit(self) -> None:
        """Hand every queued prompt to the generator (or complete it empty after an abort)."""
        while self._queue:
            ids, indices = self._queue.popleft()
            if self.aborted:
                self.completer.empty(list(ids), "the run was aborted")
                continue
            try:
                rows = self._library.slots(indices)
                prompts = self._library.buffers[PROMPT_IDS]
                lengths = self._library.buffers[PROMPT_LENGTH]
                for request, row in zip(ids, rows.tolist(), strict=True):
                    prompt = prompts[row, : int(lengths[row])]
                    self._generator.add(int(request), prompt)
                    self._running.add(int(request))
            except Exception as exc:
                left = [int(r) for r in ids if int(r) not in self._running]
                self.completer.empty(left, f"{type(exc).__name__}: {exc}")

    def _report(self, events: Sequence[TokenEvent]) -> None:
        """A step's first tokens (outside Offline) and finished outputs to LoadGen: most steps
        have neither, and cost one pass over their events (two outside Offline)."""
        completer = self.completer
        if completer.needs_first_token:
            completer.first_tokens([e for e in events if e.first])
        done = [e for e in events if e.finished]
        if done:
            completer.finished(done, self._name)
            self._running.difference_update(e.request for e in done)
        if self.aborted and self._running:
            self._fail_running("the run was aborted")

    def _fail_running(self, message: str) -> None:
        """Complete every running request empty; the generator is not stepped again (requests
        issued later are completed empty too)."""
        self.aborted = True
        running, self._running = sorted(self._running), set()
        self.completer.empty(running, message)


def first_prompts(
    source: SampleSource, layouts: Sequence[InputLayout], count: int
) -> SampleLibrary:
    """A small library of the source's first `count` prompts (what calibration generates)."""
    library = SampleLibrary.allocate(
        layouts, capacity=min(count, source.total_count), total_count=source.total_count
    )
    library.load(range(library.capacity), source)
    return library


def generate_all(generator: TokenGenerator, prompts: Sequence[np.ndarray], first: int = 0) -> int:
    """Generate every prompt to its end (requests first.., stepping until none is left); the
    tokens made."""
    for offset, prompt in enumerate(prompts):
        generator.add(first + offset, prompt)
    left = set(range(first, first + len(prompts)))
    tokens = 0
    while left:
        for event in generator.step():
            if event.finished:
                left.discard(event.request)
                tokens += 0 if event.tokens is None else len(event.tokens)
    return tokens


# The SUT's own path (the generation thread's wake-up, one FirstTokenComplete, the events, the
# completion), measured with the model-free generator on the 2-core test machine: about 0.2 ms a
# request and 10 us a token beside the generator's own time. Calibration adds it, so that a fast
# generator's target is not one its SUT cannot meet (a SingleStream target of microseconds has
# LoadGen build tens of thousands of queries).
REQUEST_PATH_S = 2e-4
TOKEN_PATH_S = 1e-5
TOKEN_STREAM_LATENCY_FACTOR = 0.25  # expect less latency than measured: more queries, never few


def generation_target(
    generator: TokenGenerator,
    library: SampleLibrary,
    loadgen_scenario: str,
    *,
    batch_size: int,
) -> float:
    """The quick preset's target for a generative workload (QPS for Offline and Server, latency
    in ms for the stream scenarios), timed on the generator itself: one untimed request warms
    it, then `batch_size` requests (one for SingleStream) are generated together to their end,
    twice; the faster pass plus the SUT's path (REQUEST_PATH_S, TOKEN_PATH_S) counts. The
    Offline and Server margins are calibration.py's."""
    from mlperf_mig.harness.calibration import OFFLINE_MARGIN, SERVER_LOAD

    count = 1 if loadgen_scenario == "SingleStream" else max(1, batch_size)
    loaded = library.loaded_count
    ids, lengths = library.buffers[PROMPT_IDS], library.buffers[PROMPT_LENGTH]
    prompts = [ids[k % loaded, : int(lengths[k % loaded])].copy() for k in range(count)]
    generate_all(generator, prompts[:1], first=-1)
    timings = []
    for attempt in range(2):
        start = time.perf_counter()
        tokens = generate_all(generator, prompts, first=-(2 + attempt) * count - 1)
        timings.append(time.perf_counter() - start)
    seconds = min(timings) + count * REQUEST_PATH_S + tokens * TOKEN_PATH_S
    if loadgen_scenario == "Offline":
        return count / seconds * OFFLINE_MARGIN
    if loadgen_scenario == "Server":
        return count / seconds * SERVER_LOAD
    return seconds * 1e3 * TOKEN_STREAM_LATENCY_FACTOR
