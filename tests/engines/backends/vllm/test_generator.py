"""The vLLM token generator against a fake vllm (conftest.py): requests, events, batching."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mlperf_mig.engines.backends.vllm.generator import (
    VllmGenerator,
    engine_args,
    import_vllm,
    load_generator,
)
from mlperf_mig.engines.backends.vllm.model import VllmModel
from mlperf_mig.engines.backends.vllm.settings import vllm_settings
from mlperf_mig.errors import BackendUnavailableError, WorkloadError
from mlperf_mig.workloads.generation import MIN_NEW_TOKENS, TokenEvent
from mlperf_mig.workloads.llama3_1_8b.shape import FULL


def _settings(**options: Any) -> Any:
    return vllm_settings(memory_gib=32.25, compute_slices=1, **options)


@pytest.fixture(name="dummy_model")
def fixture_dummy_model(tmp_path: Path) -> VllmModel:
    return VllmModel.generated(cache_dir=tmp_path)


@pytest.fixture(name="generator")
def fixture_generator(fake_vllm: list[Any], dummy_model: VllmModel) -> VllmGenerator:
    """A generator of at most 4 new tokens over a fake engine."""
    return load_generator(dummy_model, _settings(), max_new_tokens=4)


def _prompt(*ids: int) -> np.ndarray:
    return np.asarray(ids, dtype=np.int32)


def _run(generator: VllmGenerator) -> list[TokenEvent]:
    events = []
    while generator.pending:
        events.extend(generator.step())
    return events


def test_add_sends_token_ids_with_greedy_params(
    generator: VllmGenerator, fake_vllm: list[Any]
) -> None:
    """A prompt goes to vLLM as a TokensPrompt of its ids with greedy, undetokenized DELTA params."""
    generator.add(7, _prompt(5, 6, 7))
    request_id, prompt, params = fake_vllm[0].added[0]
    assert request_id == "7" and prompt == {"prompt_token_ids": [5, 6, 7]}
    assert params.temperature == 0.0 and params.max_tokens == 4
    assert params.min_tokens == MIN_NEW_TOKENS and params.detokenize is False
    assert params.output_kind == sys.modules["vllm.sampling_params"].RequestOutputKind.DELTA


def test_first_token_is_flagged_once(generator: VllmGenerator) -> None:
    """Only a request's first output token is flagged first."""
    generator.add(1, _prompt(3))
    assert [e.first for e in _run(generator)] == [True, False, False, False]


def test_finished_event_carries_the_whole_output(generator: VllmGenerator) -> None:
    """The last event is flagged finished and holds every output token as int32."""
    generator.add(1, _prompt(3))
    events = _run(generator)
    last = events[-1]
    assert last.finished and [e.finished for e in events[:-1]] == [False] * 3
    assert last.tokens is not None and last.tokens.dtype == np.int32
    assert last.tokens.tolist() == [1003, 1004, 1005, 1006] == [e.token for e in events]


