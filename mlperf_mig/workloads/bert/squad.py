"""SQuAD v1.1 for BERT: WordPiece tokenizer, features, answer extraction and F1 / exact match.

Features follow the reference (reference/mlperf.md section 2): max_seq_len 384, doc_stride 128,
max_query_len 64, uncased WordPiece with the model's vocab.txt (CJK characters split off as their
own words, as BERT's basic tokenizer does); `[CLS] query [SEP] context [SEP]`. The context is
split into words on the reference's whitespace only (space, tab, CR, LF and U+202F).

Scoring follows MLCommons' language/bert/accuracy-squad.py: a question's answer is its
best-scoring span (start and end among the 20 highest logits of a window, at most 30 tokens,
start in its maximum-context window, scores added in float64, ties to the first found), whose
WordPiece text is aligned back onto the characters of the original words (so a span ending
inside a word is cut there: "restor" of "restoration,"); a question with no valid span (or no
logged window) answers "empty". F1 and exact match use the official SQuAD v1.1 answer
normalisation and are averaged over ALL the questions of the dataset, answered or not.
"""

from __future__ import annotations

import collections
import functools
import json
import logging
import os
import re
import string
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from mlperf_mig.errors import DatasetError
from mlperf_mig.workloads.bert.interface import SEQ_LEN
from mlperf_mig.workloads.workload import Workload

logger = logging.getLogger(__name__)

DEV_FILE = "dev-v1.1.json"
VOCAB_FILE = "vocab.txt"
DOC_STRIDE = 128
MAX_QUERY_LEN = 64
N_BEST = 20
MAX_ANSWER_LEN = 30
# The answer of a question without any valid span: accuracy-squad.py's nonce prediction.
NO_ANSWER = "empty"
_PUNCTUATION = frozenset(string.punctuation)
# Word separators of the reference's read_squad_examples: these five characters only (a
# no-break space, for one, stays inside a word there and here).
_WORD_SEPARATORS = re.compile("[ \t\r\n\u202f]+")
# BERT's special tokens: written in a text they stay one token, as in the reference's tokenizers
# (transformers' BertTokenizer wherever they occur, BasicTokenizer as whole words).
SPECIAL_TOKENS = ("[UNK]", "[SEP]", "[PAD]", "[CLS]", "[MASK]")
_SPECIAL_WORD = re.compile(r"(?<!\S)(\[(?:UNK|SEP|PAD|CLS|MASK)\])(?!\S)")


def squad_paths(
    dataset: str | os.PathLike[str], vocab: str | os.PathLike[str] | None = None
) -> tuple[Path, Path]:
    """The SQuAD json (`dataset`, or dev-v1.1.json in that folder) and the vocab.txt to use
    (`vocab`, else the one next to the json); DatasetError when either is missing."""
    path = Path(dataset)
    if path.is_dir():
        path = path / DEV_FILE
    if not path.is_file():
        raise DatasetError(
            f"SQuAD file {str(path)!r} does not exist; pass the dev-v1.1.json file or its folder"
        )
    vocab_path = Path(vocab) if vocab is not None else path.parent / VOCAB_FILE
    if not vocab_path.is_file():
        raise DatasetError(
            f"BERT vocabulary {str(vocab_path)!r} not found; pass the model's vocab.txt "
            "(vocab=...) or put it next to the SQuAD json"
        )
    return path, vocab_path


# --- tokenizer -------------------------------------------------------------------------------
def check_files(dataset: str | os.PathLike[str], vocab: str | os.PathLike[str] | None) -> None:
    """Raise DatasetError unless the SQuAD json and the vocabulary are UTF-8 and the json parses
    (read before any worker starts; questions are tokenised later)."""
    path, vocab_path = squad_paths(dataset, vocab)
    _utf8_text(vocab_path, "BERT vocabulary")
    _json_document(path)


def _utf8_text(path: Path, what: str) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise DatasetError(f"cannot read {what} {str(path)!r}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise DatasetError(
            f"{what} {str(path)!r} is not UTF-8 text (byte {exc.start}: {exc.reason}); pass the "
            "original UTF-8 file"
        ) from None


