"""Token generation: the seam between a generative workload's SUT and what generates its tokens.

A SUT of a generative workload (llama3.1-8b) hands prompts to a `TokenGenerator` and steps it;
each step admits the prompts queued since the last one (continuous batching: they join the
running batch) and produces one token for every running request. The SUT reports a request's
first token to LoadGen as soon as its event arrives and the whole output when it finishes.

Two generators implement it: the KV-cache loop over an ONNX decoder (any backend that runs a
graph: ONNX Runtime on the CPU or CUDA) and vLLM on a GPU slice.
"""

from __future__ import annotations

from typing import Protocol

import attrs
import numpy as np

from mlperf_mig.errors import WorkloadError

# LoadGen computes TPOT as (latency - TTFT) / (n_tokens - 1) and logs an error for fewer than 2
# tokens: every request generates at least this many.
MIN_NEW_TOKENS = 2


@attrs.frozen(kw_only=True)
class TokenEvent:
    """One token produced for one request by one step."""

    request: int  # the id the SUT passed to `add`
    token: int  # the token this step produced
    first: bool  # the request's first output token (what LoadGen's FirstTokenComplete takes)
    finished: bool  # the request's last token: `tokens` holds its whole output
    tokens: np.ndarray | None = None  # int32, every output token in order, set when finished


class TokenGenerator(Protocol):
    """Generates tokens for many requests at once, one step at a time."""

    @property
    def max_new_tokens(self) -> int: ...

    @property
    def pending(self) -> int:
        """Requests queued or running (0: a step would do nothing)."""

    def add(self, request: int, prompt: np.ndarray) -> None:
        """Queue `prompt` (int32 token ids) under `request`; it joins the batch at the next step."""

    def step(self) -> list[TokenEvent]:
        """Admit the queued prompts and decode one token for every running request; the events
        of this step (a finished request's event carries its whole output)."""

    def close(self) -> None:
        """Release what the generator holds (sessions, GPU memory)."""


class ModelFreeGenerator:
    """The null backend's generator: computes no model, answers every request with exactly
    `max_new_tokens` tokens (the prompt's ids, cycled), one a step, all running requests in one
    step. It measures the harness's token path (LoadGen, the SUT thread, the completions) alone."""

    def __init__(self, *, max_new_tokens: int) -> None:
        check_new_tokens(max_new_tokens)
        self._max_new_tokens = max_new_tokens
        self._queued: list[tuple[int, np.ndarray]] = []
        self._running: dict[int, tuple[np.ndarray, int]] = {}  # request -> (prompt, tokens made)

    @property
    def max_new_tokens(self) -> int:
        return self._max_new_tokens

    @property
    def pending(self) -> int:
        return len(self._queued) + len(self._running)

    def add(self, request: int, prompt: np.ndarray) -> None:
        self._queued.append((request, prompt if len(prompt) else np.ones(1, dtype=np.int32)))

    def step(self) -> list[TokenEvent]:
        for request, prompt in self._queued:
            self._running[request] = (prompt, 0)
        self._queued.clear()
        events = []
        for request, (prompt, made) in list(self._running.items()):
            token = int(prompt[made % len(prompt)])
            made += 1
            if made < self._max_new_tokens:
                self._running[request] = (prompt, made)
                events.append(
                    TokenEvent(request=request, token=token, first=made == 1, finished=False)
                )
                continue
            del self._running[request]
            tokens = np.resize(prompt, self._max_new_tokens).astype(np.int32)
            events.append(
                TokenEvent(
                    request=request, token=token, first=made == 1, finished=True, tokens=tokens
                )
            )
        return events

    def close(self) -> None:
        self._queued.clear()
        self._running.clear()


def check_new_tokens(max_new_tokens: int) -> None:
    """Refuse a limit of new tokens below MIN_NEW_TOKENS (LoadGen's TPOT needs 2)."""
    if max_new_tokens < MIN_NEW_TOKENS:
        raise WorkloadError(
            f"a generator must make at least {MIN_NEW_TOKENS} tokens per request (LoadGen's time "
            f"per output token needs 2); got max_new_tokens={max_new_tokens}"
        )
