"""The vLLM token generator: an LLMEngine driven one step at a time (workloads/generation.py).

The SUT hands prompts as token ids (the engine starts without a tokenizer: skip_tokenizer_init)
and steps the generator; each `step` is one `LLMEngine.step()`, which admits the queued prompts
into the running batch (continuous batching) and decodes. Requests ask for greedy decoding
(temperature 0), at most `max_new_tokens` and at least MIN_NEW_TOKENS new tokens (LoadGen needs 2
for TPOT), no detokenization, and their outputs as deltas: a step may give a request several
tokens (multi-token streaming, speculative decoding), and each becomes its own event in order.

vllm is imported only in `import_vllm`, so this module imports anywhere; the tests pass a fake.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import attrs
import numpy as np

from mlperf_mig.engines.backends.vllm.model import VllmModel
from mlperf_mig.engines.backends.vllm.settings import VllmSettings
from mlperf_mig.errors import BackendUnavailableError, WorkloadError
from mlperf_mig.workloads.generation import MIN_NEW_TOKENS, TokenEvent, check_new_tokens

log = logging.getLogger(__name__)

# MLPerf llama3.1-8b generates at most 128 new tokens (reference/llm.md section 1).
DEFAULT_MAX_NEW_TOKENS = 128

# vLLM's objects are typed by name here: vllm ships no stubs this project checks against.
VllmEngine = Any  # a vllm.LLMEngine


@attrs.frozen(kw_only=True)
class VllmApi:
    """The parts of vLLM's public API the generator uses (vllm 0.10 and later, engine V1)."""

    version: str
    engine_args: Callable[..., Any]  # vllm.EngineArgs
    llm_engine: Any  # vllm.LLMEngine (its from_engine_args)
    sampling_params: Callable[..., Any]  # vllm.SamplingParams
    tokens_prompt: Callable[..., Any]  # vllm.inputs.TokensPrompt
    delta_output: Any  # vllm.sampling_params.RequestOutputKind.DELTA


def import_vllm(import_module: Callable[[str], ModuleType] = importlib.import_module) -> VllmApi:
    """vLLM's API, or BackendUnavailableError saying it is not installed."""
    try:
        vllm = import_module("vllm")
        inputs = import_module("vllm.inputs")
        sampling = import_module("vllm.sampling_params")
    except ImportError as exc:
        raise BackendUnavailableError(
            f"the vllm backend cannot run here: vllm is not installed ({exc}); "
            "`mlperf-mig doctor` prints the command that installs it"
        ) from None
    return VllmApi(
        version=str(vllm.__version__),
        engine_args=vllm.EngineArgs,
        llm_engine=vllm.LLMEngine,
        sampling_params=vllm.SamplingParams,
        tokens_prompt=inputs.TokensPrompt,
        delta_output=sampling.RequestOutputKind.DELTA,
    )


def engine_args(api: VllmApi, model: VllmModel, settings: VllmSettings, *, seed: int = 0) -> Any:
    """vLLM's EngineArgs for `model` on one slice: every limit from `settings`, no tokenizer."""
    return api.engine_args(
        model=str(model.folder),
        load_format=model.load_format,
        # The SUT sends token ids and takes token ids back: no tokenizer, no download of one.
        skip_tokenizer_init=True,
        # A model folder's generation_config.json (Llama-3.1-Instruct: temperature 0.6, top_p
        # 0.9) must not change the benchmark's greedy decoding.
        generation_config="vllm",
        tensor_parallel_size=1,
        seed=seed,
        disable_log_stats=True,
        **settings.engine_kwargs(),
    )


def create_engine(
    api: VllmApi, model: VllmModel, settings: VllmSettings, *, seed: int = 0
) -> VllmEngine:
    """An LLMEngine on this process's device (call `settings.bind_slice` first on a slice)."""
    log.info("starting vLLM %s on %s: %s", api.version, model.folder, settings.describe())
    return api.llm_engine.from_engine_args(engine_args(api, model, settings, seed=seed))