def _json_document(path: Path) -> None:
    """The SQuAD file must be UTF-8 JSON of a sane depth (Python's parser recurses)."""
    text = _utf8_text(path, "SQuAD file")
    try:
        json.loads(text)
    except RecursionError:
        raise DatasetError(
            f"SQuAD file {str(path)!r} is nested too deeply to be SQuAD v1.1; pass the dev-v1.1.json file"
        ) from None
    except ValueError as exc:
        raise DatasetError(f"SQuAD file {str(path)!r} is not JSON: {exc}") from None


def load_vocab(path: Path) -> dict[str, int]:
    """Token -> id of a BERT vocab.txt (one token per line)."""
    if not path.is_file():
        raise DatasetError(
            f"BERT vocabulary {str(path)!r} not found; pass the model's vocab.txt (vocab=...) "
            "or put it next to the SQuAD json"
        )
    tokens = path.read_text(encoding="utf-8").splitlines()
    vocab = {token: index for index, token in enumerate(tokens)}
    for needed in ("[CLS]", "[SEP]", "[UNK]"):
        if needed not in vocab:
            raise DatasetError(f"vocabulary {str(path)!r} lacks {needed}; is it a BERT vocab.txt?")
    return vocab


def _basic_steps() -> tuple[Any, Any]:
    """(normalizer, pre-tokenizer) of BERT's uncased basic tokenisation: drop control
    characters, put spaces around each CJK character, lower-case, strip accents, split on
    whitespace and punctuation (the reference's BertTokenizer and BasicTokenizer do the same)."""
    from tokenizers import normalizers, pre_tokenizers

    normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=True, lowercase=True
    )
    return normalizer, pre_tokenizers.BertPreTokenizer()


@functools.cache
def _shared_basic_steps() -> tuple[Any, Any]:
    return _basic_steps()


def basic_tokens(text: str) -> list[str]:
    """Uncased BERT basic tokenisation: clean, split CJK, lower-case, strip accents, split
    punctuation."""
    normalizer, pre_tokenizer = _shared_basic_steps()
    tokens = []
    for n, part in enumerate(_SPECIAL_WORD.split(text)):
        if n % 2:
            tokens.append(part)
            continue
        tokens += [t for t, _span in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(part))]
    return tokens


class WordPieceTokenizer:
    """Greedy longest-match-first WordPiece over BERT's uncased basic tokens.

    The `tokenizers` library does the work (Rust, and the implementation Hugging Face's BERT
    tokenizers use) with the model's vocab; a special token written in the text is that token.
    """

    def __init__(self, vocab: Mapping[str, int], *, max_chars_per_word: int = 100) -> None:
        from tokenizers import Tokenizer
        from tokenizers.models import WordPiece

        self.vocab = vocab
        model = WordPiece(
            dict(vocab), unk_token="[UNK]", max_input_chars_per_word=max_chars_per_word
        )
        self._tokenizer = Tokenizer(model)
        self._tokenizer.normalizer, self._tokenizer.pre_tokenizer = _basic_steps()
        self._tokenizer.add_special_tokens([t for t in SPECIAL_TOKENS if t in vocab])
        self._word_pieces: dict[str, list[str]] = {}

    def tokenize(self, text: str) -> list[str]:
        return self._tokenizer.encode(text, add_special_tokens=False).tokens

    def tokenize_words(self, words: Sequence[str]) -> tuple[list[str], list[int]]:
        """The pieces of already split words, and the index of the word each piece comes from.

        Each word is tokenised on its own, once per tokenizer: contexts repeat their words, so
        the library sees each distinct word once (in one call) and the rest is a lookup.
        """
        known = self._word_pieces
        new = [word for word in dict.fromkeys(words) if word not in known]
        if new:
            encoding = self._tokenizer.encode(new, is_pretokenized=True, add_special_tokens=False)
            for word in new:
                known[word] = []
            for token, index in zip(encoding.tokens, encoding.word_ids, strict=True):
                assert index is not None  # no special tokens were added: each piece has a word
                known[new[index]].append(token)
        tokens: list[str] = []
        token_word: list[int] = []
        for index, word in enumerate(words):
            pieces = known[word]
            tokens += pieces
            token_word += [index] * len(pieces)
        return tokens, token_word

    def ids(self, tokens: Sequence[str]) -> list[int]:
        return [self.vocab[t] for t in tokens]


