"""CNN/DailyMail for llama3.1-8b: the MLPerf prompt, synthetic articles, and a user's cnn_eval.json.

The dataset of the benchmark (reference/llm.md section 1) is CNN/DailyMail 3.0.0 validation,
13,368 articles for llama3.1-8b and a 5,000-article subset for -edge, as MLCommons'
download_cnndm.py writes it: a JSON list of objects with `input` (the article), `tok_input` (the
token ids of the whole prompt, begin-of-text first) and `output` (the reference summary); other
fields (the file carries `instruction` too) are ignored.

A user's file is untrusted input: it must be a regular file (a FIFO or device is refused before
it is read) of at most `max_bytes`; every record is checked and the first bad one is named in one
line (file, record index, field). Token ids must be ints inside the model's vocabulary.

Synthetic articles are built deterministically (each from (seed, index) only) out of the words of
the built-in tokenizer's corpus and tokenized with that tokenizer, scaled down for the tiny
model: a prompt has from about a quarter of `max_prompt_tokens` up to `max_prompt_tokens` tokens
(real prompts are about 100-2,000 Llama tokens, the reference allows 8,000), and each article
comes with a 2-4 sentence reference summary drawn from its own words.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from mlperf_mig._io import read_bounded
from mlperf_mig.errors import DatasetError
from mlperf_mig.workloads.llama3_1_8b.tokenizer import (
    CORPUS,
    TextTokenizer,
    builtin_tokenizer,
    load_tokenizer,
)

__all__ = [
    "DATACENTER_SAMPLE_COUNT",
    "DATASET_FILE",
    "EDGE_SAMPLE_COUNT",
    "MAX_DATASET_BYTES",
    "MAX_PROMPT_TOKENS",
    "PROMPT_TEMPLATE",
    "CnnDailyMail",
    "format_prompt",
    "read_cnn_eval",
    "synthetic_cnn_dailymail",
]

# MLCommons' language/llama3.1-8b/download_cnndm.py, instruction_template["llama"], exactly.
PROMPT_TEMPLATE = (
    "Summarize the following news article in 128 tokens. Please output the summary only, "
    "without any other text.\n\nArticle:\n{input}\n\nSummary:"
)
DATACENTER_SAMPLE_COUNT = 13_368  # cnn_eval.json
EDGE_SAMPLE_COUNT = 5_000  # sample_cnn_eval_5000.json
DATASET_FILE = "cnn_eval.json"
# The real cnn_eval.json (indent=4, one token id a line) is about 300 MB.
MAX_DATASET_BYTES = 1 << 30
MAX_PROMPT_TOKENS = 256  # the synthetic set's longest prompt, for the tiny model
_FIELDS = ("input", "tok_input", "output")
_WORDS = tuple(sorted({w.lower() for w in re.findall(r"[A-Za-z]{2,}", CORPUS)} | {"a"}))


def format_prompt(article: str) -> str:
    """The benchmark's prompt for one article (plain text, no chat template)."""
    return PROMPT_TEMPLATE.format(input=article)


@attrs.frozen(kw_only=True, eq=False)
class CnnDailyMail:
    """Articles, their tokenized prompts (int32 arrays) and reference summaries, index-aligned."""

    inputs: tuple[str, ...]
    tok_inputs: tuple[np.ndarray, ...] = attrs.field(repr=False)
    outputs: tuple[str, ...] = attrs.field(repr=False)
    source: str
    synthetic: bool

    def __attrs_post_init__(self) -> None:
        if not len(self.inputs) == len(self.tok_inputs) == len(self.outputs):
            raise ValueError(
                f"{len(self.inputs)} inputs, {len(self.tok_inputs)} tok_inputs and "
                f"{len(self.outputs)} outputs: each sample needs one of each"
            )

    def __len__(self) -> int:
        return len(self.inputs)

    @property
    def prompt_lengths(self) -> np.ndarray:
        """The token count of every prompt (int64)."""
        return np.array([len(ids) for ids in self.tok_inputs], dtype=np.int64)


