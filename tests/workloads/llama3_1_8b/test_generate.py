"""Greedy generation with a KV cache: golden tokens of the tiny decoder, continuous batching
that changes no request's tokens, end tokens, and the limits it refuses."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import pytest

from mlperf_mig.errors import WorkloadError
from mlperf_mig.workloads.generation import MIN_NEW_TOKENS, TokenEvent
from mlperf_mig.workloads.llama3_1_8b import generate
from mlperf_mig.workloads.llama3_1_8b.generate import KvCacheGenerator
from mlperf_mig.workloads.llama3_1_8b.shape import TINY

RunGraph = Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]

# begin-of-text, then 32 fixed ids
GOLDEN_PROMPT = np.concatenate([[TINY.bos_token_id], (np.arange(32) * 37 + 11) % 1024]).astype(
    np.int32
)
# The first 16 tokens the tiny decoder with seed 0 generates for GOLDEN_PROMPT (greedy; computed
# once with onnxruntime 1.32 on the CPU; the smallest gap between the two best logits on the way
# is 0.02, far above the rounding that differs between CPUs).
GOLDEN_TOKENS = [126, 935, 739, 572, 47, 652, 309, 835, 772, 785, 164, 845, 427, 451, 963, 250]


def _prompts() -> list[np.ndarray]:
    """Prompts of different lengths (no end token in them, to keep them plain)."""
    rng = np.random.default_rng(5)
    return [rng.integers(2, TINY.vocab_size, n).astype(np.int32) for n in (5, 17, 9, 30, 1)]


def _generate(
    generator: KvCacheGenerator, prompts: list[np.ndarray], joins: Mapping[int, list[int]]
) -> tuple[dict[int, list[int]], list[list[TokenEvent]]]:
    """Add prompt i at step s for each i in joins[s]; step until nothing is pending. The
    finished outputs by request, and the events of every step."""
    outputs: dict[int, list[int]] = {}
    steps: list[list[TokenEvent]] = []
    while generator.pending or len(steps) <= max(joins):
        for request in joins.get(len(steps), []):
            generator.add(request, prompts[request])
        events = generator.step()
        steps.append(events)
        for event in events:
            if event.finished:
                assert event.tokens is not None
                outputs[event.request] = event.tokens.tolist()
    return outputs, steps


def _generator(
    run: RunGraph, *, max_batch: int = 8, max_new_tokens: int = 16, **kwargs
) -> KvCacheGenerator:
    return KvCacheGenerator(run, TINY, max_new_tokens=max_new_tokens, max_batch=max_batch, **kwargs)


@pytest.fixture(name="alone", scope="module")
def fixture_alone(tiny_run: RunGraph) -> dict[int, list[int]]:
    """Each prompt's tokens generated alone (a batch of one)."""
    prompts = _prompts()
    return {
        i: _generate(_generator(tiny_run, max_batch=1), [prompt], {0: [0]})[0][0]
        for i, prompt in enumerate(prompts)
    }


def test_golden_tokens(tiny_run: RunGraph) -> None:
    """The tiny decoder with seed 0 generates the pinned 16 tokens for the golden prompt."""
    outputs, _ = _generate(_generator(tiny_run), [GOLDEN_PROMPT], {0: [0]})
    assert len(set(GOLDEN_TOKENS)) > 8  # a pin that varies, so a broken model cannot match it
    assert outputs[0] == GOLDEN_TOKENS


def test_a_batch_gives_each_request_its_tokens_alone(
    tiny_run: RunGraph, alone: dict[int, list[int]]
) -> None:
    """Prompts of different lengths prefilled together get the tokens each gets alone."""
    outputs, _ = _generate(_generator(tiny_run), _prompts(), {0: list(range(5))})
    assert outputs == alone


