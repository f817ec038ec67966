"""Truncation, hash and the reference accuracy lines that the checker's patterns read."""

from __future__ import annotations

from mlperf_mig.submission import accuracy, rules
from mlperf_mig.workloads import get_workload


def test_small_log_is_kept_whole() -> None:
    """A log of at most 10 KiB is not cut."""
    data = b"x" * rules.MAX_ACCURACY_LOG_SIZE
    assert accuracy.truncate(data) == data
    assert not accuracy.is_truncated(data)


def test_large_log_keeps_head_and_tail() -> None:
    """A larger log keeps 4 KiB from each end around the marker of truncate_accuracy_log.py."""
    data = bytes(range(256)) * 100
    cut = accuracy.truncate(data)
    assert cut == data[:4096] + b"\n\n...\n\n" + data[-4096:]
    assert accuracy.is_truncated(cut)
    assert len(cut) <= rules.MAX_ACCURACY_LOG_SIZE


def test_resnet_line_matches_the_checker_pattern() -> None:
    """The ImageNet line reads as accuracy-imagenet.py prints it, and the checker finds the value."""
    figures = accuracy.AccuracyFigures(
        model="resnet", values={"accuracy": 76.456, "good": 38228, "total": 50000}
    )
    line = figures.line()
    assert line == "accuracy=76.456%, good=38228, total=50000"
    assert rules.accuracy_pattern("resnet").match(line).group(1) == "76.456"


def test_bert_line_matches_the_checker_pattern() -> None:
    """The SQuAD line is the JSON accuracy-squad.py prints; the checker reads F1 from it."""
    figures = accuracy.AccuracyFigures(model="bert-99", values={"exact_match": 83.5, "f1": 90.9})
    assert figures.line() == '{"exact_match": 83.5, "f1": 90.9}'
    assert rules.accuracy_pattern("bert-99").match(figures.line()).group(1) == "90.9"


def test_accuracy_txt_ends_with_the_hash_line() -> None:
    """accuracy.txt: accuracy line, how it was computed, note, then hash=<sha256> the checker's
    regex accepts."""
    digest = accuracy.sha256_of(b"[]")
    figures = accuracy.AccuracyFigures(
        model="resnet", values={"accuracy": 1, "good": 1, "total": 100}
    )
    text = accuracy.accuracy_txt(figures, digest, "# note")
    assert text.splitlines() == [
        "accuracy=1.000%, good=1, total=100",
        *accuracy.how_computed("resnet"),
        "# note",
        f"hash={digest}",
    ]
    assert rules.HASH_LINE.match(text.splitlines()[-1])


def test_accuracy_txt_tells_the_imagenet_script_to_read_int32() -> None:
    """The ImageNet command passes --dtype int32 (our log's labels), and only the accuracy line
    matches the checker's pattern."""
    figures = accuracy.AccuracyFigures(
        model="resnet", values={"accuracy": 1, "good": 1, "total": 100}
    )
    lines = accuracy.accuracy_txt(figures, accuracy.sha256_of(b"[]")).splitlines()
    assert any("accuracy-imagenet.py" in line and "--dtype int32" in line for line in lines)
    assert [line for line in lines if rules.accuracy_pattern("resnet").match(line)] == [lines[0]]


def test_accuracy_txt_says_squad_is_averaged_over_all_questions() -> None:
    """The SQuAD text names accuracy-squad.py, the alignment and the denominator; only the JSON
    line matches the checker's pattern."""
    figures = accuracy.AccuracyFigures(model="bert-99", values={"exact_match": 1.0, "f1": 2.0})
    lines = accuracy.accuracy_txt(figures, accuracy.sha256_of(b"[]")).splitlines()
    text = "\n".join(lines)
    assert "accuracy-squad.py" in text and "all the dataset's questions" in text
    assert "aligned back onto the original characters" in text
    assert [line for line in lines if rules.accuracy_pattern("bert-99").match(line)] == [lines[0]]


def test_figures_from_the_harness_reports() -> None:
    """ResNet50 top-1 becomes good/total; BERT takes exact_match from the report's extra."""
    from mlperf_mig.harness.result import AccuracyReport
    from mlperf_mig.submission.writer import accuracy_figures

    top1 = AccuracyReport(
        metric="top1", value=75.0, target=75.7, meaningful=True, passed=False, sample_count=1000
    )
    figures, note = accuracy_figures("resnet", top1)
    assert (figures.line(), note) == ("accuracy=75.000%, good=750, total=1000", "")
    f1 = AccuracyReport(
        metric="f1",
        value=90.5,
        target=89.9,
        meaningful=True,
        passed=True,
        sample_count=10570,
        extra={"exact_match": 83.2},
    )
    figures, _ = accuracy_figures("bert-99", f1)
    assert figures.line() == '{"exact_match": 83.2, "f1": 90.5}'
    synthetic = AccuracyReport(
        metric="f1",
        value=None,
        target=89.9,
        meaningful=False,
        passed=None,
        sample_count=64,
        note="synthetic data: there is no ground truth",
    )
    assert accuracy_figures("bert-99", synthetic) == (
        None,
        "# accuracy not reported: synthetic data: there is no ground truth",
    )


def test_accuracy_line_of_a_scored_log(tmp_path) -> None:
    """A log out of sample order with a repeat scores 3 good of 4 samples: the reference line."""
    import json
    from types import SimpleNamespace

    import numpy as np

    from mlperf_mig.harness.accuracy import score
    from mlperf_mig.submission.writer import accuracy_figures
    from mlperf_mig.workloads.resnet50 import RESNET50

    # labels of samples 0..3 are 5, 1, 0, 7; sample 3 is logged twice (its first answer counts)
    records = [(3, 7), (0, 5), (3, 9), (1, 2), (2, 0)]
    entries = [
        {"seq_id": k, "qsl_idx": i, "data": np.int32(c).tobytes().hex().upper()}
        for k, (i, c) in enumerate(records)
    ]
    (tmp_path / "mlperf_log_accuracy.json").write_text(json.dumps(entries))
    source = SimpleNamespace(synthetic=False, labels=np.array([5, 1, 0, 7]))
    report = score(RESNET50, source, tmp_path, weights_synthetic=False)
    figures, note = accuracy_figures("resnet", report)
    assert (figures.line(), note) == ("accuracy=75.000%, good=3, total=4", "")


def test_result_readme_gives_each_official_command_for_our_log() -> None:
    """The result README's accuracy section names accuracy-imagenet.py with --dtype int32 for
    ResNet50, and accuracy-squad.py with its default dtype for BERT."""
    from mlperf_mig.submission.readme import accuracy_paragraph

    resnet = "\n".join(accuracy_paragraph(get_workload("resnet50")))
    bert = "\n".join(accuracy_paragraph(get_workload("bert")))
    assert "accuracy-imagenet.py" in resnet and "--dtype int32" in resnet
    assert "accuracy-squad.py" in bert and "--output_dtype" not in bert.split("```")[1]
