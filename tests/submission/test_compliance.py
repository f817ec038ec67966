"""Compliance audits in the submission tree: the writer places them where the MLCommons checker
reads them (closed division refuses without them), and our checker checks them."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from mlperf_mig.errors import SubmissionError
from mlperf_mig.runner.results import RunResult
from mlperf_mig.submission import check, check_submission, write_submission


@pytest.fixture(name="audited")
def fixture_audited(audited_run: Path, tmp_path: Path) -> Path:
    """A private copy of the audited run (tests change its verdicts)."""
    return Path(shutil.copytree(audited_run, tmp_path / "run"))


@pytest.fixture(name="closed_tree")
def fixture_closed_tree(closed_audited_tree: Path) -> Path:
    return closed_audited_tree


@pytest.fixture(name="tree")
def fixture_tree(closed_audited_tree: Path, tmp_path: Path) -> Iterator[Path]:
    """A private copy of the closed tree, for a test to break."""
    yield Path(shutil.copytree(closed_audited_tree, tmp_path / "tree"))


def _scenario_dir(root: Path) -> Path:
    (folder,) = root.glob("*/Org/results/*/resnet50/Offline")
    return folder


def _problems(root: Path) -> list[str]:
    return [str(p) for p in check_submission(root)]


def _set_verdict(run_dir: Path, audit: str, **changes: object) -> None:
    run = RunResult.load(run_dir)
    verdicts = tuple(
        attrs.evolve(v, **changes) if v.audit == audit else v for v in run.layout_compliance
    )
    attrs.evolve(run, layout_compliance=verdicts).save(run_dir)


# --- the writer -----------------------------------------------------------------------------------
def test_closed_tree_places_audits_where_the_checker_reads_them(closed_tree: Path) -> None:
    """TEST01 and TEST04 sit in the result folder with verify files and performance/run_1 logs."""
    folder = _scenario_dir(closed_tree)
    written = sorted(str(p.relative_to(folder)) for p in folder.glob("TEST0*/**/*") if p.is_file())
    assert written == [
        "TEST01/accuracy/accuracy.txt",
        "TEST01/accuracy/mlperf_log_accuracy.json",
        "TEST01/performance/run_1/mlperf_log_detail.txt",
        "TEST01/performance/run_1/mlperf_log_summary.txt",
        "TEST01/verify_accuracy.txt",
        "TEST01/verify_performance.txt",
        "TEST04/performance/run_1/mlperf_log_detail.txt",
        "TEST04/performance/run_1/mlperf_log_summary.txt",
        "TEST04/verify_performance.txt",
    ]


def test_closed_tree_with_audits_has_no_problems(closed_tree: Path) -> None:
    """Our checker accepts the closed tree of a VALID run with its passing audits (its one
    problem: a closed edge system also needs the stream scenarios)."""
    assert [p.message for p in check_submission(closed_tree)] == [
        "closed division needs the scenarios SingleStream, MultiStream as well"
    ]


def test_closed_division_refuses_a_run_without_audits(
    real_run: Path, tmp_path: Path, fixed_host: None
) -> None:
    """A closed submission of a run made without --compliance names both missing audits."""
    with pytest.raises(SubmissionError) as caught:
        write_submission([real_run], division="closed", submitter="Org", outdir=tmp_path / "sub")
    message = str(caught.value)
    assert "\n" not in message
    assert "needs compliance audit TEST01, which was not run" in message
    assert "needs compliance audit TEST04, which was not run" in message
    assert not (tmp_path / "sub").exists()


def test_closed_division_refuses_a_failed_audit(
    audited: Path, tmp_path: Path, fixed_host: None
) -> None:
    """A failed TEST04 is named with its reason, and nothing is written."""
    _set_verdict(audited, "TEST04", passed=False, reason="+40.0% faster than the performance run")
    with pytest.raises(SubmissionError, match=r"compliance audit TEST04 failed: \+40\.0% faster"):
        write_submission([audited], division="closed", submitter="Org", outdir=tmp_path / "sub")


def test_closed_division_refuses_short_audits(
    audited: Path, tmp_path: Path, fixed_host: None
) -> None:
    """A quick-preset audit is not the official duration: the closed division says so."""
    _set_verdict(audited, "TEST01", short=True)
    with pytest.raises(SubmissionError, match="TEST01 is a short quick-preset audit"):
        write_submission([audited], division="closed", submitter="Org", outdir=tmp_path / "sub")


def test_open_division_leaves_a_failed_audit_out(
    audited: Path, tmp_path: Path, fixed_host: None
) -> None:
    """The open division writes the audits that passed and leaves a failed one out."""
    _set_verdict(audited, "TEST04", passed=False, reason="too fast")
    write_submission([audited], division="open", submitter="Org", outdir=tmp_path / "sub")
    folder = _scenario_dir(tmp_path / "sub")
    assert (folder / "TEST01" / "verify_accuracy.txt").is_file()
    assert not (folder / "TEST04").exists()


# --- our checker: one test per way of breaking the compliance part ---------------------------------
def test_missing_audit_folder_is_reported_in_closed(tree: Path) -> None:
    """A closed ResNet50 result without TEST04 is reported."""
    shutil.rmtree(_scenario_dir(tree) / "TEST04")
    assert any(
        "TEST04: missing; the closed division needs the TEST04" in p for p in _problems(tree)
    )


def test_missing_audit_folders_are_fine_in_open(tree: Path) -> None:
    """The open division does not need audits: a tree without them has no compliance problem."""
    folder = _scenario_dir(tree)
    shutil.rmtree(folder / "TEST01")
    shutil.rmtree(folder / "TEST04")
    open_tree = tree / "open"
    (tree / "closed").rename(open_tree)
    for description in open_tree.glob("Org/systems/*.json"):
        description.write_text(description.read_text().replace('"closed"', '"open"'))
    assert [p for p in _problems(tree) if "TEST0" in p] == []


def test_failed_performance_verification_is_reported(tree: Path) -> None:
    """A verify_performance.txt without TEST PASS is reported."""
    verify = _scenario_dir(tree) / "TEST04" / "verify_performance.txt"
    verify.write_text(verify.read_text().replace("TEST PASS", "TEST FAIL: Test score invalid"))
    assert any("TEST04/verify_performance.txt: no TEST PASS line" in p for p in _problems(tree))


def test_an_oversized_verify_or_accuracy_file_is_reported_unread(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A verify file, or a TEST01 accuracy comparison file, over the text file limit is one
    finding each, not read."""
    test01 = _scenario_dir(tree) / "TEST01"
    verify = test01 / "verify_accuracy.txt"
    verify.write_text(verify.read_text().replace("TEST PASS", "TEST FAIL"))
    monkeypatch.setattr(check, "TEXT_FILE_LIMIT", verify.stat().st_size)
    (test01 / "accuracy" / "baseline_accuracy.txt").write_text("x" * (verify.stat().st_size + 1))
    name = "TEST01/accuracy/baseline_accuracy.txt"
    assert any(f"{name}: is " in p and "a verification file may hold" in p for p in _problems(tree))
    verify.write_text(verify.read_text() + "x")
    name = "TEST01/verify_accuracy.txt"
    assert any(f"{name}: is " in p and "a verification file may hold" in p for p in _problems(tree))


