"""ROUGE-1, ROUGE-2, ROUGE-L and ROUGE-Lsum of generated summaries, as the MLPerf llama3.1-8b
scorer computes them, and its pass rule.

The reference (mlcommons/inference, language/llama3.1-8b/evaluation.py) decodes the predictions
without special tokens, strips predictions and references, splits each into sentences with NLTK's
punkt and joins them with newlines, then calls `evaluate`'s rouge with `use_stemmer=True` and
`use_aggregator=False` (the `rouge-score` package underneath) and reports, per ROUGE type, the
MEAN of the per-sample F-measures times 100, rounded to 4 decimals; gen_len is the total number of
characters of the post-processed predictions and gen_num their count. Both download at run time,
so this module does the same computation itself:
- tokens as rouge-score makes them: lower-case, every run of characters other than a-z and 0-9
  becomes a space (so accented and non-Latin letters separate words), tokens longer than 3
  characters Porter-stemmed (porter.py, NLTK's variant);
- ROUGE-N: clipped n-gram overlap; ROUGE-L: longest common subsequence of the whole texts;
  ROUGE-Lsum: the summary-level LCS (union of the LCS of each reference sentence with every
  predicted sentence, each token counted once) over newline-separated sentences;
- F = 2PR / (P + R), 0 when both are 0; an empty side scores 0.

One difference, documented: sentences are split by `split_sentences` below, a deterministic rule
(a break after `.`, `!` or `?`, closing quotes and brackets included, before whitespace and a
character that is not a lower-case letter, unless the word ending there is a common abbreviation
or a single initial), not by punkt's trained model. Only ROUGE-Lsum and gen_len (a newline
replaces the whitespace between sentences) depend on the split; punkt may split differently
around rare abbreviations.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import attrs
import numpy as np

from mlperf_mig.workloads.llama3_1_8b.porter import stem

if TYPE_CHECKING:
    from mlperf_mig.workloads.llama3_1_8b.tokenizer import TextTokenizer

__all__ = [
    "EDGE_TARGETS",
    "TARGETS",
    "AccuracyTargets",
    "RougeScores",
    "passes",
    "postprocess",
    "rouge_l",
    "rouge_lsum",
    "rouge_n",
    "rouge_tokens",
    "sample_scores",
    "score_summaries",
    "score_token_outputs",
    "split_sentences",
]

_NOT_ALPHANUMERIC = re.compile(r"[^a-z0-9]+")
_SENTENCE_END = re.compile(r"""[.!?]+["'”’)\]]*(?=\s+[^a-z\s])""")
# Words after which a full stop does not end a sentence (titles, months, common short forms).
_ABBREVIATIONS = frozenset(
    (
        *("mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "gen", "col", "lt", "sgt", "capt"),
        *("gov", "sen", "rep", "rev", "hon", "pres", "inc", "ltd", "corp", "bros", "vs", "etc"),
        *("approx", "dept", "univ", "ave", "rd", "blvd", "mt", "ft", "jan", "feb", "mar", "apr"),
        *("jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec"),
        *("u.s", "u.k", "u.n", "e.g", "i.e", "a.m", "p.m"),
    )
)


@attrs.frozen(kw_only=True)
class AccuracyTargets:
    """The reference's accuracy of a benchmark (ROUGE x100, gen_len in characters)."""

    rouge1: float
    rouge2: float
    rougeL: float
    rougeLsum: float
    gen_len: int
    gen_num: int


# reference/llm.md section 1 (BF16 reference; the submission checker's constants)
TARGETS = AccuracyTargets(
    rouge1=38.7792,
    rouge2=15.9075,
    rougeL=24.4957,
    rougeLsum=35.793,
    gen_len=8_167_644,
    gen_num=13_368,
)
EDGE_TARGETS = AccuracyTargets(
    rouge1=39.06, rouge2=16.1147, rougeL=24.6375, rougeLsum=36.124, gen_len=3_051_113, gen_num=5_000
)
ROUGE_SHARE = 0.99  # each ROUGE at least 99% of its target
GEN_LEN_SHARES = (0.9, 1.1)  # gen_len within 90-110% of its target


@attrs.frozen(kw_only=True)
class RougeScores:
    """Mean per-sample F-measures x100 (unrounded), gen_len and gen_num of a set of summaries."""

    rouge1: float
    rouge2: float
    rougeL: float
    rougeLsum: float
    gen_len: int
    gen_num: int

    def to_dict(self) -> dict[str, float | int]:
        """The scores as the reference prints them: ROUGE rounded to 4 decimals."""
        return {
            "rouge1": round(self.rouge1, 4),
            "rouge2": round(self.rouge2, 4),
            "rougeL": round(self.rougeL, 4),
            "rougeLsum": round(self.rougeLsum, 4),
            "gen_len": self.gen_len,
            "gen_num": self.gen_num,
        }


def passes(scores: RougeScores, targets: AccuracyTargets) -> bool:
    """The submission checker's rule: every ROUGE at least 99% of its target and gen_len within
    90-110% of its target, the bounds included."""
    rouge_ok = all(
        getattr(scores, name) >= getattr(targets, name) * ROUGE_SHARE
        for name in ("rouge1", "rouge2", "rougeL", "rougeLsum")
    )
    low, high = GEN_LEN_SHARES
    return rouge_ok and targets.gen_len * low <= scores.gen_len <= targets.gen_len * high


# --- text ----------------------------------------------------------------------------------
def split_sentences(text: str) -> list[str]:
    """The sentences of `text`, stripped, in order (see the module's note on punkt)."""
    sentences = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        words = text[start : match.start()].split()
        last = words[-1].lower().lstrip("\"'“‘([") if words else ""
        if last in _ABBREVIATIONS or (len(last) == 1 and last.isalpha() and match.group() == "."):
            continue
        sentences.append(text[start : match.end()].strip())
        start = match.end()
    sentences.append(text[start:].strip())
    return [s for s in sentences if s]


def postprocess(text: str) -> str:
    """The reference's post-processing of a prediction or reference: stripped, one sentence a
    line."""
    return "\n".join(split_sentences(text.strip()))


def rouge_tokens(text: str) -> list[str]:
    """rouge-score's tokens of `text` with stemming: lower-case, non-alphanumerics to spaces,
    tokens longer than 3 characters Porter-stemmed."""
    words = _NOT_ALPHANUMERIC.sub(" ", text.lower()).split()
    return [stem(w) if len(w) > 3 else w for w in words]


# --- scores --------------------------------------------------------------------------------
def _fmeasure(hits: int, predicted: int, reference: int) -> float:
    precision = hits / max(predicted, 1)
    recall = hits / max(reference, 1)
    return 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0


def _ngrams(tokens: Sequence[str], n: int) -> collections.Counter[tuple[str, ...]]:
    return collections.Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def rouge_n(reference: Sequence[str], prediction: Sequence[str], n: int) -> float:
    """ROUGE-N F-measure (0-1) of two token lists."""
    wanted, got = _ngrams(reference, n), _ngrams(prediction, n)
    hits = sum(min(count, got[gram]) for gram, count in wanted.items())
    return _fmeasure(hits, sum(got.values()), sum(wanted.values()))


def _lcs_table(reference: Sequence[str], prediction: Sequence[str]) -> list[list[int]]:
    rows = [[0] * (len(prediction) + 1) for _ in range(len(reference) + 1)]
    for i, ref_token in enumerate(reference, start=1):
        above, row = rows[i - 1], rows[i]
        for j, token in enumerate(prediction, start=1):
            row[j] = above[j - 1] + 1 if ref_token == token else max(above[j], row[j - 1])
    return rows


def rouge_l(reference: Sequence[str], prediction: Sequence[str]) -> float:
    """ROUGE-L F-measure (0-1): the longest common subsequence of two token lists."""
    if not reference or not prediction:
        return 0.0
    hits = _lcs_table(reference, prediction)[-1][-1]
    return _fmeasure(hits, len(prediction), len(reference))


def _lcs_positions(reference: Sequence[str], prediction: Sequence[str]) -> list[int]:
    """Positions in `reference` of one LCS with `prediction`: walked back from the end, a tie
    moves up the reference (rouge-score's choice, on which the union below depends)."""
    table = _lcs_table(reference, prediction)
    i, j = len(reference), len(prediction)
    positions = []
    while i > 0 and j > 0:
        if reference[i - 1] == prediction[j - 1]:
            positions.append(i - 1)
            i -= 1
            j -= 1
        elif table[i][j - 1] > table[i - 1][j]:
            j -= 1
        else:
            i -= 1
    return positions[::-1]


def rouge_lsum(reference: Sequence[Sequence[str]], prediction: Sequence[Sequence[str]]) -> float:
    """ROUGE-Lsum F-measure (0-1) of two texts given as token lists per sentence: for each
    reference sentence, the union of its LCS with every predicted sentence, each token counted
    at most as often as it occurs on both sides."""
    reference_length = sum(map(len, reference))
    prediction_length = sum(map(len, prediction))
    if not reference or not prediction or not reference_length or not prediction_length:
        return 0.0
    left_reference = collections.Counter(t for sentence in reference for t in sentence)
    left_prediction = collections.Counter(t for sentence in prediction for t in sentence)
    hits = 0
    for sentence in reference:
        union = sorted(set().union(*(_lcs_positions(sentence, other) for other in prediction)))
        for token in (sentence[i] for i in union):
            if left_prediction[token] > 0 and left_reference[token] > 0:
                hits += 1
                left_prediction[token] -= 1
                left_reference[token] -= 1
    return _fmeasure(hits, prediction_length, reference_length)


def sample_scores(reference: str, prediction: str) -> tuple[float, float, float, float]:
    """(ROUGE-1, ROUGE-2, ROUGE-L, ROUGE-Lsum) F-measures (0-1) of one already post-processed
    pair; ROUGE-Lsum reads newline-separated sentences, as rouge-score does."""
    ref_tokens, pred_tokens = rouge_tokens(reference), rouge_tokens(prediction)
    ref_sentences = [rouge_tokens(s) for s in reference.split("\n") if s]
    pred_sentences = [rouge_tokens(s) for s in prediction.split("\n") if s]
    return (
        rouge_n(ref_tokens, pred_tokens, 1),
        rouge_n(ref_tokens, pred_tokens, 2),
        rouge_l(ref_tokens, pred_tokens),
        rouge_lsum(ref_sentences, pred_sentences),
    )


def score_summaries(predictions: Iterable[str], references: Iterable[str]) -> RougeScores:
    """The reference's accuracy of decoded predictions against their reference summaries (one
    each, in the same order): both post-processed, mean F-measures x100, gen_len and gen_num."""
    predicted = [postprocess(p) for p in predictions]
    expected = [postprocess(r) for r in references]
    if len(predicted) != len(expected):
        raise ValueError(
            f"{len(predicted)} predictions for {len(expected)} references: pass one each"
        )
    if not predicted:
        raise ValueError("no predictions to score: pass at least one")
    per_sample = [sample_scores(r, p) for p, r in zip(predicted, expected)]
    # as the reference: numpy's mean of each list of per-sample F-measures, then x100
    means = [float(np.mean(list(column)) * 100) for column in zip(*per_sample)]
    return RougeScores(
        rouge1=means[0],
        rouge2=means[1],
        rougeL=means[2],
        rougeLsum=means[3],
        gen_len=sum(len(p) for p in predicted),
        gen_num=len(predicted),
    )


def score_token_outputs(
    outputs: Mapping[int, bytes | memoryview | np.ndarray],
    references: Sequence[str],
    tokenizer: TextTokenizer,
) -> RougeScores:
    """The accuracy of logged answers: `outputs` maps a sample index to its generated int32 token
    ids (LoadGen's payload bytes or an array), decoded without special tokens and scored against
    `references[index]`, in index order (the mean does not depend on it); each index once, as
    the reference keeps the first answer of a sample logged twice."""
    if not outputs:
        raise ValueError("no answers to score: the accuracy log holds none")
    indices = sorted(outputs)
    if indices[0] < 0 or indices[-1] >= len(references):
        bad = indices[0] if indices[0] < 0 else indices[-1]
        raise ValueError(
            f"answer for sample {bad}, but the dataset has samples 0-{len(references) - 1}; "
            "score the log against the dataset it was run with"
        )
    predictions = []
    for index in indices:
        answer = outputs[index]
        ids = answer if isinstance(answer, np.ndarray) else np.frombuffer(answer, dtype=np.int32)
        predictions.append(tokenizer.decode(ids))
    return score_summaries(predictions, [references[index] for index in indices])
