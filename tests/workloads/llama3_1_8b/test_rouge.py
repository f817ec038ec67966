"""ROUGE of llama3.1-8b summaries, cross-checked against the rouge-score package the MLPerf
reference scores with, and the submission checker's pass rule."""

from __future__ import annotations

import attrs
import numpy as np
import pytest
from rouge_score import rouge_scorer

from mlperf_mig.workloads.llama3_1_8b.rouge import (
    EDGE_TARGETS,
    TARGETS,
    AccuracyTargets,
    RougeScores,
    passes,
    postprocess,
    rouge_tokens,
    sample_scores,
    score_summaries,
    score_token_outputs,
    split_sentences,
)
from mlperf_mig.workloads.llama3_1_8b.tokenizer import builtin_tokenizer

_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")
# (reference, prediction): punctuation, numbers, Unicode, repeated words and several sentences.
_PAIRS = (
    ("The cat sat on the mat.", "The cat was sitting on the mat!"),
    (
        "Police arrested a 34-year-old man on Sunday.\nHe is due in court on Monday.",
        "A man, 34, was arrested by police.\nHe will appear in court Monday; police said.",
    ),
    (
        "Prices rose 3.5% in Zürich — analysts were naïve.\n東京 stocks fell 2,000 points.",
        "Zürich prices rose by 3.5 per cent.\nStocks in 東京 fell 2000 points, analysts said.",
    ),
    (
        "The company's profit was $4.2 billion.\nShares rose 6%.\nDemand remained strong.",
        "Shares rose.\nThe company reported profits of 4.2 billion dollars.\nDemand was strong in Asia.",
    ),
    ("the the the cat cat", "the cat the cat the"),
    ("Flooding hit villages.", ""),
    ("", "Nothing to compare."),
    ("!!! ... ???", "Émigré café façade."),
    (
        "Generalization of nationalizing organizations.\nHopping, hoped, hoping.",
        "Organizational generalizations were nationalized.\nHop hope hopes.",
    ),
)


@pytest.fixture(name="scorer")
def fixture_scorer() -> rouge_scorer.RougeScorer:
    """rouge-score as the reference's `evaluate` rouge builds it: with stemming."""
    return rouge_scorer.RougeScorer(list(_TYPES), use_stemmer=True)


@pytest.mark.parametrize(("reference", "prediction"), _PAIRS)
def test_sample_scores_equal_rouge_scores(
    scorer: rouge_scorer.RougeScorer, reference: str, prediction: str
) -> None:
    """ROUGE-1/2/L and, on newline-split sentences, ROUGE-Lsum equal rouge-score's F-measures."""
    expected = scorer.score(reference, prediction)
    got = sample_scores(reference, prediction)
    assert got == pytest.approx([expected[t].fmeasure for t in _TYPES], abs=1e-9, rel=0)


def test_random_texts_equal_rouge_scores(scorer: rouge_scorer.RougeScorer) -> None:
    """Random multi-sentence texts over a small vocabulary (many LCS ties) score as rouge-score."""
    rng = np.random.default_rng(7)
    pool = [
        "the",
        "a",
        "cat",
        "cats",
        "sat",
        "sitting",
        "on",
        "mat",
        "dog",
        "ran",
        "running",
        "2024",
        "3.5",
        "café",
        "Zürich",
        "東京",
        "it's",
        "U.S.",
        "said",
        "Mr.",
    ]

    def text() -> str:
        sentences = [
            " ".join(rng.choice(pool, int(rng.integers(0, 12))))
            for _ in range(int(rng.integers(1, 5)))
        ]
        return "\n".join(sentences)

    worst = 0.0
    for _ in range(150):
        reference, prediction = text(), text()
        expected = scorer.score(reference, prediction)
        got = sample_scores(reference, prediction)
        worst = max(worst, *(abs(g - expected[t].fmeasure) for g, t in zip(got, _TYPES)))
    assert worst <= 1e-9


def test_aggregate_is_the_references(scorer: rouge_scorer.RougeScorer) -> None:
    """Over a set, each ROUGE is the mean of the per-sample F-measures x100 (evaluate with
    use_aggregator=False, then np.mean), after stripping and one sentence a line; gen_len counts
    the post-processed predictions' characters."""
    references = [r.replace("\n", " ") for r, _p in _PAIRS]
    predictions = ["  " + p.replace("\n", "  ") + " \n" for _r, p in _PAIRS]
    processed = [(postprocess(r), postprocess(p)) for r, p in zip(references, predictions)]
    per_sample = [scorer.score(r, p) for r, p in processed]
    scores = score_summaries(predictions, references)
    for name in _TYPES:
        expected = np.mean([s[name].fmeasure for s in per_sample]) * 100
        assert getattr(scores, name) == pytest.approx(expected, abs=1e-9, rel=0)
    assert scores.gen_len == sum(len(p) for _r, p in processed)
    assert scores.gen_num == len(_PAIRS)


def test_token_outputs_are_decoded_then_scored() -> None:
    """Logged int32 ids (payload bytes or arrays, an end token included) score as their text,
    each against the reference of its own sample index."""
    tokenizer = builtin_tokenizer()
    references = ["The council approved the budget.", "Police arrested a driver.", "Unused."]
    texts = {1: "Police arrested the driver on Sunday.", 0: "The council voted on a budget."}
    outputs = {
        1: np.append(tokenizer.encode(texts[1]), tokenizer.eos_id).astype(np.int32).tobytes(),
        0: tokenizer.encode(texts[0]),
    }
    expected = score_summaries([texts[0], texts[1]], references[:2])
    assert score_token_outputs(outputs, references, tokenizer) == expected