def test_missing_verify_file_is_reported(tree: Path) -> None:
    """TEST01 without verify_accuracy.txt is reported."""
    (_scenario_dir(tree) / "TEST01" / "verify_accuracy.txt").unlink()
    assert any("TEST01/verify_accuracy.txt: missing" in p for p in _problems(tree))


def test_failed_payload_check_needs_the_accuracy_comparison(tree: Path) -> None:
    """TEST01 whose payloads differ needs baseline and compliance accuracy files."""
    verify = _scenario_dir(tree) / "TEST01" / "verify_accuracy.txt"
    verify.write_text(verify.read_text().replace("TEST PASS", "TEST FAIL"))
    problems = _problems(tree)
    assert any("TEST01/accuracy/baseline_accuracy.txt: missing" in p for p in problems)
    assert any("TEST01/accuracy/compliance_accuracy.txt: missing" in p for p in problems)


def test_accuracy_comparison_beyond_the_delta_is_reported(tree: Path) -> None:
    """Baseline and audit accuracy 2% apart exceed ResNet50's 1% delta."""
    test01 = _scenario_dir(tree) / "TEST01"
    verify = test01 / "verify_accuracy.txt"
    verify.write_text(verify.read_text().replace("TEST PASS", "TEST FAIL"))
    (test01 / "accuracy" / "baseline_accuracy.txt").write_text(
        "accuracy=76.000%, good=228, total=300\n"
    )
    (test01 / "accuracy" / "compliance_accuracy.txt").write_text(
        "accuracy=77.550%, good=233, total=300\n"
    )
    assert any("differs from the accuracy run's by 1.999%" in p for p in _problems(tree))


def test_accuracy_comparison_within_the_delta_passes(tree: Path) -> None:
    """Baseline and audit accuracy 0.5% apart are within the delta: no compliance problem."""
    test01 = _scenario_dir(tree) / "TEST01"
    verify = test01 / "verify_accuracy.txt"
    verify.write_text(verify.read_text().replace("TEST PASS", "TEST FAIL"))
    (test01 / "accuracy" / "baseline_accuracy.txt").write_text(
        "accuracy=76.000%, good=228, total=300\n"
    )
    (test01 / "accuracy" / "compliance_accuracy.txt").write_text(
        "accuracy=76.380%, good=229, total=300\n"
    )
    assert [p for p in _problems(tree) if "TEST0" in p] == []


def test_log_without_the_audit_settings_is_reported(tree: Path) -> None:
    """A TEST04 folder holding the performance run's log (no audit.config read) is reported."""
    folder = _scenario_dir(tree)
    shutil.copyfile(
        folder / "performance" / "run_1" / "mlperf_log_detail.txt",
        folder / "TEST04" / "performance" / "run_1" / "mlperf_log_detail.txt",
    )
    problems = _problems(tree)
    assert any(
        "not a TEST04 audit log: LoadGen did not log that it read an audit.config" in p
        for p in problems
    )
    assert any(
        "not a TEST04 audit log: effective_performance_issue_same is False" in p for p in problems
    )


def test_missing_audit_logs_are_reported(tree: Path) -> None:
    """TEST01 without performance/run_1 is reported."""
    shutil.rmtree(_scenario_dir(tree) / "TEST01" / "performance")
    assert any("TEST01/performance/run_1: missing" in p for p in _problems(tree))