def test_requests_joining_mid_way_get_their_tokens_alone(
    tiny_run: RunGraph, alone: dict[int, list[int]]
) -> None:
    """Requests that join a running batch at later steps, and wait for a free slot, get the
    tokens each gets alone."""
    generator = _generator(tiny_run, max_batch=3)
    outputs, _ = _generate(generator, _prompts(), {0: [0], 3: [1, 2], 7: [3], 12: [4]})
    assert outputs == alone


def test_a_finished_request_frees_its_slot(tiny_run: RunGraph) -> None:
    """With one slot, the second request starts at the step after the first one finishes."""
    generator = _generator(tiny_run, max_batch=1, max_new_tokens=4)
    _, steps = _generate(generator, _prompts(), {0: [0, 1]})
    assert [[(e.request, e.first, e.finished) for e in step] for step in steps] == [
        [(0, True, False)],
        [(0, False, False)],
        [(0, False, False)],
        [(0, False, True)],
        [(1, True, False)],
        [(1, False, False)],
        [(1, False, False)],
        [(1, False, True)],
    ]


def test_events_carry_the_output(tiny_run: RunGraph) -> None:
    """Each request has one first event, and its finished event carries the tokens of all
    its events in order."""
    _, steps = _generate(_generator(tiny_run), _prompts(), {0: [0, 1], 2: [2]})
    streamed: dict[int, list[int]] = {}
    for event in (e for step in steps for e in step):
        assert event.first == (event.request not in streamed)
        streamed.setdefault(event.request, []).append(event.token)
        if event.finished:
            assert event.tokens is not None and event.tokens.dtype == np.int32
            assert event.tokens.tolist() == streamed[event.request]
    assert sorted(streamed) == [0, 1, 2]


def test_an_end_token_ends_the_request_and_is_in_its_output(
    tiny_run: RunGraph, alone: dict[int, list[int]]
) -> None:
    """A request stops at its first end token, which its output includes."""
    tokens = alone[1]
    end = next(i for i in range(MIN_NEW_TOKENS, 16) if tokens[i] not in tokens[:i])
    generator = _generator(tiny_run, eos_token_id=tokens[end])
    outputs, _ = _generate(generator, _prompts(), {0: [1]})
    assert outputs[1] == tokens[: end + 1]


def test_no_end_token_before_the_minimum(tiny_run: RunGraph, alone: dict[int, list[int]]) -> None:
    """An end token is not chosen before MIN_NEW_TOKENS tokens: the next best one is."""
    first = alone[2][0]
    outputs, _ = _generate(_generator(tiny_run, eos_token_id=first), _prompts(), {0: [2]})
    assert outputs[2][0] != first
    assert len(outputs[2]) >= MIN_NEW_TOKENS


@pytest.mark.parametrize("max_new_tokens", [0, 1])
def test_fewer_than_two_new_tokens_are_refused(tiny_run: RunGraph, max_new_tokens: int) -> None:
    """A limit below MIN_NEW_TOKENS is refused in one line."""
    with pytest.raises(WorkloadError, match="at least 2 tokens") as refused:
        _generator(tiny_run, max_new_tokens=max_new_tokens)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(
    ("prompt", "message"),
    [
        (np.array([], dtype=np.int32), "non-empty 1-D"),
        (np.array([[1, 2]], dtype=np.int32), "non-empty 1-D"),
        (np.array([3, TINY.vocab_size], dtype=np.int32), "outside the model's vocabulary"),
        (np.ones(TINY.max_positions, dtype=np.int32), "exceed the model's"),
    ],
)
def test_bad_prompts_are_refused(tiny_run: RunGraph, prompt: np.ndarray, message: str) -> None:
    """An empty, 2-D, out-of-vocabulary or too long prompt is refused when added."""
    with pytest.raises(WorkloadError, match=message):
        _generator(tiny_run).add(0, prompt)


def test_close_forgets_every_request(tiny_run: RunGraph) -> None:
    """After close nothing is pending and a step does nothing."""
    generator = _generator(tiny_run)
    generator.add(0, _prompts()[0])
    generator.step()
    generator.add(1, _prompts()[1])
    generator.close()
    assert generator.pending == 0
    assert generator.step() == []


