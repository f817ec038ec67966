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
