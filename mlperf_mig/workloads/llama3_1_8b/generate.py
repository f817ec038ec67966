"""Greedy generation over a decoder graph with a KV cache and continuous batching.

`KvCacheGenerator` drives any callable that runs the decoder interface of decoder.py (a loaded
backend's `run`: ONNX Runtime on the CPU or CUDA, the generated model or a user's export). Each
`step`:
1. decodes one token for every running request: one run of the batch, each row feeding its last
   token at its own position against the cache;
2. prefills the prompts queued since the last step, as many as free slots allow (`max_batch`
   rows in all): one run of those prompts (several where their logits would pass
   PREFILL_LOGITS_BYTES), left-padded to the longest, with an empty cache; the last position's
   logits give each its first token;
3. merges the new rows into the running batch: the shorter caches are left-padded to a common
   length, and `attention_mask` hides the padding, so a row attends to exactly its own tokens;
4. drops the finished rows, and the cache columns that only finished rows used.

Tokens are the argmax of the logits (greedy, as the reference: temperature 0, top_k 1). A request
ends at an end token (its output includes it, as vLLM's `token_ids` that the reference returns
do) or at `max_new_tokens`; like vLLM's `min_tokens`, end tokens cannot be chosen before a
request has MIN_NEW_TOKENS tokens (LoadGen's time per output token needs 2).

A request's tokens do not depend on what else is in the batch: padding is masked out exactly
(its attention weight is zero), and each row has its own positions; only the rounding of the
kernels may differ with the batch, which greedy decoding does not see but in near ties.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import numpy.typing as npt

from mlperf_mig.errors import WorkloadError
from mlperf_mig.workloads.generation import MIN_NEW_TOKENS, TokenEvent, check_new_tokens
from mlperf_mig.workloads.llama3_1_8b.decoder import (
    ATTENTION_MASK,
    INPUT_IDS,
    LOGITS,
    POSITION_IDS,
    past_key,
    past_value,
    present_key,
    present_value,
)
from mlperf_mig.workloads.llama3_1_8b.shape import DecoderShape

RunGraph = Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]

PAD_TOKEN = 0  # what padding positions feed: any id of the vocabulary (they are masked)
# A prefill's logits cover every prompt position (the export interface has no "last only"):
# prompts admitted together are prefilled in groups whose float32 logits stay under this size
# (Llama's vocabulary of 128256 at 3000 prompt tokens is already 1.5 GB).
PREFILL_LOGITS_BYTES = 1 << 30


class _Batch:
    """The running requests, one row each, and their cache."""

    def __init__(
        self,
        *,
        requests: np.ndarray,
        lengths: np.ndarray,
        tokens: np.ndarray,
        mask: np.ndarray,
        cache: list[np.ndarray],
        max_new_tokens: int,
    ) -> None:
        rows = len(requests)
        self.requests = requests  # int64 [rows]: the ids the SUT passed to `add`
        self.positions = lengths.astype(np.int64)  # [rows]: where the next fed token goes
        self.made = np.zeros(rows, dtype=np.int64)  # [rows]: tokens generated
        self.outputs = np.zeros((rows, max_new_tokens), dtype=np.int32)
        self.cache = cache  # per layer: key, value [rows, kv_heads, cached, head_dim]
        self.youngest = 0  # the fewest tokens a row has made: min(made)
        self.set_mask(mask)
        self.record(tokens)

    def __len__(self) -> int:
        return len(self.requests)

    @property
    def mask(self) -> np.ndarray:
        """int64 [rows, cached]: 1 where the cache holds a token of the row."""
        return self._mask[:, : self.cached]

    def set_mask(self, mask: np.ndarray) -> None:
        # the columns right of the cached ones are 1 already: a decode, which appends a token
        # to every row, only widens the view (each row decodes fewer than max_new_tokens times
        # between two calls here, which every finish or admission makes)
        self.cached = mask.shape[1]
        self._mask = np.ones((len(mask), self.cached + self.outputs.shape[1]), dtype=np.int64)
        self._mask[:, : self.cached] = mask

    def grow(self) -> np.ndarray:
        """The mask with a column of ones appended (the decode's new token)."""
        if self.cached == self._mask.shape[1]:
            self.set_mask(self.mask)
        self.cached += 1
        return self.mask

    def record(self, tokens: np.ndarray) -> None:
        """Append each row's new token (int64 [rows]) to its output."""
        self.outputs[np.arange(len(self)), self.made] = tokens
        self.made += 1
        self.youngest += 1
        self.last = tokens  # [rows]: each row's latest token, the one the next decode feeds

    def extend(self, other: _Batch) -> None:
        """Append `other`'s rows; the shorter cache is left-padded with masked columns."""
        width = max(self.cached, other.cached)
        self.requests = np.concatenate([self.requests, other.requests])
        self.positions = np.concatenate([self.positions, other.positions])
        self.made = np.concatenate([self.made, other.made])
        self.youngest = min(self.youngest, other.youngest)
        self.last = np.concatenate([self.last, other.last])
        self.outputs = np.concatenate([self.outputs, other.outputs])
        self.cache = [
            np.concatenate([_left_pad(mine, width), _left_pad(theirs, width)])
            for mine, theirs in zip(self.cache, other.cache)
        ]
        self.set_mask(np.concatenate([_left_pad(self.mask, width), _left_pad(other.mask, width)]))

    def keep(self, rows: np.ndarray) -> None:
        """Keep the rows where `rows` is true; drop the cache columns no kept row uses."""
        self.requests = self.requests[rows]
        self.positions = self.positions[rows]
        self.made = self.made[rows]
        self.youngest = int(self.made.min())
        self.last = self.last[rows]
        self.outputs = self.outputs[rows]
        mask = self.mask[rows]
        used = mask.any(axis=0)
        start = int(used.argmax()) if used.any() else mask.shape[1]
        self.cache = [layer[rows][:, :, start:] for layer in self.cache]
        self.set_mask(mask[:, start:])


def _greedy(logits: np.ndarray) -> np.ndarray:
    """int64 [rows]: the index of each row's largest logit."""
    return logits.argmax(axis=-1).astype(np.int64, copy=False)


def _left_pad(array: np.ndarray, width: int) -> np.ndarray:
    """`array` with zero columns added on the left of its cache axis (1 for masks, 2 for caches)
    up to `width`."""
    axis = 1 if array.ndim == 2 else 2
    missing = width - array.shape[axis]
    if missing == 0:
        return array
    pad = [(0, 0)] * array.ndim
    pad[axis] = (missing, 0)
    return np.pad(array, pad)


class KvCacheGenerator:
    """Greedy generation with a KV cache over `run` (the decoder interface of decoder.py),
    with continuous batching of up to `max_batch` requests; a `TokenGenerator`.

    `eos_token_id` is the id (or the ids) that end a generation: `shape.end_ids` when None.
    `cache_dtype` is the element type of the graph's cache (float32 for the generated decoder;
    float16 for an export in half precision). The caller owns the backend behind `run`.
    """

    def __init__(
        self,
        run: RunGraph,
        shape: DecoderShape,
        *,
        max_new_tokens: int,
        eos_token_id: int | Sequence[int] | None = None,
        max_batch: int,
        cache_dtype: npt.DTypeLike = np.float32,
    ) -> None:
        check_new_tokens(max_new_tokens)
        if max_batch < 1:
            raise WorkloadError(
                f"a generator needs room for at least 1 request; got max_batch={max_batch}"
            )
        if eos_token_id is None:
            end_ids: Sequence[int] = shape.end_ids
        elif isinstance(eos_token_id, int | np.integer):
            end_ids = (int(eos_token_id),)
        else:
            end_ids = tuple(int(t) for t in eos_token_id)
        outside = [t for t in end_ids if not 0 <= t < shape.vocab_size]
        if not end_ids or outside:
            raise WorkloadError(
                f"end token ids {list(end_ids)} must be 1 or more ids of the model's vocabulary "
                f"(0 to {shape.vocab_size - 1})"
            )
        self._run = run
        self._shape = shape
        self._max_new_tokens = max_new_tokens
        self._end_ids = np.array(end_ids, dtype=np.int64)
        self._ends = np.zeros(shape.vocab_size, dtype=bool)  # by token id: does it end a request
        self._ends[self._end_ids] = True
        self._max_batch = max_batch
        self._cache_dtype = np.dtype(cache_dtype)
        self._queued: list[tuple[int, np.ndarray]] = []
        self._batch: _Batch | None = None
        self._requests: set[int] = set()  # queued or running
        layers = range(shape.layers)
        self._past_names = [name(i) for i in layers for name in (past_key, past_value)]
        self._present_names = [name(i) for i in layers for name in (present_key, present_value)]

    @property
    def max_new_tokens(self) -> int:
        return self._max_new_tokens

    @property
    def max_batch(self) -> int:
        return self._max_batch

    @property
    def pending(self) -> int:
        return len(self._queued) + (len(self._batch) if self._batch is not None else 0)

    def add(self, request: int, prompt: np.ndarray) -> None:
        """Queue `prompt` (token ids) under `request`; it joins the batch at the next step."""
        ids = np.asarray(prompt)
        if ids.ndim != 1 or len(ids) == 0 or not np.issubdtype(ids.dtype, np.integer):
            raise WorkloadError(
                f"request {request}: a prompt is a non-empty 1-D array of token ids; got shape "
                f"{ids.shape} of {ids.dtype}"
            )
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or high >= self._shape.vocab_size:
            raise WorkloadError(
                f"request {request}: token ids {low}..{high} lie outside the model's vocabulary "
                f"(0 to {self._shape.vocab_size - 1}); is the tokenizer the model's?"
            )
        if len(ids) + self._max_new_tokens > self._shape.max_positions:
            raise WorkloadError(
                f"request {request}: {len(ids)} prompt tokens and {self._max_new_tokens} new ones "
                f"exceed the model's {self._shape.max_positions} positions; shorten the prompt"
            )
        if request in self._requests:
            raise WorkloadError(
                f"request {request} is already queued or running; each request needs its own id"
            )
        self._requests.add(request)
        self._queued.append((request, ids.astype(np.int64)))

    def step(self) -> list[TokenEvent]:
        """Decode one token for every running request, then prefill the queued prompts that fit;
        the events of this step, running requests first, then the new ones in queue order."""
        events: list[TokenEvent] = []
        finished: list[np.ndarray] = []  # by row of the batch after this step's merge
        if self._batch is not None:
            self._decode(self._batch)
            finished.append(self._finished(self._batch))
            events += self._events(self._batch, finished[-1])
        free = self._max_batch - (len(self._batch) if self._batch is not None else 0)
        if self._queued and free > 0:
            admitted, self._queued = self._queued[:free], self._queued[free:]
            for group in self._prefill_groups(admitted):
                joining = self._prefill(group)
                finished.append(self._finished(joining))
                events += self._events(joining, finished[-1])
                if self._batch is None:
                    self._batch = joining
                else:
                    self._batch.extend(joining)
        if self._batch is not None:
            done = finished[0] if len(finished) == 1 else np.concatenate(finished)
            ended = np.count_nonzero(done)
            if ended == len(done):
                self._batch = None
            elif ended:
                self._batch.keep(~done)
            if ended:
                self._requests.difference_update(e.request for e in events if e.finished)
        return events

    def close(self) -> None:
        """Forget the queued and running requests and their cache."""
        self._queued.clear()
        self._requests.clear()
        self._batch = None

    # -- internals -----------------------------------------------------------------------------

    def _decode(self, batch: _Batch) -> None:
        feeds = {
            INPUT_IDS: batch.last[:, None],
            POSITION_IDS: batch.positions[:, None],
            ATTENTION_MASK: batch.grow(),
        }
        feeds.update(self._cache_feeds(batch.cache))
        outputs = self._run(feeds)
        batch.cache = self._presents(outputs)
        batch.positions = batch.positions + 1
        logits = outputs[LOGITS][:, -1]
        batch.record(
            self._choose(logits, batch.made) if batch.youngest < MIN_NEW_TOKENS else _greedy(logits)
        )

    def _prefill_groups(
        self, admitted: list[tuple[int, np.ndarray]]
    ) -> list[list[tuple[int, np.ndarray]]]:
        """`admitted` in order, cut where a group's logits would pass PREFILL_LOGITS_BYTES
        (a group holds at least one prompt)."""
        groups: list[list[tuple[int, np.ndarray]]] = [[]]
        width = 0
        for item in admitted:
            wider = max(width, len(item[1]))
            size = (len(groups[-1]) + 1) * wider * self._shape.vocab_size * 4
            if groups[-1] and size > PREFILL_LOGITS_BYTES:
                groups.append([])
                wider = len(item[1])
            groups[-1].append(item)
            width = wider
        return groups

    def _prefill(self, admitted: list[tuple[int, np.ndarray]]) -> _Batch:
        lengths = np.array([len(ids) for _, ids in admitted], dtype=np.int64)
        width = int(lengths.max())
        columns = np.arange(width)
        padding = width - lengths[:, None]  # [rows, 1]: left padding of each row
        mask = (columns >= padding).astype(np.int64)
        ids = np.full((len(admitted), width), PAD_TOKEN, dtype=np.int64)
        for row, (_, prompt) in enumerate(admitted):
            ids[row, width - len(prompt) :] = prompt
        s = self._shape
        empty = np.zeros((len(admitted), s.kv_heads, 0, s.head_dim), dtype=self._cache_dtype)
        feeds = {
            INPUT_IDS: ids,
            POSITION_IDS: np.maximum(columns - padding, 0),
            ATTENTION_MASK: mask,
        }
        feeds.update(self._cache_feeds([empty] * (2 * s.layers)))
        outputs = self._run(feeds)
        made = np.zeros(len(admitted), dtype=np.int64)
        return _Batch(
            requests=np.array([request for request, _ in admitted], dtype=np.int64),
            lengths=lengths,
            tokens=self._choose(outputs[LOGITS][:, -1], made),
            mask=mask,
            cache=self._presents(outputs),
            max_new_tokens=self._max_new_tokens,
        )

    def _cache_feeds(self, cache: list[np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(self._past_names, cache))

    def _presents(self, outputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        return [outputs[name] for name in self._present_names]

    def _choose(self, logits: np.ndarray, made: np.ndarray) -> np.ndarray:
        """The greedy token of each row of `logits` [rows, vocab]; end tokens are out of reach
        of rows with fewer than MIN_NEW_TOKENS tokens made."""
        early = made < MIN_NEW_TOKENS
        if np.count_nonzero(early):
            logits = np.array(logits, copy=True)
            logits[np.ix_(early, self._end_ids)] = -np.inf
        return _greedy(logits)

    def _finished(self, batch: _Batch) -> np.ndarray:
        """bool [rows]: the rows whose latest token ends them."""
        return self._ends[batch.last] | (batch.made >= self._max_new_tokens)

    def _events(self, batch: _Batch, finished: np.ndarray) -> list[TokenEvent]:
        """One event per row of `batch` for the token its latest run made."""
        rows = zip(
            batch.requests.tolist(), batch.last.tolist(), batch.made.tolist(), finished.tolist()
        )
        return [
            TokenEvent(
                request=request,
                token=token,
                first=made == 1,
                finished=done,
                tokens=batch.outputs[row, :made].copy() if done else None,
            )
            for row, (request, token, made, done) in enumerate(rows)
        ]