def test_the_cache_keeps_no_column_nobody_uses(tiny_run: RunGraph) -> None:
    """Once the longest request finishes, the cache columns only it used are dropped: every
    run's first column belongs to a running request."""
    masks: list[np.ndarray] = []

    def recording_run(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        masks.append(feeds["attention_mask"])
        return tiny_run(feeds)

    _generate(_generator(recording_run, max_new_tokens=8), _prompts(), {0: [3], 4: [0]})
    assert all(mask[:, 0].any() for mask in masks)
    assert masks[-1].shape[1] < len(_prompts()[3])  # the 30-token prompt's columns are gone


def test_a_request_id_in_use_is_refused(tiny_run: RunGraph) -> None:
    """Adding an id that is queued or running is refused; once finished it can be used again."""
    generator = _generator(tiny_run, max_new_tokens=2)
    generator.add(4, _prompts()[0])
    with pytest.raises(WorkloadError, match="already queued or running"):
        generator.add(4, _prompts()[1])
    while generator.pending:
        generator.step()
    generator.add(4, _prompts()[1])
    assert generator.pending == 1


def test_large_prefills_are_split_without_changing_tokens(
    tiny_run: RunGraph, alone: dict[int, list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prompts admitted together whose logits would pass the prefill budget are prefilled in
    several runs, and each still gets its tokens alone."""
    monkeypatch.setattr(generate, "PREFILL_LOGITS_BYTES", 20 * TINY.vocab_size * 4)
    prefills: list[int] = []

    def recording_run(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if feeds["past_key_values.0.key"].shape[2] == 0:
            prefills.append(feeds["input_ids"].shape[0])
        return tiny_run(feeds)

    outputs, _ = _generate(_generator(recording_run), _prompts(), {0: list(range(5))})
    assert outputs == alone
    assert prefills == [
        1,
        1,
        1,
        1,
        1,
    ]  # 5, 17, 9, 30 and 1 tokens: no two fit in a budget of 20 rows x positions


def test_a_half_precision_cache_is_fed_as_such(tiny_run: RunGraph) -> None:
    """With cache_dtype float16 every cache fed is float16 (as a half-precision export wants),
    from the empty one of the prefill on."""
    dtypes: set[np.dtype] = set()

    def half_run(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        caches = {k: v for k, v in feeds.items() if k.startswith("past_key_values.")}
        dtypes.update(v.dtype for v in caches.values())
        outputs = tiny_run({**feeds, **{k: v.astype(np.float32) for k, v in caches.items()}})
        return {
            k: v.astype(np.float16) if k.startswith("present.") else v for k, v in outputs.items()
        }

    outputs, _ = _generate(_generator(half_run, cache_dtype=np.float16), _prompts(), {0: [0]})
    assert dtypes == {np.dtype(np.float16)}
    assert len(outputs[0]) == 16


def test_decode_inputs_run_on_past_the_columns_laid_out_ahead() -> None:
    """A batch's positions and mask go on counting when its decodes outrun the columns laid
    out ahead (max_new_tokens of them), left padding kept."""
    batch = generate._Batch(
        requests=[7, 8],
        lengths=np.array([3, 1]),
        tokens=np.zeros((2, 1), dtype=np.int64),
        mask=np.array([[1, 1, 1], [0, 0, 1]]),
        cache=[],
        max_new_tokens=2,
    )
    inputs = [batch.decode_inputs() for _ in range(5)]
    assert [positions.ravel().tolist() for positions, _ in inputs] == [
        [3, 1],
        [4, 2],
        [5, 3],
        [6, 4],
        [7, 5],
    ]
    assert inputs[-1][1].tolist() == [[1] * 8, [0, 0] + [1] * 6]
    assert inputs[0][1].tolist() == [[1, 1, 1, 1], [0, 0, 1, 1]]  # an earlier view is unchanged