def test_several_tokens_in_one_step_are_one_event_each(
    generator: VllmGenerator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step that yields 3 tokens of a request gives 3 events in order, the first flagged."""
    monkeypatch.setattr(sys.modules["vllm"].LLMEngine, "tokens_per_step", 3)
    generator.add(1, _prompt(3))
    first_step = generator.step()
    assert [(e.token, e.first, e.finished) for e in first_step] == [
        (1003, True, False),
        (1004, False, False),
        (1005, False, False),
    ]
    (last,) = generator.step()
    assert (
        last.finished
        and last.tokens is not None
        and last.tokens.tolist() == [1003, 1004, 1005, 1006]
    )


def test_requests_answered_under_vllms_own_ids_are_found(
    generator: VllmGenerator, fake_vllm: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outputs under the id vLLM returned (the given id plus a suffix) reach the right request."""
    engine = fake_vllm[0]
    original = type(engine).step

    def internal_ids(self: Any) -> list[Any]:
        outputs = original(self)
        for output in outputs:
            output.request_id = f"{output.request_id}-1a2b3c4d"
        return outputs

    monkeypatch.setattr(type(engine), "step", internal_ids)
    generator.add(9, _prompt(1))
    assert {e.request for e in _run(generator)} == {9}


def test_a_prompt_added_later_joins_the_running_batch(generator: VllmGenerator) -> None:
    """A request added between steps is admitted at the next step while others keep running."""
    generator.add(1, _prompt(10))
    first = generator.step()
    generator.add(2, _prompt(20))
    second = generator.step()
    assert [e.request for e in first] == [1]
    assert sorted((e.request, e.first) for e in second) == [(1, False), (2, True)]
    assert generator.pending == 2


def test_pending_counts_unfinished_requests(generator: VllmGenerator) -> None:
    """pending is the number of requests added and not finished; 0 after they all finish."""
    generator.add(1, _prompt(1))
    generator.add(2, _prompt(2))
    assert generator.pending == 2
    _run(generator)
    assert generator.pending == 0 and generator.step() == []


def test_dummy_weights_generate_every_token(generator: VllmGenerator, fake_vllm: list[Any]) -> None:
    """Random weights have no meaningful EOS: requests ignore it and have no stop ids."""
    generator.add(1, _prompt(1))
    params = fake_vllm[0].added[0][2]
    assert params.ignore_eos is True and params.stop_token_ids == []


def test_user_weights_stop_at_their_eos(
    fake_vllm: list[Any], dummy_model: VllmModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model with EOS ids stops there (after the minimum of new tokens), like the reference."""
    import attrs

    model = attrs.evolve(dummy_model, dummy=False, eos_token_ids=(128009, 128001))
    monkeypatch.setattr(sys.modules["vllm"].LLMEngine, "eos_at", 2)
    generator = load_generator(model, _settings(), max_new_tokens=8)
    generator.add(1, _prompt(1))
    events = _run(generator)
    assert fake_vllm[0].added[0][2].stop_token_ids == [128009, 128001]
    assert events[-1].tokens is not None and events[-1].tokens.tolist() == [1001, 1002, 128009]


def test_too_long_prompt_is_refused(generator: VllmGenerator) -> None:
    """A prompt that leaves no room for the new tokens in max_model_len is one line."""
    with pytest.raises(
        WorkloadError, match="8190-token prompt plus 4 new tokens exceeds max_model_len 8192"
    ):
        generator.add(1, np.ones(8190, dtype=np.int32))


def test_prompt_must_be_token_ids(generator: VllmGenerator) -> None:
    """A 2-D or float prompt is refused before vLLM sees it."""
    with pytest.raises(WorkloadError, match="1-D array of token ids"):
        generator.add(1, np.ones((2, 3), dtype=np.float32))


def test_a_running_request_id_is_not_reused(generator: VllmGenerator) -> None:
    """Adding a request id that is still running is refused."""
    generator.add(1, _prompt(1))
    with pytest.raises(WorkloadError, match="request 1 is already running"):
        generator.add(1, _prompt(2))


def test_fewer_than_two_new_tokens_are_refused(
    fake_vllm: list[Any], dummy_model: VllmModel
) -> None:
    """max_new_tokens below 2 cannot give LoadGen a TPOT."""
    with pytest.raises(WorkloadError, match="at least 2"):
        load_generator(dummy_model, _settings(), max_new_tokens=1)


def test_close_aborts_running_requests_and_shuts_down(
    generator: VllmGenerator, fake_vllm: list[Any]
) -> None:
    """close() aborts what runs, shuts the engine core down once, and refuses later use."""
    generator.add(1, _prompt(1))
    generator.step()
    generator.close()
    generator.close()
    assert fake_vllm[0].aborted == ["1"] and fake_vllm[0].engine_core.shutdown_calls == 1
    with pytest.raises(RuntimeError, match="closed"):
        generator.step()


def test_engine_args_set_every_limit_and_skip_the_tokenizer(
    fake_vllm: list[Any], dummy_model: VllmModel
) -> None:
    """The engine gets the dummy folder, no tokenizer, and the slice's explicit limits."""
    settings = _settings(max_num_seqs=12, precision="fp8")
    args = engine_args(import_vllm(), dummy_model, settings).kwargs
    assert args["model"] == str(dummy_model.folder) and args["load_format"] == "dummy"
    assert args["skip_tokenizer_init"] is True and args["generation_config"] == "vllm"
    assert args["max_num_seqs"] == 12 and args["max_model_len"] == 8192
    assert args["max_num_batched_tokens"] == settings.max_num_batched_tokens
    assert args["gpu_memory_utilization"] == settings.gpu_memory_utilization
    assert args["quantization"] == "fp8" and args["dtype"] == "bfloat16"
    assert args["enforce_eager"] is False and args["tensor_parallel_size"] == 1


def test_import_without_vllm_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without vllm, import_vllm raises BackendUnavailableError pointing at doctor."""
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(BackendUnavailableError, match=r"vllm is not installed.*mlperf-mig doctor"):
        import_vllm()


def test_generated_model_is_the_8b_shape(dummy_model: VllmModel) -> None:
    """Without user weights the engine loads dummy weights of Llama-3.1-8B's shape."""
    assert dummy_model.dummy and dummy_model.shape == FULL
