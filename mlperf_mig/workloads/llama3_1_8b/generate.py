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

import collections
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
    """The running requests, one row each, their cache and the inputs of their next decode.

    A decode step of a small model runs in tens of microseconds, so its bookkeeping is a few
    numpy calls: the outputs are Python lists (one append a row), the next `input_ids` is the
    argmax itself ([rows, 1]), and the mask and positions of the coming decodes are laid out
    ahead in two buffers that each decode takes views of."""

    def __init__(
        self,
        *,
        requests: list[int],
        lengths: np.ndarray,
        tokens: np.ndarray,
        mask: np.ndarray,
        cache: list[np.ndarray],
        max_new_tokens: int,
    ) -> None:
        self.requests = requests  # the ids the SUT passed to `add`, by row
        self.outputs: list[list[int]] = [[] for _ in requests]  # each row's tokens so far
        self.cache = cache  # per layer: key, value [rows, kv_heads, cached, head_dim]
        self.last = tokens  # int64 [rows, 1]: each row's latest token, the next decode's input
        self.youngest = 0  # the fewest tokens a row has made
        self._ahead = max_new_tokens  # decodes laid out ahead by `lay_out`
        self.lay_out(mask, lengths.astype(np.int64).reshape(-1, 1))

    def __len__(self) -> int:
        return len(self.requests)

    @property
    def mask(self) -> np.ndarray:
        """int64 [rows, cached]: 1 where the cache holds a token of the row."""
        return self._mask[:, : self.cached]

    @property
    def positions(self) -> np.ndarray:
        """int64 [rows, 1]: the position of each row's next token."""
        decoded = self.cached - self._laid
        return self._positions[:, decoded : decoded + 1]

    def lay_out(self, mask: np.ndarray, positions: np.ndarray) -> None:
        """Lay out the inputs of the next decodes from the current `mask` and `positions`: the
        mask buffer has ones right of the cached columns (every decode appends a token to every
        row) and the positions buffer counts on from `positions`. Each row decodes fewer than
        max_new_tokens times between two calls here, which every finish or admission makes;
        `decode_inputs` lays out again if it must."""
        self.cached = self._laid = mask.shape[1]
        self._mask = np.ones((len(mask), self.cached + self._ahead), dtype=np.int64)
        self._mask[:, : self.cached] = mask
        self._positions = positions + np.arange(self._ahead + 1)

    def decode_inputs(self) -> tuple[np.ndarray, np.ndarray]:
        """`position_ids` and `attention_mask` of the next decode (views); the mask's new
        column is counted as cached from now on."""
        if self.cached == self._mask.shape[1]:
            self.lay_out(self.mask, self.positions)
        positions = self.positions
        self.cached += 1
        return positions, self._mask[:, : self.cached]

    def made(self) -> np.ndarray:
        """int64 [rows]: the tokens each row has made."""
        return np.fromiter(map(len, self.outputs), dtype=np.int64, count=len(self.outputs))

    def extend(self, other: _Batch) -> None:
        """Append `other`'s rows; the shorter cache is left-padded with masked columns."""
        width = max(self.cached, other.cached)
        self.requests = self.requests + other.requests
        self.outputs = self.outputs + other.outputs
        self.youngest = min(self.youngest, other.youngest)
        self.last = np.concatenate([self.last, other.last])
        self.cache = [
            np.concatenate([_left_pad(mine, width), _left_pad(theirs, width)])
            for mine, theirs in zip(self.cache, other.cache)
        ]
        self.lay_out(
            np.concatenate([_left_pad(self.mask, width), _left_pad(other.mask, width)]),
            np.concatenate([self.positions, other.positions]),
        )

    def keep(self, rows: np.ndarray) -> None:
        """Keep the rows where `rows` (bool) is true; drop the cache columns no kept row uses."""
        kept = rows.tolist()
        self.requests = [r for r, k in zip(self.requests, kept) if k]
        self.outputs = [out for out, k in zip(self.outputs, kept) if k]
        self.youngest = min(map(len, self.outputs))
        self.last = self.last[rows]
        mask = self.mask[rows]
        used = mask.any(axis=0)
        start = int(used.argmax()) if used.any() else mask.shape[1]
        self.cache = [layer[rows][:, :, start:] for layer in self.cache]
        self.lay_out(mask[:, start:], self.positions[rows])