def test_token_output_outside_the_dataset_is_refused() -> None:
    """An answer for a sample index the dataset does not have is refused."""
    tokenizer = builtin_tokenizer()
    with pytest.raises(ValueError, match="answer for sample 3, but the dataset has samples 0-1"):
        score_token_outputs({3: tokenizer.encode("a")}, ["x", "y"], tokenizer)


def test_unequal_counts_are_refused() -> None:
    """Predictions and references must pair up one to one."""
    with pytest.raises(ValueError, match="2 predictions for 1 references"):
        score_summaries(["a", "b"], ["a"])


def test_tokens_are_rouge_scores() -> None:
    """Lower-case, non-alphanumerics (accented letters too) separate words, long words stemmed."""
    assert rouge_tokens("Running DOGS ran, in Zürich's café: 3.5%!") == [
        "run",
        "dog",
        "ran",
        "in",
        "z",
        "rich",
        "s",
        "caf",
        "3",
        "5",
    ]


def test_sentences_split_at_their_ends_only() -> None:
    """Titles, initials, abbreviations and decimals do not end a sentence; quotes stay with it."""
    text = 'Mr. Smith met the U.S. envoy on Jan. 5. "It went well!" J. K. Rowling said 3.5 million. done'
    assert split_sentences(text) == [
        "Mr. Smith met the U.S. envoy on Jan. 5.",
        '"It went well!"',
        "J. K. Rowling said 3.5 million. done",
    ]


def test_postprocess_is_one_sentence_a_line() -> None:
    """Stripped, and the whitespace between sentences becomes one newline."""
    assert postprocess("  First one.   Second one?  Third.\n") == "First one.\nSecond one?\nThird."


def test_to_dict_rounds_as_the_reference_prints() -> None:
    """ROUGE to 4 decimals, gen_len and gen_num as they are."""
    scores = RougeScores(
        rouge1=38.77924999, rouge2=1 / 3, rougeL=0.0, rougeLsum=100.0, gen_len=5, gen_num=1
    )
    assert scores.to_dict() == {
        "rouge1": 38.7792,
        "rouge2": 0.3333,
        "rougeL": 0.0,
        "rougeLsum": 100.0,
        "gen_len": 5,
        "gen_num": 1,
    }


def test_targets_are_the_references() -> None:
    """The BF16 reference accuracies of llama3.1-8b and -edge (reference/llm.md)."""
    assert attrs.astuple(TARGETS) == (38.7792, 15.9075, 24.4957, 35.793, 8_167_644, 13_368)
    assert attrs.astuple(EDGE_TARGETS) == (39.06, 16.1147, 24.6375, 36.124, 3_051_113, 5_000)


def _at(targets: AccuracyTargets, rouge_share: float, gen_len: float) -> RougeScores:
    return RougeScores(
        rouge1=targets.rouge1 * rouge_share,
        rouge2=targets.rouge2 * rouge_share,
        rougeL=targets.rougeL * rouge_share,
        rougeLsum=targets.rougeLsum * rouge_share,
        gen_len=int(gen_len),
        gen_num=targets.gen_num,
    )


@pytest.mark.parametrize("targets", [TARGETS, EDGE_TARGETS, attrs.evolve(TARGETS, gen_len=1000)])
def test_pass_rule_bounds_are_inclusive(targets: AccuracyTargets) -> None:
    """Exactly 99% of every ROUGE target passes, and so does gen_len at 90% and at 110% (the
    nearest whole character inside where the bound is not a whole number)."""
    at_99 = _at(targets, 0.99, targets.gen_len)
    assert passes(at_99, targets)
    assert passes(attrs.evolve(at_99, gen_len=int(np.ceil(targets.gen_len * 0.9))), targets)
    assert passes(attrs.evolve(at_99, gen_len=int(np.floor(targets.gen_len * 1.1))), targets)


def test_pass_rule_takes_whole_bounds() -> None:
    """With a gen_len target of 1000, 900 and 1100 characters pass, 899 and 1101 fail."""
    targets = attrs.evolve(TARGETS, gen_len=1000)
    verdicts = [passes(_at(targets, 1.0, n), targets) for n in (899, 900, 1100, 1101)]
    assert verdicts == [False, True, True, False]


@pytest.mark.parametrize("targets", [TARGETS, EDGE_TARGETS])
def test_pass_rule_fails_outside_the_bounds(targets: AccuracyTargets) -> None:
    """Below 99% of one ROUGE, or gen_len one character outside 90-110%, fails."""
    ok = _at(targets, 0.99, targets.gen_len)
    assert passes(ok, targets)
    assert not passes(attrs.evolve(ok, rouge2=np.nextafter(targets.rouge2 * 0.99, 0)), targets)
    assert not passes(attrs.evolve(ok, gen_len=int(np.ceil(targets.gen_len * 0.9)) - 1), targets)
    assert not passes(attrs.evolve(ok, gen_len=int(np.floor(targets.gen_len * 1.1)) + 1), targets)