# --- examples and features -------------------------------------------------------------------
@attrs.frozen(kw_only=True)
class Example:
    """One SQuAD question with its context split into words and its ground-truth answers."""

    qas_id: str
    question: str
    doc_words: tuple[str, ...]
    answers: tuple[str, ...]


@attrs.frozen(kw_only=True)
class Feature:
    """Where one 384-token window came from (the arrays themselves live in SquadSource).

    `pieces` are the WordPiece tokens of the whole context (one tuple shared by its windows);
    the window's token at position p >= `first_position` is pieces[first_piece + p -
    first_position].
    """

    example_index: int
    token_count: int
    token_to_word: dict[int, int]
    max_context: dict[int, bool]
    pieces: tuple[str, ...] = ()
    first_piece: int = 0
    first_position: int = 0

    def piece_text(self, start: int, end: int) -> str:
        """The window's tokens `start`..`end` joined back into text: "##" continuations glued
        to the piece before, as the reference does before aligning the answer."""
        first = self.first_piece + start - self.first_position
        text = " ".join(self.pieces[first : first + end - start + 1])
        return " ".join(text.replace(" ##", "").replace("##", "").split())


def split_words(context: str) -> tuple[str, ...]:
    """The context split into words on the reference's five whitespace characters."""
    return tuple(word for word in _WORD_SEPARATORS.split(context) if word)


def _text(record: dict, key: str) -> str:
    value = record[key]
    if not isinstance(value, str):
        raise ValueError(f"{key!r} should be a string, got {type(value).__name__} {value!r}")
    return value


