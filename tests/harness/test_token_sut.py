"""The token SUT with a recording stand-in for LoadGen that keeps LoadGen's token rules: a
sample completed before its first token was reported is what crashes a real SingleStream test
(reference/llm.md section 2), so the stand-in records it as a crash."""

from __future__ import annotations

import ctypes
import threading

import numpy as np
import pytest

from mlperf_mig.harness import progress as progress_module
from mlperf_mig.harness.samples import InputLayout, SampleLibrary
from mlperf_mig.harness.token_sut import (
    PROMPT_IDS,
    PROMPT_LENGTH,
    TokenCompleter,
    TokenStreamSUT,
    generate_all,
    generation_target,
)
from mlperf_mig.workloads.generation import ModelFreeGenerator, TokenEvent


class Response:
    def __init__(self, qid: int, ptr: int, size: int, n_tokens: int = 0) -> None:
        self.id, self.data, self.size, self.n_tokens = qid, ptr, size, n_tokens


class TokenLoadGen:
    """Records first tokens and completions; a completion without a first token is a crash."""

    def __init__(self, *, needs_first_token: bool = True) -> None:
        self.needs_first_token = needs_first_token
        self.first: dict[int, np.ndarray] = {}
        self.done: dict[int, tuple[np.ndarray, int]] = {}
        self.crashes: list[int] = []
        self.lock = threading.Lock()

    def QuerySampleResponse(self, qid: int, ptr: int, size: int, n_tokens: int = 0) -> Response:
        return Response(qid, ptr, size, n_tokens)

    def FirstTokenComplete(self, responses: list[Response]) -> None:
        with self.lock:
            for r in responses:
                self.first[r.id] = _tokens(r)

    def QuerySamplesComplete(self, responses: list[Response]) -> None:
        with self.lock:
            for r in responses:
                if self.needs_first_token and r.id not in self.first:
                    self.crashes.append(r.id)
                self.done[r.id] = (_tokens(r), r.n_tokens)


def _tokens(r: Response) -> np.ndarray:
    data = ctypes.string_at(r.data, r.size) if r.size else b""
    return np.frombuffer(data, dtype=np.int32).copy()


def _library(prompts: list[list[int]]) -> SampleLibrary:
    width = max(len(p) for p in prompts)
    layouts = (
        InputLayout(name=PROMPT_IDS, dtype="int32", shape=(width,)),
        InputLayout(name=PROMPT_LENGTH, dtype="int32", shape=()),
    )
    library = SampleLibrary.allocate(layouts, capacity=len(prompts), total_count=len(prompts))

    class Source:
        total_count = performance_count = len(prompts)
        synthetic = True
        description = "test prompts"

        def fill(self, indices, out):
            for row, index in enumerate(indices):
                prompt = prompts[index]
                out[PROMPT_IDS][row, : len(prompt)] = prompt
                out[PROMPT_LENGTH][row] = len(prompt)

    library.load(list(range(len(prompts))), Source())
    return library


def _serve(sut: TokenStreamSUT, queries: list[tuple[list[int], list[int]]]) -> None:
    sut.start()
    for ids, indices in queries:
        sut.issue(ids, indices)
    sut.stop()


@pytest.mark.parametrize("scenario", ["SingleStream", "Server", "Offline"])
def test_every_request_gets_its_first_token_then_its_whole_output(scenario):
    lg = TokenLoadGen(needs_first_token=scenario != "Offline")
    library = _library([[5, 6, 7], [9], [3, 4]])
    completer = TokenCompleter(lg, needs_first_token=scenario != "Offline")
    generator = ModelFreeGenerator(max_new_tokens=4)
    sut = TokenStreamSUT(completer=completer, generator=generator, library=library, name="test")
    _serve(sut, [([100, 101], [0, 1]), ([102], [2])])
    assert sorted(lg.done) == [100, 101, 102]
    assert lg.done[100][0].tolist() == [5, 6, 7, 5] and lg.done[100][1] == 4
    assert lg.done[101][0].tolist() == [9, 9, 9, 9]
    assert lg.crashes == []
    if scenario == "Offline":
        assert lg.first == {}  # Offline reports no first token
    else:
        assert {k: v.tolist() for k, v in lg.first.items()} == {100: [5], 101: [9], 102: [3]}
    assert sut.completed == 3 and sut.error is None and completer.tokens == 12


def test_completions_are_reported_to_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    """The completer tells its progress callback the completed count (here after every
    completion call: an interval of 0)."""
    monkeypatch.setattr(progress_module, "PROGRESS_INTERVAL_S", 0.0)
    reports: list[int] = []
    completer = TokenCompleter(TokenLoadGen(), needs_first_token=False, progress=reports.append)
    tokens = np.array([1, 2], dtype=np.int32)
    done = [
        TokenEvent(request=r, token=2, first=False, finished=True, tokens=tokens) for r in (1, 2)
    ]
    completer.finished(done, "test")
    completer.empty([3], "test failure")
    assert reports == [2, 3]