# --- synthetic ---------------------------------------------------------------------------------
def _sentence(rng: np.random.Generator, low: int, high: int) -> str:
    words = [_WORDS[i] for i in rng.integers(0, len(_WORDS), int(rng.integers(low, high + 1)))]
    if rng.random() < 0.3:
        words.insert(int(rng.integers(1, len(words) + 1)), str(int(rng.integers(2, 2000))))
    if len(words) > 6 and rng.random() < 0.4:
        words[int(rng.integers(2, len(words) - 2))] += ","
    return " ".join(words).capitalize() + "."


class _WordTokens:
    """Token counts of space-led words, each encoded once: the byte-level pre-tokenizer splits a
    text before every space-led word, so a sentence's count is the sum of its words' counts."""

    def __init__(self, tokenizer: TextTokenizer) -> None:
        self._tokenizer = tokenizer
        self._counts: dict[str, int] = {}

    def sentence(self, sentence: str) -> int:
        total = 0
        for word in sentence.split(" "):
            if word not in self._counts:
                encoding = self._tokenizer.backend.encode(" " + word, add_special_tokens=False)
                self._counts[word] = len(encoding.ids)
            total += self._counts[word]
        return total


def _synthetic_sample(
    tokenizer: TextTokenizer,
    counts: _WordTokens,
    seed: int,
    index: int,
    max_prompt_tokens: int,
    overhead: int,
) -> tuple[str, np.ndarray, str]:
    rng = np.random.default_rng((seed, index))
    budget = int(rng.integers(max_prompt_tokens // 4, max_prompt_tokens + 1)) - overhead
    sentences: list[str] = []
    used = 0
    while not sentences or used < budget:
        sentence = _sentence(rng, 6, 24)
        sentences.append(sentence)
        used += counts.sentence(sentence)
    ids = tokenizer.encode(format_prompt(" ".join(sentences)))
    while len(ids) > max_prompt_tokens and len(sentences) > 1:
        sentences.pop()
        ids = tokenizer.encode(format_prompt(" ".join(sentences)))
    if len(ids) > max_prompt_tokens:
        raise ValueError(
            f"max_prompt_tokens {max_prompt_tokens} cannot hold the prompt and one sentence "
            f"({len(ids)} tokens); pass at least {len(ids)}"
        )
    summary = []
    for _ in range(int(rng.integers(2, 5))):
        words = sentences[int(rng.integers(0, len(sentences)))].rstrip(".").split()
        start = int(rng.integers(0, max(1, len(words) - 8)))
        summary.append(" ".join(words[start : start + int(rng.integers(6, 15))]).capitalize() + ".")
    return " ".join(sentences), ids, " ".join(summary)


def synthetic_cnn_dailymail(
    count: int,
    *,
    tokenizer: TextTokenizer | None = None,
    max_prompt_tokens: int = MAX_PROMPT_TOKENS,
    seed: int = 0,
) -> CnnDailyMail:
    """`count` deterministic CNN/DailyMail-shaped samples, prompts tokenized with `tokenizer`
    (by default the built-in one of the generated model); sample i depends only on (seed, i)."""
    if count < 1:
        raise ValueError(f"count {count} is not a sample count; pass at least 1")
    if tokenizer is None:
        tokenizer = builtin_tokenizer()
    overhead = len(tokenizer.encode(format_prompt("")))
    counts = _WordTokens(tokenizer)
    samples = [
        _synthetic_sample(tokenizer, counts, seed, index, max_prompt_tokens, overhead)
        for index in range(count)
    ]
    return CnnDailyMail(
        inputs=tuple(s[0] for s in samples),
        tok_inputs=tuple(s[1] for s in samples),
        outputs=tuple(s[2] for s in samples),
        source=f"synthetic CNN/DailyMail ({count} samples, seed {seed}, prompts of at most "
        f"{max_prompt_tokens} tokens)",
        synthetic=True,
    )


# --- a user's cnn_eval.json ------------------------------------------------------------------
def _read_file(path: Path, max_bytes: int) -> bytes:
    """The bytes of the user's dataset file `path` (a link is followed: the user named it), at
    most `max_bytes`."""

    def refused(reason: str) -> DatasetError:
        return DatasetError(
            f"dataset {str(path)!r} is {reason}; pass the CNN/DailyMail validation "
            f"{DATASET_FILE} that MLCommons' download_cnndm.py writes"
        )

    try:
        return read_bounded(path, max_bytes, refused, kind=DATASET_FILE, follow_links=True)
    except FileNotFoundError:
        raise DatasetError(
            f"dataset {str(path)!r} does not exist; pass the {DATASET_FILE} that MLCommons' "
            "download_cnndm.py writes, or its folder"
        ) from None


def _records(path: Path, max_bytes: int) -> list[Any]:
    data = _read_file(path, max_bytes)
    try:
        document = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise DatasetError(
            f"dataset {str(path)!r} is not UTF-8 text (byte {exc.start}); pass the {DATASET_FILE} file"
        ) from None
    except RecursionError:
        raise DatasetError(
            f"dataset {str(path)!r} is nested too deeply to be a {DATASET_FILE}"
        ) from None
    except ValueError as exc:
        raise DatasetError(f"dataset {str(path)!r} is not JSON: {exc}") from None
    if not isinstance(document, list):
        raise DatasetError(
            f"dataset {str(path)!r} holds a JSON {type(document).__name__}, expected a list of "
            "records with input, tok_input and output"
        )
    if not document:
        raise DatasetError(f"dataset {str(path)!r} holds no records")
    return document


def _bad(path: Path, index: int, field: str, problem: str) -> DatasetError:
    return DatasetError(f"dataset {str(path)!r}, record {index}, field {field!r}: {problem}")


def _text_field(path: Path, index: int, record: dict[str, Any], field: str) -> str:
    value = record[field]
    if not isinstance(value, str):
        raise _bad(path, index, field, f"expected a string, got {type(value).__name__}")
    if not value.strip():
        raise _bad(path, index, field, "is empty; expected the text")
    return value


def _token_field(
    path: Path, index: int, value: Any, vocab_size: int, max_prompt_tokens: int | None
) -> np.ndarray:
    if not isinstance(value, list):
        raise _bad(
            path, index, "tok_input", f"expected a list of token ids, got {type(value).__name__}"
        )
    if not value:
        raise _bad(path, index, "tok_input", "is empty; expected the prompt's token ids")
    if set(map(type, value)) != {int}:
        position, item = next((n, v) for n, v in enumerate(value) if type(v) is not int)
        raise _bad(
            path,
            index,
            "tok_input",
            f"item {position} is {type(item).__name__} {item!r}, expected an int",
        )
    if max_prompt_tokens is not None and len(value) > max_prompt_tokens:
        raise _bad(
            path,
            index,
            "tok_input",
            f"{len(value)} tokens, more than the {max_prompt_tokens} the model takes",
        )
    try:
        ids = np.array(value, dtype=np.int64)
    except OverflowError:  # an id past int64 is outside every vocabulary
        ids = np.array([v if 0 <= v < vocab_size else -1 for v in value], dtype=np.int64)
    outside = np.flatnonzero((ids < 0) | (ids >= vocab_size))
    if outside.size:
        position = int(outside[0])
        raise _bad(
            path,
            index,
            "tok_input",
            f"token id {value[position]} (item {position}) is outside the model's vocabulary "
            f"0-{vocab_size - 1}; the file was tokenized for another model: pass the tokenizer and "
            "dataset of the model's family",
        )
    return ids.astype(np.int32)


def read_cnn_eval(
    path: str | os.PathLike[str],
    *,
    vocab_size: int,
    max_prompt_tokens: int | None = None,
    max_bytes: int = MAX_DATASET_BYTES,
) -> CnnDailyMail:
    """The samples of a user's cnn_eval.json (or the folder holding one), each record checked:
    DatasetError, in one line naming the file, the record and the field, for a missing field, a
    wrong type, empty text, a token id outside `vocab_size` or a prompt longer than
    `max_prompt_tokens`."""
    file = Path(path)
    if file.is_dir():
        file = file / DATASET_FILE
    inputs: list[str] = []
    tok_inputs: list[np.ndarray] = []
    outputs: list[str] = []
    for index, record in enumerate(_records(file, max_bytes)):
        if not isinstance(record, dict):
            raise DatasetError(
                f"dataset {str(file)!r}, record {index}: a JSON {type(record).__name__}, expected "
                "an object with input, tok_input and output"
            )
        missing = [field for field in _FIELDS if field not in record]
        if missing:
            raise _bad(file, index, missing[0], "missing; expected input, tok_input and output")
        inputs.append(_text_field(file, index, record, "input"))
        tok_inputs.append(
            _token_field(file, index, record["tok_input"], vocab_size, max_prompt_tokens)
        )
        outputs.append(_text_field(file, index, record, "output"))
    return CnnDailyMail(
        inputs=tuple(inputs),
        tok_inputs=tuple(tok_inputs),
        outputs=tuple(outputs),
        source=str(file),
        synthetic=False,
    )


# --- what the workload's sample library reads --------------------------------------------------
class SyntheticPrompts:
    """Synthetic prompts one index at a time (sample i depends only on (seed, i)), with the
    tokenizer and word counts made once."""

    def __init__(self, *, seed: int, max_prompt_tokens: int = MAX_PROMPT_TOKENS) -> None:
        self._tokenizer = builtin_tokenizer()
        self._counts = _WordTokens(self._tokenizer)
        self._overhead = len(self._tokenizer.encode(format_prompt("")))
        self._seed = seed
        self._max = max_prompt_tokens

    def prompt_ids(self, index: int) -> np.ndarray:
        return _synthetic_sample(
            self._tokenizer, self._counts, self._seed, index, self._max, self._overhead
        )[1]


@attrs.define(kw_only=True)
class CnnSource:
    """A user's cnn_eval.json as the sample source of a run (the SampleSource protocol), with
    the tokenizer that decodes its answers for scoring."""

    benchmark: Any
    data: CnnDailyMail
    tokenizer: TextTokenizer
    total_count: int
    performance_count: int
    synthetic: bool = attrs.field(default=False, init=False)

    @property
    def description(self) -> str:
        return self.data.source

    @classmethod
    def open(
        cls, path: str, *, benchmark: Any, tokenizer: str | None, limit: int | None
    ) -> CnnSource:
        """Read and check the dataset and the tokenizer its ids come from (one line each)."""
        text = _tokenizer_for_dataset(path, tokenizer)
        data = read_cnn_eval(path, vocab_size=text.vocab_size, max_prompt_tokens=PROMPT_ROW)
        count = len(data) if limit is None else min(limit, len(data))
        return cls(
            benchmark=benchmark, data=data, tokenizer=text, total_count=count,
            performance_count=min(count, benchmark.performance_sample_count),
        )  # fmt: skip

    def fill(self, indices: Sequence[int], out: Mapping[str, np.ndarray]) -> None:
        ids, lengths = out["input_ids"], out["input_length"]
        for row, index in enumerate(indices):
            prompt = self.data.tok_inputs[int(index)]
            ids[row, : len(prompt)] = prompt
            ids[row, len(prompt) :] = 0
            lengths[row] = len(prompt)

    def references(self) -> tuple[str, ...]:
        return self.data.outputs


# The widest prompt a sample row holds (interface.PROMPT_TOKENS; not imported, to keep this
# module free of the workload's).
PROMPT_ROW = 3072


def _tokenizer_for_dataset(path: str, tokenizer: str | None) -> TextTokenizer:
    if tokenizer is None:
        raise DatasetError(
            f"dataset {path!r} holds Llama 3.1 token ids: pass the model's tokenizer.json with "
            "--vocab so that they can be checked and the answers decoded for ROUGE"
        )
    return load_tokenizer(tokenizer)


def check_files(dataset: str, tokenizer: str | None) -> None:
    """What a run checks before any worker starts: the tokenizer loads and every record of the
    dataset is well formed and inside its vocabulary."""
    text = _tokenizer_for_dataset(dataset, tokenizer)
    read_cnn_eval(dataset, vocab_size=text.vocab_size, max_prompt_tokens=PROMPT_ROW)