def read_examples(path: Path) -> list[Example]:
    """The questions of a SQuAD v1.1 json file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))["data"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DatasetError(f"{str(path)!r} is not a SQuAD v1.1 json file: {exc}") from None
    examples = []
    try:
        for article in data:
            for paragraph in article["paragraphs"]:
                words = split_words(_text(paragraph, "context"))
                for qa in paragraph["qas"]:
                    examples.append(
                        Example(
                            qas_id=str(qa["id"]),
                            question=_text(qa, "question"),
                            doc_words=words,
                            answers=tuple(_text(a, "text") for a in qa.get("answers", ())),
                        )
                    )
    except KeyError as exc:
        raise DatasetError(f"{str(path)!r} is not SQuAD v1.1: missing {exc}") from None
    except (TypeError, AttributeError, ValueError) as exc:
        raise DatasetError(
            f"{str(path)!r} is not SQuAD v1.1 (data -> paragraphs -> context, qas -> id, question,"
            f" answers -> text): {exc}"
        ) from None
    if not examples:
        raise DatasetError(f"{str(path)!r} holds no questions")
    return examples


def _doc_spans(doc_length: int, max_tokens: int) -> list[tuple[int, int]]:
    spans = []
    start = 0
    while start < doc_length:
        length = min(doc_length - start, max_tokens)
        spans.append((start, length))
        if start + length == doc_length:
            break
        start += min(length, DOC_STRIDE)
    return spans


def _is_max_context(spans: Sequence[tuple[int, int]], index: int, position: int) -> bool:
    best_score, best_index = None, None
    for span_index, (start, length) in enumerate(spans):
        end = start + length - 1
        if position < start or position > end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best_score is None or score > best_score:
            best_score, best_index = score, span_index
    return best_index == index


def build_features(
    examples: Sequence[Example], tokenizer: WordPieceTokenizer, *, limit: int | None = None
) -> tuple[list[Feature], dict[str, np.ndarray]]:
    """Features of the examples (at most `limit`) and their int64 `[N, 384]` input arrays."""
    features: list[Feature] = []
    rows: dict[str, list[list[int]]] = {"input_ids": [], "input_mask": [], "segment_ids": []}
    cls_id, sep_id = tokenizer.vocab["[CLS]"], tokenizer.vocab["[SEP]"]
    doc_cache: dict[tuple[str, ...], tuple[tuple[str, ...], list[int]]] = {}
    for example_index, example in enumerate(examples):
        if limit is not None and len(features) >= limit:
            break
        query = tokenizer.tokenize(example.question)[:MAX_QUERY_LEN]
        if example.doc_words not in doc_cache:
            pieces, words = tokenizer.tokenize_words(example.doc_words)
            doc_cache[example.doc_words] = tuple(pieces), words
        doc_tokens, token_word = doc_cache[example.doc_words]
        spans = _doc_spans(len(doc_tokens), SEQ_LEN - len(query) - 3)
        for span_index, (start, length) in enumerate(spans):
            tokens = ["[CLS]", *query, "[SEP]"]
            offset = len(tokens)
            token_to_word = {offset + i: token_word[start + i] for i in range(length)}
            max_context = {
                offset + i: _is_max_context(spans, span_index, start + i) for i in range(length)
            }
            ids = [
                cls_id,
                *tokenizer.ids(query),
                sep_id,
                *tokenizer.ids(doc_tokens[start : start + length]),
                sep_id,
            ]
            segments = [0] * offset + [1] * (length + 1)
            padding = SEQ_LEN - len(ids)
            rows["input_ids"].append(ids + [0] * padding)
            rows["input_mask"].append([1] * len(ids) + [0] * padding)
            rows["segment_ids"].append(segments + [0] * padding)
            features.append(
                Feature(
                    example_index=example_index,
                    token_count=len(ids),
                    token_to_word=token_to_word,
                    max_context=max_context,
                    pieces=doc_tokens,
                    first_piece=start,
                    first_position=offset,
                )
            )
    arrays = {
        name: np.asarray(values, dtype=np.int64).reshape(-1, SEQ_LEN)
        for name, values in rows.items()
    }
    return features, arrays


# --- answers and scores ----------------------------------------------------------------------
def best_span(
    feature: Feature, start_logits: np.ndarray, end_logits: np.ndarray
) -> tuple[float, int, int] | None:
    """(score, start position, end position) of the best valid answer span of one feature.

    As in the reference, the n-best positions are the highest logits with ties taken in
    position order, a span's score is its two logits added in float64, and among spans of
    equal score the first found wins.
    """
    starts = np.argsort(-start_logits, kind="stable")[:N_BEST]
    ends = np.argsort(-end_logits, kind="stable")[:N_BEST]
    best = None
    for start in map(int, starts):
        if start not in feature.token_to_word or not feature.max_context.get(start, False):
            continue
        for end in map(int, ends):
            if end not in feature.token_to_word or end < start or end - start + 1 > MAX_ANSWER_LEN:
                continue
            score = float(start_logits[start]) + float(end_logits[end])
            if best is None or score > best[0]:
                best = (score, start, end)
    return best


def aligned_answer(predicted: str, original: str) -> str:
    """The characters of `original` (the answer's whole words, space-joined) that the
    normalised WordPiece text `predicted` covers.

    BERT's basic tokenisation of `original`, space-joined, is matched against `predicted`; when
    both have the same characters apart from spaces, they correspond one to one and the match
    is cut out of `original` ("Ashford" of "Ashford-on-Lea," for "ashford"). Where `predicted`
    is not found or the lengths differ (an accent written as two characters, an unknown
    piece), the whole `original` is the answer: the reference's rule in every case.
    """
    tokenized = " ".join(basic_tokens(original))
    first = tokenized.find(predicted)
    if first == -1:
        return original
    last = first + len(predicted) - 1
    original_chars = [i for i, char in enumerate(original) if char != " "]
    tokenized_chars = [i for i, char in enumerate(tokenized) if char != " "]
    if len(original_chars) != len(tokenized_chars):
        return original
    rank = {position: n for n, position in enumerate(tokenized_chars)}
    if first not in rank or last not in rank:
        return original
    return original[original_chars[rank[first]] : original_chars[rank[last]] + 1]


def normalize_answer(text: str) -> str:
    """SQuAD v1.1 normalisation: lower case, no punctuation, no articles, single spaces."""
    text = "".join(c for c in text.lower() if c not in _PUNCTUATION)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def f1_score(prediction: str, truth: str) -> float:
    predicted = normalize_answer(prediction).split()
    expected = normalize_answer(truth).split()
    common = collections.Counter(predicted) & collections.Counter(expected)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(predicted)
    recall = same / len(expected)
    return 2 * precision * recall / (precision + recall)


def exact_match(prediction: str, truth: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(truth))


@attrs.define(kw_only=True)
class SquadSource:
    """SQuAD v1.1 dev features for BERT, tokenised once when the source is opened."""

    path: Path
    examples: list[Example]
    features: list[Feature]
    arrays: dict[str, np.ndarray]
    benchmark: Workload
    synthetic: bool = attrs.field(default=False, init=False)

    @classmethod
    def open(
        cls,
        dataset: str | os.PathLike[str],
        *,
        benchmark: Workload,
        vocab: str | os.PathLike[str] | None = None,
        limit: int | None = None,
    ) -> SquadSource:
        """Features of the SQuAD json `dataset` (or a folder holding dev-v1.1.json)."""
        path, vocab_path = squad_paths(dataset, vocab)
        tokenizer = WordPieceTokenizer(load_vocab(vocab_path))
        examples = read_examples(path)
        features, arrays = build_features(examples, tokenizer, limit=limit)
        if limit is not None and limit > len(features):
            raise DatasetError(
                f"sample count {limit} is more than the {len(features)} features (384-token "
                f"windows) of {str(path)!r}; pass at most {len(features)}, or leave it out for all"
            )
        if limit is not None:
            features = features[:limit]
            arrays = {name: array[:limit] for name, array in arrays.items()}
            # the questions the kept windows belong to: the accuracy's denominator
            examples = examples[: features[-1].example_index + 1] if features else []
        logger.info("SQuAD: %d questions -> %d features", len(examples), len(features))
        return cls(
            path=path, examples=examples, features=features, arrays=arrays, benchmark=benchmark
        )

    @property
    def total_count(self) -> int:
        return len(self.features)

    @property
    def performance_count(self) -> int:
        return min(self.benchmark.performance_sample_count, self.total_count)

    @property
    def description(self) -> str:
        return f"SQuAD {self.path} ({self.total_count} features)"

    def fill(self, indices: Sequence[int], out: Mapping[str, np.ndarray]) -> None:
        rows = np.asarray(indices, dtype=np.int64)
        for name, array in out.items():
            np.take(self.arrays[name], rows, axis=0, out=array[: len(rows)])

    def predictions(self, logits: Mapping[int, np.ndarray]) -> list[str]:
        """The answer text of every question, in dataset order (NO_ANSWER where none).

        `logits` maps a feature index to its `[384, 2]` float32 (start, end) payload. A
        question's answer is its best span over all its windows; windows are taken in feature
        order (not log order), so that a tie goes to the earlier window, as in the reference.
        """
        best: dict[int, tuple[float, int, int, int]] = {}
        for index in sorted(logits):
            pair = logits[index]
            span = best_span(self.features[index], pair[:, 0], pair[:, 1])
            example_index = self.features[index].example_index
            current = best.get(example_index)
            if span is not None and (current is None or span[0] > current[0]):
                best[example_index] = (span[0], index, span[1], span[2])
        answers = []
        for example_index, example in enumerate(self.examples):
            if example_index not in best:
                answers.append(NO_ANSWER)
                continue
            _score, index, start, end = best[example_index]
            feature = self.features[index]
            first_word, last_word = feature.token_to_word[start], feature.token_to_word[end]
            original = " ".join(example.doc_words[first_word : last_word + 1])
            answers.append(aligned_answer(feature.piece_text(start, end), original))
        return answers

    def score(self, logits: Mapping[int, np.ndarray]) -> tuple[float, float, int]:
        """(F1, exact match, question count) in percent, over all the dataset's questions: a
        question without a logged window answers NO_ANSWER and counts, as in the reference."""
        f1_total = em_total = 0.0
        for example, prediction in zip(self.examples, self.predictions(logits), strict=True):
            truths = example.answers or ("",)
            f1_total += max(f1_score(prediction, t) for t in truths)
            em_total += max(exact_match(prediction, t) for t in truths)
        count = len(self.examples)
        if count == 0:
            return 0.0, 0.0, 0
        return 100.0 * f1_total / count, 100.0 * em_total / count, count