def _greedy(logits: np.ndarray) -> np.ndarray:
    """int64 [rows, 1]: the index of each row's largest logit (`logits` [rows, 1, vocab])."""
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
        self._end_set = frozenset(end_ids)
        self._max_batch = max_batch
        self._cache_dtype = np.dtype(cache_dtype)
        self._queued: collections.deque[tuple[int, np.ndarray]] = collections.deque()
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
        self._queued.append((int(request), ids.astype(np.int64)))

    def step(self) -> list[TokenEvent]:
        """Decode one token for every running request, then prefill the queued prompts that fit;
        the events of this step, running requests first, then the new ones in queue order."""
        batch = self._batch
        events: list[TokenEvent] = []
        finished: list[int] = []  # rows of the batch after this step's merge
        if batch is not None:
            self._decode(batch)
            self._advance(batch, events, finished)
            free = self._max_batch - len(batch)
        else:
            free = self._max_batch
        if self._queued and free > 0:
            admitted = [self._queued.popleft() for _ in range(min(free, len(self._queued)))]
            for group in self._prefill_groups(admitted):
                joining = self._prefill(group)
                first_row = len(batch) if batch is not None else 0
                self._advance(joining, events, finished, first_row)
                if batch is None:
                    batch = self._batch = joining
                else:
                    batch.extend(joining)
        if finished and batch is not None:
            if len(finished) == len(batch):
                self._batch = None
            else:
                kept = np.ones(len(batch), dtype=bool)
                kept[finished] = False
                batch.keep(kept)
            self._requests.difference_update(e.request for e in events if e.finished)
        return events

    def close(self) -> None:
        """Forget the queued and running requests and their cache."""
        self._queued.clear()
        self._requests.clear()
        self._batch = None

    # -- internals -----------------------------------------------------------------------------

    def _decode(self, batch: _Batch) -> None:
        """One run of the batch; each row's new token becomes its `last`."""
        feeds = dict(zip(self._past_names, batch.cache))
        feeds[INPUT_IDS] = batch.last
        feeds[POSITION_IDS], feeds[ATTENTION_MASK] = batch.decode_inputs()
        outputs = self._run(feeds)
        batch.cache = list(map(outputs.__getitem__, self._present_names))
        logits = outputs[LOGITS]  # [rows, 1, vocab]: one new token a row
        batch.last = (
            _greedy(logits)
            if batch.youngest >= MIN_NEW_TOKENS
            else self._choose(logits, batch.made())
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
        feeds = dict(zip(self._past_names, [empty] * (2 * s.layers)))
        feeds[INPUT_IDS] = ids
        feeds[POSITION_IDS] = np.maximum(columns - padding, 0)
        feeds[ATTENTION_MASK] = mask
        outputs = self._run(feeds)
        return _Batch(
            requests=[request for request, _ in admitted],
            lengths=lengths,
            tokens=self._choose(outputs[LOGITS][:, -1:], np.zeros(len(admitted))),
            mask=mask,
            cache=list(map(outputs.__getitem__, self._present_names)),
            max_new_tokens=self._max_new_tokens,
        )

    def _choose(self, logits: np.ndarray, made: np.ndarray) -> np.ndarray:
        """The greedy token of each row of `logits` [rows, 1, vocab] ([rows, 1]); end tokens are
        out of reach of rows with fewer than MIN_NEW_TOKENS tokens `made`."""
        early = made < MIN_NEW_TOKENS
        if not np.count_nonzero(early):
            return _greedy(logits)
        last = np.array(logits[:, -1], copy=True)  # [rows, vocab]
        last[np.ix_(early, self._end_ids)] = -np.inf
        return _greedy(last[:, None])

    def _advance(
        self, batch: _Batch, events: list[TokenEvent], finished: list[int], first_row: int = 0
    ) -> None:
        """Append each row's new token (`batch.last`) to its output and its event to `events`;
        the rows it ends go to `finished` (numbered from `first_row`)."""
        ends, limit = self._end_set, self._max_new_tokens
        tokens = batch.last.ravel().tolist()
        for row, (request, token, output) in enumerate(
            zip(batch.requests, tokens, batch.outputs), first_row
        ):
            output.append(token)
            made = len(output)
            done = made >= limit or token in ends
            events.append(
                TokenEvent(
                    request=request,
                    token=token,
                    first=made == 1,
                    finished=done,
                    tokens=np.array(output, dtype=np.int32) if done else None,
                )
            )
            if done:
                finished.append(row)
        batch.youngest += 1
