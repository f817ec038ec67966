"""Accuracy scoring on hand-made accuracy logs whose right answer is worked out in each test.

ImageNet top-1 is read by sample index, with each sample counted once (its first record), as
accuracy-imagenet.py does. SQuAD F1 / exact match are averaged over ALL the dataset's questions
(one without a logged window answers "empty"), a question's answer being its best span over all
its 384-token windows, chosen as the reference (accuracy-squad.py with BERT's write_predictions)
chooses it.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from mlperf_mig.harness import accuracy
from mlperf_mig.harness.logs import ACCURACY_LOG
from mlperf_mig.workloads.bert import BERT, SEQ_LEN
from mlperf_mig.workloads.bert.squad import DOC_STRIDE, SquadSource
from mlperf_mig.workloads.resnet50 import RESNET50


def _write_log(folder: Path, records: list[tuple[int, bytes]]) -> Path:
    """mlperf_log_accuracy.json as LoadGen writes it: seq_id, qsl_idx, data in upper-case hex."""
    folder.mkdir(parents=True, exist_ok=True)
    entries = [
        {"seq_id": seq, "qsl_idx": index, "data": data.hex().upper()}
        for seq, (index, data) in enumerate(records)
    ]
    (folder / ACCURACY_LOG).write_text(json.dumps(entries))
    return folder


# --- ImageNet top-1 --------------------------------------------------------------------------
LABELS = np.array([5, 1, 0, 7], dtype=np.int64)  # ground truth of samples 0..3


def _top1(tmp_path: Path, answers: list[tuple[int, int]]) -> accuracy.AccuracyReport:
    records = [(index, np.int32(cls).tobytes()) for index, cls in answers]
    source = SimpleNamespace(synthetic=False, labels=LABELS)
    return accuracy.score(
        RESNET50, source, _write_log(tmp_path / "log", records), weights_synthetic=False
    )


def test_top1_reads_answers_by_sample_index_not_by_position(tmp_path: Path) -> None:
    """A log in another order than the samples is scored by qsl_idx: 3 of 4 right is 75%."""
    # by index: 3->7 right, 0->5 right, 1->2 wrong (label 1), 2->0 right; read by position
    # against labels 0..3 it would be 0 of 4
    report = _top1(tmp_path, [(3, 7), (0, 5), (1, 2), (2, 0)])
    assert report.value == 75.0 and report.sample_count == 4


def test_top1_counts_a_repeated_sample_once_by_its_first_answer(tmp_path: Path) -> None:
    """A sample logged twice counts once, by its first record: 2 of 3 samples right."""
    # samples 3 (7, right; then 9 ignored), 0 (5, right), 1 (2, wrong): 2/3; counting every
    # record would give 2/4, counting the last answer of sample 3 would give 1/3
    report = _top1(tmp_path, [(3, 7), (0, 5), (3, 9), (1, 2)])
    assert report.value == pytest.approx(200 / 3) and report.sample_count == 3


def test_top1_verdict_against_the_target(tmp_path: Path) -> None:
    """With real weights and data the verdict compares the value with the target (75.695%)."""
    report = _top1(tmp_path, [(0, 5), (1, 1), (2, 0), (3, 6)])  # 3 of 4
    assert report.meaningful and report.passed is False and report.target == pytest.approx(75.6954)


# --- SQuAD -----------------------------------------------------------------------------------
WORDS = 500  # one WordPiece token each: two windows with a 4-token question
QUERY_TOKENS = 4  # "where is wN ?"
OFFSET = 1 + QUERY_TOKENS + 1  # [CLS] query [SEP], then the context
WINDOW = SEQ_LEN - QUERY_TOKENS - 3  # 377 context tokens per window
SECOND = DOC_STRIDE  # the second window starts at word 128 and ends at word 499
BASE = -10.0  # every position not set by a test


@pytest.fixture(name="squad", scope="module")
def fixture_squad(tmp_path_factory: pytest.TempPathFactory) -> SquadSource:
    """Two questions on one 500-word context (two windows each) and one on a 10-word context.

    Features: 0, 1 = question "long-a" windows 1 and 2; 2, 3 = "long-b"; 4 = "short".
    """
    folder = tmp_path_factory.mktemp("squad-windows")
    long_context = " ".join(f"w{i}" for i in range(WORDS))
    short_context = " ".join(f"w{i}" for i in range(10))
    paragraphs = [
        {
            "context": long_context,
            "qas": [
                _qa("long-a", "where is w450 ?", "w450 w451", long_context),
                _qa("long-b", "where is w10 ?", "w10 w11 w12 w13", long_context),
            ],
        },
        {"context": short_context, "qas": [_qa("short", "where is w3 ?", "w0", short_context)]},
    ]
    data = {"version": "1.1", "data": [{"title": "t", "paragraphs": paragraphs}]}
    (folder / "dev-v1.1.json").write_text(json.dumps(data))
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "where", "is", "?"]
    (folder / "vocab.txt").write_text("\n".join(vocab + [f"w{i}" for i in range(WORDS)]) + "\n")
    return SquadSource.open(folder, benchmark=BERT)


def _qa(qid: str, question: str, answer: str, context: str) -> dict:
    return {
        "id": qid,
        "question": question,
        "answers": [{"text": answer, "answer_start": context.index(answer)}],
    }


def _position(word: int, window: int) -> int:
    """Token position of context word `word` in the feature of window 0 or 1."""
    start = 0 if window == 0 else SECOND
    assert start <= word < start + WINDOW
    return OFFSET + word - start


def _payload(starts: dict[int, float], ends: dict[int, float], base: float = BASE) -> bytes:
    """A [384, 2] float32 payload: start and end logits interleaved, `base` where not given."""
    pair = np.full((SEQ_LEN, 2), base, dtype=np.float32)
    for position, value in starts.items():
        pair[position, 0] = value
    for position, value in ends.items():
        pair[position, 1] = value
    return pair.tobytes()


def _f1_of(squad: SquadSource, tmp_path: Path, records: list[tuple[int, bytes]]):
    return accuracy.score(
        BERT, squad, _write_log(tmp_path / "log", records), weights_synthetic=False
    )


def test_questions_have_the_windows_of_the_doc_stride(squad: SquadSource) -> None:
    """500 context words with a 4-token question make two windows: words 0-376 and 128-499."""
    assert [f.example_index for f in squad.features] == [0, 0, 1, 1, 2]
    first, second = squad.features[0], squad.features[1]
    assert first.token_to_word[OFFSET] == 0 and first.token_to_word[OFFSET + WINDOW - 1] == 376
    assert second.token_to_word[OFFSET] == SECOND and second.token_count == OFFSET + 372 + 1


def test_f1_is_averaged_over_questions_with_the_answer_in_the_second_window(
    squad: SquadSource, tmp_path: Path
) -> None:
    """long-a is answered in its second window (1), long-b partly (6/7), "short" has no logged
    window (0): F1 = 100 x (1 + 6/7) / 3 = 61.905, EM 33.333 over all 3 questions."""
    # long-a, window 1: a higher-scoring span at words 300-301 is skipped, because word 300
    # has more context in window 2 (172 and 199 tokens on its sides against 300 and 76).
    window_1_a = _payload({_position(300, 0): 8}, {_position(301, 0): 8})
    # long-a, window 2: starts 450 (5) and 470 (6), ends 451 (5) and 465 (4): 470 has no end
    # after it, so the best is 450-451 (10) ahead of 450-465 (9): "w450 w451", exact.
    window_2_a = _payload(
        {_position(450, 1): 5, _position(470, 1): 6}, {_position(451, 1): 5, _position(465, 1): 4}
    )
    # long-b, window 1: "w11 w12 w13" against "w10 w11 w12 w13": P 1, R 3/4, F1 6/7, EM 0.
    window_1_b = _payload({_position(11, 0): 3}, {_position(13, 0): 3})
    window_2_b = _payload(
        {}, {}
    )  # nothing valid: its first 20 positions have more context in window 1 than 2
    report = _f1_of(
        squad, tmp_path, [(3, window_2_b), (1, window_2_a), (2, window_1_b), (0, window_1_a)]
    )
    assert report.sample_count == 3 and report.extra["features"] == 4
    assert report.extra["questions_logged"] == 2
    assert report.value == pytest.approx(100 * (1 + 6 / 7) / 3)
    assert report.extra["exact_match"] == pytest.approx(100 / 3)


def test_equal_scores_in_two_windows_go_to_the_earlier_window(
    squad: SquadSource, tmp_path: Path
) -> None:
    """Spans of equal score in windows 1 and 2: the reference keeps window 1's, whatever the log
    order, so long-a is answered "w200 w201" (F1 0), not "w450 w451"."""
    window_1 = _payload({_position(200, 0): 5}, {_position(201, 0): 5})
    window_2 = _payload({_position(450, 1): 5}, {_position(451, 1): 5})
    report = _f1_of(squad, tmp_path, [(1, window_2), (0, window_1)])
    assert report.extra["questions_logged"] == 1 and report.value == 0.0


def test_equal_logits_give_the_first_positions_as_the_reference_does(
    squad: SquadSource, tmp_path: Path
) -> None:
    """All logits equal: the n-best are the first 20 positions, the first valid span is word 0
    to word 0, so "short" (answer "w0") is exact: 1 of 3 questions, F1 and EM 33.333."""
    report = _f1_of(squad, tmp_path, [(4, _payload({}, {}, base=0.0))])
    assert report.value == pytest.approx(100 / 3)
    assert report.extra["exact_match"] == pytest.approx(100 / 3)


def test_a_feature_logged_twice_counts_its_question_once(
    squad: SquadSource, tmp_path: Path
) -> None:
    """The same window logged twice is one feature of one question."""
    exact = _payload({_position(0, 0): 1}, {_position(0, 0): 1}, base=0.0)
    report = _f1_of(squad, tmp_path, [(4, exact), (4, exact)])
    assert report.extra["questions_logged"] == 1 and report.extra["features"] == 1
    assert report.value == pytest.approx(100 / 3)


# --- what a table says ------------------------------------------------------------------------
def test_summary_says_how_many_samples_the_verdict_rests_on(tmp_path: Path) -> None:
    """A table's accuracy cell names the count of scored samples with the value and verdict."""
    report = _top1(tmp_path, [(0, 5), (1, 1), (2, 0), (3, 6)])
    assert report.summary() == "top1 75.000 on 4 samples (target 75.695): FAIL"


def test_squad_summary_counts_questions(squad: SquadSource, tmp_path: Path) -> None:
    """For SQuAD the count is of all questions (not windows), with how many were logged."""
    report = _f1_of(squad, tmp_path, [(4, _payload({}, {}, base=0.0))])
    assert report.summary() == "f1 33.333 on 3 questions, 1 logged (target 89.965): FAIL"