class SkipsFirstToken(ModelFreeGenerator):
    """A generator that never flags a first token (what crashes LoadGen in SingleStream)."""

    def step(self) -> list[TokenEvent]:
        events = super().step()
        return [
            TokenEvent(request=e.request, token=e.token, first=False, finished=e.finished,
                       tokens=e.tokens)
            for e in events
        ]  # fmt: skip


def test_a_generator_skipping_the_first_token_cannot_crash_loadgen():
    lg = TokenLoadGen()
    completer = TokenCompleter(lg, needs_first_token=True)
    sut = TokenStreamSUT(
        completer=completer,
        generator=SkipsFirstToken(max_new_tokens=3),
        library=_library([[1, 2]]),
        name="the test generator",
    )
    _serve(sut, [([7], [0])])
    assert lg.crashes == []  # LoadGen got the first token before the completion
    assert lg.first[7].tolist() == [1]
    assert lg.done[7][0].tolist() == [1, 2, 1]
    assert "the test generator finished 1 request(s) without a first-token event" in sut.error


class OneToken(ModelFreeGenerator):
    def step(self) -> list[TokenEvent]:
        events = []
        for request, _prompt in self._queued:
            events.append(
                TokenEvent(request=request, token=1, first=True, finished=True,
                           tokens=np.ones(1, dtype=np.int32))
            )  # fmt: skip
        self._queued.clear()
        return events


def test_an_output_of_one_token_fails_the_run_but_is_completed():
    lg = TokenLoadGen()
    completer = TokenCompleter(lg, needs_first_token=True)
    sut = TokenStreamSUT(
        completer=completer, generator=OneToken(max_new_tokens=2), library=_library([[4]]),
        name="g",
    )  # fmt: skip
    _serve(sut, [([3], [0])])
    assert lg.done[3][1] == 1 and lg.crashes == []
    assert "finished a request with 1 token(s)" in sut.error and sut.failed_samples == 1


class Explodes(ModelFreeGenerator):
    def step(self) -> list[TokenEvent]:
        super().step()
        raise RuntimeError("CUDA error: an illegal memory access")


def test_a_failing_generator_completes_every_request_empty():
    lg = TokenLoadGen()
    completer = TokenCompleter(lg, needs_first_token=True)
    sut = TokenStreamSUT(
        completer=completer, generator=Explodes(max_new_tokens=2),
        library=_library([[1], [2]]), name="the gpu generator",
    )  # fmt: skip
    sut.start()
    sut.issue([1, 2], [0, 1])
    sut.issue([3], [0])
    sut.stop()
    assert sorted(lg.done) == [1, 2, 3] and lg.crashes == []
    assert (
        sut.error == "the gpu generator failed: RuntimeError: CUDA error: an illegal memory access"
    )
    assert sut.failed_samples == 3


def test_an_abort_completes_what_is_issued_later_without_the_generator():
    lg = TokenLoadGen()
    completer = TokenCompleter(lg, needs_first_token=False)
    generator = ModelFreeGenerator(max_new_tokens=2)
    sut = TokenStreamSUT(
        completer=completer, generator=generator, library=_library([[1]]), name="g"
    )
    sut.abort(OSError("disk full"))
    _serve(sut, [([8], [0])])
    assert lg.done[8][1] == 0 and sut.error == "OSError: disk full"
    assert generator.pending == 0


def test_model_free_generator_refuses_fewer_than_two_tokens():
    from mlperf_mig.errors import WorkloadError

    with pytest.raises(WorkloadError, match="at least 2 tokens per request"):
        ModelFreeGenerator(max_new_tokens=1)


def test_generate_all_runs_every_prompt_to_its_end():
    generator = ModelFreeGenerator(max_new_tokens=5)
    tokens = generate_all(generator, [np.array([1, 2], dtype=np.int32)] * 3)
    assert tokens == 15 and generator.pending == 0


class Sleepy(ModelFreeGenerator):
    """Every step takes at least 5 ms."""

    def step(self) -> list[TokenEvent]:
        import time

        time.sleep(0.005)
        return super().step()


def test_generation_target_follows_the_timed_generation():
    """4 requests of 4 tokens generate together in 4 steps (at least 20 ms): Offline expects at
    most 4 / 0.02 s x 1.5 (the margin), Server at most half the rate, and SingleStream's expected
    latency (one request, 4 steps) is at least 20 ms x 0.25."""
    library = _library([[1, 2, 3]] * 4)
    offline = generation_target(Sleepy(max_new_tokens=4), library, "Offline", batch_size=4)
    server = generation_target(Sleepy(max_new_tokens=4), library, "Server", batch_size=4)
    stream = generation_target(Sleepy(max_new_tokens=4), library, "SingleStream", batch_size=4)
    assert 0 < offline <= 300 and 0 < server <= 100
    assert stream >= 5.0
