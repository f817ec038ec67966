"""A fake vllm package (EngineArgs, LLMEngine, SamplingParams, TokensPrompt, RequestOutputKind)
put in sys.modules, whose engine produces tokens deterministically and records what it is told.

The fake follows vLLM's V1 LLMEngine: `add_request` returns its own id (the given one with a
random suffix), `step` admits queued requests and answers with RequestOutputs under the given id,
each holding the step's new tokens (DELTA outputs); `tokens_per_step` > 1 is multi-token
streaming or speculative decoding.
"""

from __future__ import annotations

import enum
import sys
import types
from collections.abc import Iterator
from typing import Any

import attrs
import pytest


class RequestOutputKind(enum.Enum):
    CUMULATIVE = 0
    DELTA = 1
    FINAL_ONLY = 2


@attrs.define(kw_only=True)
class SamplingParams:
    n: int = 1
    temperature: float = 1.0
    max_tokens: int | None = 16
    min_tokens: int = 0
    stop_token_ids: list[int] = attrs.Factory(list)
    ignore_eos: bool = False
    detokenize: bool = True
    output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE


class EngineArgs:
    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


@attrs.define
class _Completion:
    token_ids: list[int]


@attrs.define
class RequestOutput:
    request_id: str
    outputs: list[_Completion]
    finished: bool


@attrs.define
class _Running:
    external: str
    prompt: list[int]
    params: SamplingParams
    tokens: list[int] = attrs.Factory(list)


class FakeEngine:
    """Deterministic tokens: token i of a request is 1000 + its prompt's first id + i."""

    tokens_per_step = 1
    eos_at: int | None = None  # a stop id appears as this output index (when not ignored)

    def __init__(self, args: EngineArgs) -> None:
        self.args = args
        self.added: list[tuple[str, dict[str, Any], SamplingParams]] = []
        self.queued: list[_Running] = []
        self.running: dict[str, _Running] = {}
        self.steps = 0
        self.aborted: list[str] = []
        self.engine_core = types.SimpleNamespace(shutdown_calls=0)
        self.engine_core.shutdown = self._shutdown

    @classmethod
    def from_engine_args(cls, args: EngineArgs) -> FakeEngine:
        engine = cls(args)
        ENGINES.append(engine)
        return engine

    def _shutdown(self) -> None:
        self.engine_core.shutdown_calls += 1

    def add_request(self, request_id: str, prompt: dict[str, Any], params: SamplingParams) -> str:
        assert isinstance(request_id, str)
        self.added.append((request_id, prompt, params))
        self.queued.append(
            _Running(external=request_id, prompt=prompt["prompt_token_ids"], params=params)
        )
        return f"{request_id}-1a2b3c4d"

    def step(self) -> list[RequestOutput]:
        self.steps += 1
        for request in self.queued:
            self.running[request.external] = request
        self.queued = []
        outputs = []
        for key, request in list(self.running.items()):
            assert request.params.max_tokens is not None
            new = []
            finished = False
            for _ in range(self.tokens_per_step):
                index = len(request.tokens)
                stop = (
                    self.eos_at is not None
                    and index == self.eos_at
                    and not request.params.ignore_eos
                    and index >= request.params.min_tokens
                )
                token = (
                    request.params.stop_token_ids[0] if stop else 1000 + request.prompt[0] + index
                )
                request.tokens.append(token)
                new.append(token)
                if stop or len(request.tokens) == request.params.max_tokens:
                    finished = True
                    break
            outputs.append(RequestOutput(request.external, [_Completion(new)], finished))
            if finished:
                del self.running[key]
        return outputs

    def abort_request(self, request_ids: list[str]) -> None:
        self.aborted.extend(request_ids)
        for request_id in request_ids:
            self.running.pop(request_id, None)


ENGINES: list[FakeEngine] = []


def fake_modules() -> dict[str, types.ModuleType]:
    vllm = types.ModuleType("vllm")
    vllm.__version__ = "0.99.0-fake"  # type: ignore[attr-defined]
    vllm.EngineArgs = EngineArgs  # type: ignore[attr-defined]
    vllm.LLMEngine = FakeEngine  # type: ignore[attr-defined]
    vllm.SamplingParams = SamplingParams  # type: ignore[attr-defined]
    inputs = types.ModuleType("vllm.inputs")

    def tokens_prompt(*, prompt_token_ids: list[int]) -> dict[str, Any]:
        return {"prompt_token_ids": prompt_token_ids}

    inputs.TokensPrompt = tokens_prompt  # type: ignore[attr-defined]
    sampling = types.ModuleType("vllm.sampling_params")
    sampling.RequestOutputKind = RequestOutputKind  # type: ignore[attr-defined]
    return {"vllm": vllm, "vllm.inputs": inputs, "vllm.sampling_params": sampling}


@pytest.fixture(name="fake_vllm")
def fixture_fake_vllm(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[FakeEngine]]:
    """The fake vllm in sys.modules; yields the engines it creates."""
    for name, module in fake_modules().items():
        monkeypatch.setitem(sys.modules, name, module)
    ENGINES.clear()
    monkeypatch.setattr(FakeEngine, "tokens_per_step", 1)
    monkeypatch.setattr(FakeEngine, "eos_at", None)
    yield ENGINES
    ENGINES.clear()
