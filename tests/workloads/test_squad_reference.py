"""SQuAD answers and scores as MLCommons' accuracy-squad.py computes them, case by case.

Each case is worked by hand from the reference's rules (language/bert/accuracy-squad.py and
create_squad_data.py): the answer is the WordPiece span aligned back onto the original
characters, words are split on five whitespace characters only, CJK characters are words of
their own, span scores are float64, the n-best is 20 positions and an answer at most 30 tokens,
a question without a valid span answers "empty", and F1 / EM are averaged over all questions.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mlperf_mig.workloads.bert import BERT, SEQ_LEN
from mlperf_mig.workloads.bert.squad import (
    NO_ANSWER,
    SquadSource,
    WordPieceTokenizer,
    aligned_answer,
    basic_tokens,
    split_words,
)

CONTEXT = "Ashford-on-Lea's restoration, begun in 1990 by Zürich's crème brûlée makers."
QUESTION = "what was restored ?"  # 4 tokens: the context starts at position 6
OFFSET = 6
VOCAB = (
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "what", "was", "restored", "?", "ashford", "-", "on",
    "lea", "'", "s", "rest", "##oration", ",", "begun", "in", "1990", "by", "zurich", "cr",
    "##eme", "brulee", "makers", ".",
)  # fmt: skip
# the context's tokens, from OFFSET on: ashford - on - lea ' s rest ##oration , begun in 1990 by
# zurich ' s cr ##eme brulee makers .
TOKENS = (
    "ashford", "-", "on", "-", "lea", "'", "s", "rest", "##oration", ",", "begun", "in", "1990",
    "by", "zurich", "'", "s", "cr", "##eme", "brulee", "makers", ".",
)  # fmt: skip
BASE = -10.0
REFERENCE_N_BEST = 20  # accuracy-squad.py's n_best_size
REFERENCE_MAX_ANSWER = 30  # and max_answer_length


def _squad(folder: Path, questions: list[tuple[str, str]], context: str = CONTEXT) -> SquadSource:
    qas = [
        {"id": f"q{n}", "question": QUESTION, "answers": [{"text": answer, "answer_start": 0}]}
        for n, (_, answer) in enumerate(questions)
    ]
    data = {
        "version": "1.1",
        "data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}],
    }
    (folder / "dev-v1.1.json").write_text(json.dumps(data))
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    return SquadSource.open(folder, benchmark=BERT)


@pytest.fixture(name="one_question")
def fixture_one_question(tmp_path: Path) -> SquadSource:
    """One question on CONTEXT whose gold answer is "restoration"."""
    return _squad(tmp_path, [(QUESTION, "restoration")])


def _logits(starts: dict[int, float], ends: dict[int, float]) -> np.ndarray:
    """[384, 2] float32 logits; keys are context token numbers (0 = "ashford")."""
    pair = np.full((SEQ_LEN, 2), BASE, dtype=np.float32)
    for token, value in starts.items():
        pair[OFFSET + token, 0] = value
    for token, value in ends.items():
        pair[OFFSET + token, 1] = value
    return pair


def test_features_hold_the_tokens_the_answer_is_read_from(one_question: SquadSource) -> None:
    """The window's pieces from the first context position are the context's WordPiece tokens."""
    feature = one_question.features[0]
    assert feature.first_position == OFFSET
    assert [feature.piece_text(OFFSET + i, OFFSET + i) for i in range(len(TOKENS))] == [
        t.removeprefix("##") for t in TOKENS
    ]


def test_a_span_ending_inside_a_word_is_cut_there(one_question: SquadSource) -> None:
    """The span "rest" of the word "restoration," answers "rest" (F1 0 against "restoration");
    whole words would have answered "restoration," (F1 100)."""
    logits = {0: _logits({7: 5.0}, {7: 5.0})}
    assert one_question.predictions(logits) == ["rest"]
    f1, em, count = one_question.score(logits)
    assert (f1, em, count) == (0.0, 0.0, 1)


def test_a_span_inside_a_hyphenated_word_keeps_its_original_characters(tmp_path: Path) -> None:
    """ "ashford" answers "Ashford" (original case), "ashford - on - lea" answers
    "Ashford-on-Lea" without the possessive, "lea ' s" answers "Lea's"."""
    source = _squad(tmp_path, [(QUESTION, "x")] * 3)
    logits = {0: _logits({0: 5.0}, {0: 5.0})}
    assert source.predictions(logits)[0] == "Ashford"
    logits = {0: _logits({0: 5.0}, {4: 5.0})}
    assert source.predictions(logits)[0] == "Ashford-on-Lea"
    logits = {0: _logits({4: 5.0}, {6: 5.0})}
    assert source.predictions(logits)[0] == "Lea's"


def test_accents_are_kept_in_the_answer(tmp_path: Path) -> None:
    """ "zurich" answers "Zürich" and "cr ##eme brulee" answers "crème brûlée": the alignment
    is character for character, accents stripped only for matching."""
    source = _squad(tmp_path, [(QUESTION, "x")])
    assert source.predictions({0: _logits({14: 5.0}, {14: 5.0})}) == ["Zürich"]
    assert source.predictions({0: _logits({17: 5.0}, {19: 5.0})}) == ["crème brûlée"]


def test_alignment_falls_back_to_the_whole_words_where_lengths_differ() -> None:
    """An accent written as two characters (e + U+0301) makes the original longer than its
    tokenisation: the whole original is the answer, as in the reference."""
    assert aligned_answer("ecole", "e\u0301cole,") == "e\u0301cole,"
    assert aligned_answer("ecole", "école,") == "école"


def test_alignment_falls_back_where_the_prediction_is_not_found() -> None:
    """A prediction holding an unknown piece is not in the tokenised original: whole words."""
    assert aligned_answer("[UNK] s", "Lea's,") == "Lea's,"


def test_alignment_of_cjk_characters() -> None:
    """CJK characters are tokens of their own, so one can be cut out of a run of them."""
    assert basic_tokens("東京タワー") == ["東", "京", "タワー"]
    assert aligned_answer("京", "東京タワー") == "京"


def test_words_split_on_the_reference_whitespace_only() -> None:
    """Space, tab, CR, LF and U+202F split words; a no-break space, U+2028 and an ideographic
    space do not (the tokenizer later splits them)."""
    text = "a b\tc\rd\ne\u202ff g\u00a0h i\u2028j k\u3000l"
    assert split_words(text) == ("a", "b", "c", "d", "e", "f", "g\u00a0h", "i\u2028j", "k\u3000l")


def test_special_tokens_written_in_a_text_stay_whole() -> None:
    """ "[SEP]" in a context is BERT's [SEP] token, as in the reference's tokenizers."""
    tokenizer = WordPieceTokenizer({t: i for i, t in enumerate(VOCAB)})
    assert tokenizer.tokenize("in [SEP] 1990") == ["in", "[SEP]", "1990"]
    assert tokenizer.tokenize_words(["[SEP]", "in"]) == (["[SEP]", "in"], [0, 1])
    assert basic_tokens("by [SEP], in") == ["by", "[", "sep", "]", ",", "in"]


def test_span_scores_are_added_in_float64(tmp_path: Path) -> None:
    """Two spans whose float32 sums tie but whose float64 sums differ: the float64 larger one
    wins, though the other is found first ("Ashford", not "-on")."""
    source = _squad(tmp_path, [(QUESTION, "Ashford")])
    # starts in n-best order: token 1 (2^20 + 0.25), token 0 (2^20); ends: token 0 (0.28125),
    # token 2 (0). (1, 2) is found first: 1048576.25. (0, 0) is 1048576.28125 in float64 but
    # rounds to 1048576.25 in float32 (a step of 0.125 there): a tie the first found would win.
    logits = _logits({1: 1048576.25, 0: 1048576.0}, {0: 0.28125, 2: 0.0})
    assert np.float32(np.float32(1048576.0) + np.float32(0.28125)) == np.float32(1048576.25)
    assert source.predictions({0: logits}) == ["Ashford"]


def test_an_answer_may_be_30_tokens_not_31(tmp_path: Path) -> None:
    """The best-scoring span of 31 tokens is skipped for the 30-token one."""
    context = " ".join(["in"] * 40)
    source = _squad(tmp_path, [(QUESTION, "x")], context=context)
    feature = source.features[0]
    start = OFFSET
    pair = np.full((SEQ_LEN, 2), BASE, dtype=np.float32)
    pair[start, 0] = 5.0
    pair[start + REFERENCE_MAX_ANSWER, 1] = 9.0  # 31 tokens: skipped
    pair[start + REFERENCE_MAX_ANSWER - 1, 1] = 8.0  # 30 tokens: the answer
    assert feature.token_to_word[start + REFERENCE_MAX_ANSWER] == REFERENCE_MAX_ANSWER
    assert source.predictions({0: pair}) == [" ".join(["in"] * REFERENCE_MAX_ANSWER)]


def test_only_the_20_highest_starts_are_tried(tmp_path: Path) -> None:
    """A start ranked 21st (behind 20 starts inside the question) is never tried: no valid
    span, so the answer is "empty"; ranked 20th it is the answer."""
    source = _squad(tmp_path, [(QUESTION, "x")])
    pair = np.full((SEQ_LEN, 2), BASE, dtype=np.float32)
    pair[OFFSET + 2, 1] = 5.0  # the end: "on"
    pair[OFFSET + 2, 0] = 1.0  # the start, behind the padding positions below
    pair[100 : 100 + REFERENCE_N_BEST, 0] = 2.0  # 20 starts in the padding: invalid
    assert source.predictions({0: pair}) == [NO_ANSWER]
    pair[100, 0] = BASE  # now 19 are ahead of it
    assert source.predictions({0: pair}) == ["on"]


def test_a_question_without_a_logged_window_answers_empty_and_counts(tmp_path: Path) -> None:
    """Two questions, one logged and exact: F1 and EM are 50 (over both), not 100."""
    source = _squad(tmp_path, [(QUESTION, "Ashford")] * 2)
    logits = {0: _logits({0: 5.0}, {0: 5.0})}
    assert source.predictions(logits) == ["Ashford", NO_ANSWER]
    assert source.score(logits) == (50.0, 50.0, 2)