class VllmGenerator:
    """A TokenGenerator (workloads/generation.py) over a vLLM LLMEngine."""

    def __init__(
        self,
        engine: VllmEngine,
        *,
        api: VllmApi,
        max_model_len: int,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        stop_token_ids: Sequence[int] = (),
    ) -> None:
        check_new_tokens(max_new_tokens)
        if max_new_tokens >= max_model_len:
            raise WorkloadError(
                f"max_new_tokens {max_new_tokens} leaves no room for a prompt in "
                f"max_model_len {max_model_len}"
            )
        self._engine: VllmEngine | None = engine
        self._api = api
        self._max_new_tokens = max_new_tokens
        self._max_model_len = max_model_len
        # No stop ids (random weights): every request generates max_new_tokens.
        self._params = api.sampling_params(
            n=1,
            temperature=0.0,
            max_tokens=max_new_tokens,
            min_tokens=MIN_NEW_TOKENS,
            stop_token_ids=list(stop_token_ids),
            ignore_eos=not stop_token_ids,
            detokenize=False,
            output_kind=api.delta_output,
        )
        self._requests: dict[str, int] = {}  # vLLM's request id -> the SUT's
        self._outputs: dict[int, list[int]] = {}  # the SUT's request -> its tokens so far

    @property
    def max_new_tokens(self) -> int:
        return self._max_new_tokens

    @property
    def pending(self) -> int:
        return len(self._outputs)

    @property
    def closed(self) -> bool:
        return self._engine is None

    def add(self, request: int, prompt: np.ndarray) -> None:
        """Queue `prompt` (int32 token ids) under `request`; the next step admits it."""
        engine = self._live_engine()
        ids = np.asarray(prompt)
        if ids.ndim != 1 or ids.size == 0 or not np.issubdtype(ids.dtype, np.integer):
            raise WorkloadError(
                f"request {request}: a prompt is a non-empty 1-D array of token ids, "
                f"got shape {ids.shape} of {ids.dtype}"
            )
        if ids.size + self._max_new_tokens > self._max_model_len:
            raise WorkloadError(
                f"request {request}: a {ids.size}-token prompt plus {self._max_new_tokens} new "
                f"tokens exceeds max_model_len {self._max_model_len}; raise max_model_len"
            )
        if request in self._outputs:
            raise WorkloadError(f"request {request} is already running")
        request_id = str(request)
        engine_id = engine.add_request(
            request_id, self._api.tokens_prompt(prompt_token_ids=ids.tolist()), self._params
        )
        self._requests[request_id] = request
        # recent vLLM returns the id it uses inside (the given one with a random suffix)
        if isinstance(engine_id, str):
            self._requests[engine_id] = request
        self._outputs[request] = []

    def step(self) -> list[TokenEvent]:
        """One engine step: an event for every token it produced, in order per request."""
        engine = self._live_engine()
        if not self._outputs:
            return []
        events: list[TokenEvent] = []
        for output in engine.step():
            request = self._requests.get(str(output.request_id))
            if request is None or request not in self._outputs:
                raise BackendUnavailableError(
                    f"vLLM answered request {output.request_id!r}, which this generator did not "
                    "add (is the engine shared?)"
                )
            events.extend(self._events(request, output))
        return events

    def _events(self, request: int, output: Any) -> list[TokenEvent]:
        tokens = self._outputs[request]
        new = [int(t) for t in output.outputs[0].token_ids]
        finished = bool(output.finished)
        if finished and not new and not tokens:
            raise BackendUnavailableError(f"vLLM finished request {request} without a token")
        if finished and not new:
            # the finish came in a step of its own: its event repeats the last token
            self._forget(request)
            whole = np.asarray(tokens, dtype=np.int32)
            return [
                TokenEvent(
                    request=request, token=tokens[-1], first=False, finished=True, tokens=whole
                )
            ]
        events = []
        for index, token in enumerate(new):
            first = not tokens
            tokens.append(token)
            last = finished and index == len(new) - 1
            events.append(
                TokenEvent(
                    request=request,
                    token=token,
                    first=first,
                    finished=last,
                    tokens=np.asarray(tokens, dtype=np.int32) if last else None,
                )
            )
        if finished:
            self._forget(request)
        else:
            self._outputs[request] = tokens
        return events

    def _forget(self, request: int) -> None:
        del self._outputs[request]
        for key in [k for k, v in self._requests.items() if v == request]:
            del self._requests[key]

    def _live_engine(self) -> VllmEngine:
        if self._engine is None:
            raise RuntimeError("the vLLM generator is closed")
        return self._engine

    def close(self) -> None:
        """Abort what is still running and shut the engine down (its GPU memory is freed)."""
        engine, self._engine = self._engine, None
        if engine is None:
            return
        running = [str(request) for request in self._outputs]
        if running:
            engine.abort_request(running)
        self._requests.clear()
        self._outputs.clear()
        engine.engine_core.shutdown()

    def __enter__(self) -> VllmGenerator:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def load_generator(
    model: VllmModel,
    settings: VllmSettings,
    *,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    seed: int = 0,
    api: VllmApi | None = None,
) -> VllmGenerator:
    """A generator over a new engine for `model` with `settings`, in this process.

    On a slice, the worker starts with `worker_environment(...)` and calls `bind_slice()` before
    this. The engine stops at the model's end-of-sequence ids (none for dummy weights).
    """
    if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") != "0":
        log.warning(
            "VLLM_ENABLE_V1_MULTIPROCESSING is not 0: vLLM may start its engine in another "
            "process, which does not see the slice bound here (worker_environment sets it)"
        )
    vllm_api = api or import_vllm()
    engine = create_engine(vllm_api, model, settings, seed=seed)
    return VllmGenerator(
        engine,
        api=vllm_api,
        max_model_len=settings.max_model_len,
        max_new_tokens=max_new_tokens,
        stop_token_ids=model.eos_token_ids,
    )
