"""Compliance audits in our code: the audit.config, the reference scripts' comparisons, and the
verdict with its verify files, on hand-made LoadGen logs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pytest

from mlperf_mig.errors import SettingsError
from mlperf_mig.harness.compliance import (
    AuditVerdict,
    audit_config_text,
    compare_payloads,
    compare_performance,
    verify_audit,
)
from mlperf_mig.harness.task import InstanceTask
from mlperf_mig.workloads.resnet50 import RESNET50

AUDIT_WARNING = (
    "Found Audit Config file (audit.config). Overriding TestSettings from audit.config file."
)
TEST04_SETTINGS = {
    "effective_performance_issue_unique": False,
    "effective_performance_issue_same": True,
    "effective_performance_issue_same_index": 3,
}
TEST01_SETTINGS = {
    "effective_accuracy_log_rng_seed": 720381539243781796,
    "effective_accuracy_log_sampling_target": 4096,
}


def _write_detail(folder: Path, records: dict[str, Any], *, audit: bool = False) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    if audit:
        metadata = {"is_error": False, "is_warning": True}
        lines.append(
            {"key": "warning_generic_message", "value": AUDIT_WARNING, "metadata": metadata}
        )
    lines += [
        {"key": k, "value": v, "metadata": {"is_error": False, "is_warning": False}}
        for k, v in records.items()
    ]
    text = "".join(f":::MLLOG {json.dumps(line)}\n" for line in lines)
    (folder / "mlperf_log_detail.txt").write_text(text)


def _write_accuracy(folder: Path, entries: list[tuple[int, int]]) -> None:
    """An accuracy log of ResNet50-style int32 class payloads."""
    folder.mkdir(parents=True, exist_ok=True)
    records = [
        {"seq_id": n, "qsl_idx": index, "data": np.int32(value).tobytes().hex().upper()}
        for n, (index, value) in enumerate(entries)
    ]
    (folder / "mlperf_log_accuracy.json").write_text(json.dumps(records))


def _offline(rate: float, validity: str = "INVALID") -> dict[str, Any]:
    return {"result_samples_per_second": rate, "result_validity": validity}


def _instance(
    tmp_path: Path,
    audit: str,
    *,
    test_rate: float,
    audit_entries: list[tuple[int, int]] | None = None,
) -> Path:
    """An instance folder with a performance run at 100 samples/s, an accuracy run answering
    class index % 10, and the audit's logs."""
    _write_detail(tmp_path / "performance", _offline(100.0))
    _write_accuracy(tmp_path / "accuracy", [(i, i % 10) for i in range(8)])
    settings = TEST01_SETTINGS if audit == "TEST01" else TEST04_SETTINGS
    _write_detail(tmp_path / audit, {**_offline(test_rate), **settings}, audit=True)
    if audit == "TEST01":
        _write_accuracy(tmp_path / audit, audit_entries or [(i, i % 10) for i in (1, 3, 5)])
    return tmp_path


@attrs.frozen
class LabelledSource:
    """A real-data stand-in for the metric fallback: labels of eight samples."""

    labels: np.ndarray
    synthetic: bool = False


# --- the audit.config and the required audits ----------------------------------------------------
def test_audit_config_holds_the_reference_values() -> None:
    """TEST01 and TEST04 write the compliance/ audit.config values, for every model and scenario,
    after one comment line (which LoadGen skips) naming what wrote the file."""
    assert audit_config_text("TEST01") == (
        "# written by mlperf-mig for TEST01: it removes this file when the test ends\n"
        "*.*.mode = 2\n*.*.accuracy_log_rng_seed = 720381539243781796\n"
        "*.*.accuracy_log_sampling_target = 4096\n"
    )
    assert audit_config_text("TEST04") == (
        "# written by mlperf-mig for TEST04: it removes this file when the test ends\n"
        "*.*.mode = 2\n*.*.performance_issue_unique = 0\n*.*.performance_issue_same = 1\n"
        "*.*.performance_issue_same_index = 3\n"
    )


def test_payloads_compared_by_sample() -> None:
    """Each audit record is compared with the accuracy run's answer for its sample; samples the
    accuracy run did not score are not matched."""
    accuracy = [(0, b"a"), (1, b"b"), (2, b"c")]
    sampled, matched, differing = compare_payloads(accuracy, [(1, b"b"), (2, b"X"), (7, b"z")])
    assert (sampled, matched, differing) == (3, 2, [2])


@pytest.mark.parametrize(("rate", "passed"), [(111.0, False), (109.0, True), (50.0, True)])
def test_test04_fails_only_when_more_than_ten_percent_faster(rate: float, passed: bool) -> None:
    """TEST04 passes unless the audit is more than 10% faster than the performance run."""
    scores = compare_performance("TEST04", _offline(100.0), _offline(rate), "Offline", short=True)
    assert not isinstance(scores, str)
    assert scores.passed is passed


@pytest.mark.parametrize(("rate", "passed"), [(89.0, False), (95.0, True), (111.0, False)])
def test_test01_performance_within_ten_percent_either_way(rate: float, passed: bool) -> None:
    """TEST01's performance must be within 10% of the performance run's, either way."""
    scores = compare_performance("TEST01", _offline(100.0), _offline(rate), "Offline", short=True)
    assert not isinstance(scores, str)
    assert scores.passed is passed


def test_test04_single_stream_compares_inverse_latency_with_a_wider_band() -> None:
    """SingleStream TEST04 scores 1e9 / latency; 15% faster passes the 20% stream band."""
    reference = {"early_stopping_latency_ss": 1_000_000}
    test = {"early_stopping_latency_ss": 870_000}
    scores = compare_performance("TEST04", reference, test, "SingleStream", short=True)
    assert not isinstance(scores, str)
    assert (scores.reference, scores.band, scores.passed) == (1000.0, 0.20, True)


def test_server_target_latency_must_match() -> None:
    """A Server audit with another target latency than its performance run cannot be compared."""
    reference = {
        "result_completed_samples_per_sec": 10.0,
        "effective_target_latency_ns": 15_000_000,
    }
    test = {"result_completed_samples_per_sec": 10.0, "effective_target_latency_ns": 10_000_000}
    reason = compare_performance("TEST04", reference, test, "Server", short=True)
    assert reason == "the Server target latency of the audit differs from the performance run's"


def test_full_length_audit_needs_valid_results() -> None:
    """At the official duration (not short), an INVALID audit fails as the reference script's."""
    reason = compare_performance(
        "TEST04", _offline(100.0, "VALID"), _offline(100.0), "Offline", short=False
    )
    assert reason == "the audit is INVALID (the reference script refuses invalid results)"


# --- the verdict -------------------------------------------------------------------------------------
def test_test04_verdict_and_verify_file(tmp_path: Path) -> None:
    """A TEST04 run 40% faster fails and its verify_performance.txt says TEST FAIL with the scores."""
    verdict = verify_audit(
        "TEST04",
        _instance(tmp_path, "TEST04", test_rate=140.0),
        benchmark=RESNET50,
        loadgen_scenario="Offline",
        short=True,
    )
    assert not verdict.passed
    assert "+40.0% faster than the performance run" in verdict.reason
    text = (tmp_path / "TEST04" / "verify_performance.txt").read_text()
    assert "reference score = 100.0\ntest score = 140.0\nTEST FAIL:" in text
    assert "TEST PASS" not in text


def test_test01_verdict_with_matching_payloads(tmp_path: Path) -> None:
    """Matching payloads and a close score pass TEST01: both verify files say TEST PASS."""
    folder = _instance(tmp_path, "TEST01", test_rate=98.0)
    verdict = verify_audit(
        "TEST01", folder, benchmark=RESNET50, loadgen_scenario="Offline", short=True
    )
    assert verdict.passed and (verdict.sampled, verdict.matched, verdict.mismatched) == (3, 3, 0)
    assert "TEST PASS" in (folder / "TEST01" / "verify_performance.txt").read_text().splitlines()
    assert "TEST PASS" in (folder / "TEST01" / "verify_accuracy.txt").read_text().splitlines()


def test_test01_differing_payloads_fall_back_to_the_metric(tmp_path: Path) -> None:
    """Payloads that differ but score the same on the sampled set pass; verify_accuracy.txt says
    TEST FAIL (as the reference does) and the verdict carries both accuracies."""
    labels = np.array([i % 10 for i in range(8)])
    labels[3] = 9  # sample 3: neither the accuracy run's class 3 nor the audit's 7 is right
    folder = _instance(tmp_path, "TEST01", test_rate=100.0, audit_entries=[(1, 1), (3, 7), (5, 5)])
    verdict = verify_audit(
        "TEST01", folder, benchmark=RESNET50, loadgen_scenario="Offline", short=True,
        open_source=lambda: LabelledSource(labels=labels),
    )  # fmt: skip
    assert verdict.passed and verdict.mismatched == 1
    assert verdict.baseline_accuracy is not None and verdict.compliance_accuracy is not None
    assert verdict.baseline_accuracy.value == verdict.compliance_accuracy.value
    lines = (folder / "TEST01" / "verify_accuracy.txt").read_text().splitlines()
    assert "TEST PASS" not in lines


def test_test01_differing_payloads_on_synthetic_data_fail(tmp_path: Path) -> None:
    """Without ground truth the metric cannot be compared: differing payloads fail TEST01."""
    folder = _instance(tmp_path, "TEST01", test_rate=100.0, audit_entries=[(1, 2)])
    verdict = verify_audit(
        "TEST01", folder, benchmark=RESNET50, loadgen_scenario="Offline", short=True,
        open_source=lambda: LabelledSource(labels=np.zeros(8, dtype=int), synthetic=True),
    )  # fmt: skip
    assert not verdict.passed
    assert "synthetic data has no accuracy metric" in verdict.reason


def test_audit_log_without_the_audit_settings_fails(tmp_path: Path) -> None:
    """A log that shows no audit.config was read fails the audit, saying so."""
    folder = _instance(tmp_path, "TEST04", test_rate=100.0)
    _write_detail(folder / "TEST04", {**_offline(100.0), **TEST04_SETTINGS})
    verdict = verify_audit(
        "TEST04", folder, benchmark=RESNET50, loadgen_scenario="Offline", short=True
    )
    assert not verdict.passed
    assert "LoadGen did not log that it read an audit.config" in verdict.reason


def test_missing_audit_log_is_a_failed_verdict(tmp_path: Path) -> None:
    """An audit that left no log is a failed verdict, not an exception."""
    _write_detail(tmp_path / "performance", _offline(100.0))
    verdict = verify_audit(
        "TEST04", tmp_path, benchmark=RESNET50, loadgen_scenario="Offline", short=True
    )
    assert not verdict.passed and "cannot read LoadGen detail log" in verdict.reason


def test_verdict_round_trips_through_a_dict(tmp_path: Path) -> None:
    """to_dict / from_dict keep every field, the accuracy reports included."""
    labels = np.array([i % 10 for i in range(8)])
    folder = _instance(tmp_path, "TEST01", test_rate=100.0, audit_entries=[(1, 2)])
    verdict = verify_audit(
        "TEST01", folder, benchmark=RESNET50, loadgen_scenario="Offline", short=True,
        open_source=lambda: LabelledSource(labels=labels),
    )  # fmt: skip
    assert AuditVerdict.from_dict(json.loads(json.dumps(verdict.to_dict()))) == verdict


# --- the audit task ------------------------------------------------------------------------------
def test_audit_task_logs_into_its_own_folder(tmp_path: Path) -> None:
    """An audit task is a performance test whose logs go to <outdir>/<audit>/."""
    task = InstanceTask(
        benchmark="resnet50", loadgen_scenario="Offline", outdir=tmp_path, audit="TEST04"
    )
    assert task.log_dir == tmp_path / "TEST04"


def test_unknown_audit_is_refused(tmp_path: Path) -> None:
    """An audit name other than TEST01 and TEST04 is refused, naming the known ones."""
    with pytest.raises(SettingsError, match="audit 'TEST05' is not one of TEST01, TEST04"):
        InstanceTask(
            benchmark="resnet50", loadgen_scenario="Offline", outdir=tmp_path, audit="TEST05"
        )


def test_audit_in_accuracy_mode_is_refused(tmp_path: Path) -> None:
    """An audit is a performance-mode test: asking for it in accuracy mode is refused."""
    with pytest.raises(SettingsError, match="audit TEST01 is a performance-mode test"):
        InstanceTask(
            benchmark="resnet50", loadgen_scenario="Offline", outdir=tmp_path, mode="accuracy",
            audit="TEST01",
        )  # fmt: skip


# --- a leftover audit.config and an earlier verdict, read back from the folder ------------------
def test_own_audit_config_is_recognised_by_its_exact_text() -> None:
    """Our audit.config (with the marker line, or without it as before) names its audit; the
    same values with one more line, or another comment, are not ours."""
    from mlperf_mig.harness.compliance import own_audit_config

    text = audit_config_text("TEST04")
    assert own_audit_config(text) == "TEST04"
    assert own_audit_config(text.split("\n", 1)[1]) == "TEST04"
    assert own_audit_config(text + "*.*.min_duration = 1\n") is None
    assert own_audit_config("# mine\n" + text.split("\n", 1)[1]) is None


@pytest.mark.parametrize(
    ("accuracy", "passing"),
    [("TEST PASS", True), ("TEST FAIL (payloads differ; the accuracy on the sampled set agrees)", True),
     ("TEST FAIL: payloads differ on 3 of 3 sampled samples", False)],
)  # fmt: skip
def test_recorded_pass_reads_both_verify_files(
    tmp_path: Path, accuracy: str, passing: bool
) -> None:
    """A TEST01 folder passes when verify_performance.txt says TEST PASS and verify_accuracy.txt
    says TEST PASS or that the accuracy on the sampled set agrees."""
    from mlperf_mig.harness.compliance import recorded_pass

    (tmp_path / "verify_performance.txt").write_text("Verifying performance.\nTEST PASS\n")
    (tmp_path / "verify_accuracy.txt").write_text(f"Verifying accuracy.\n{accuracy}\n")
    assert recorded_pass(tmp_path, "TEST01") is passing


def test_recorded_pass_refuses_a_linked_verify_file(tmp_path: Path) -> None:
    """A verify file that is a symbolic link is refused in one line, not followed."""
    from mlperf_mig.harness.compliance import recorded_pass

    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("TEST PASS\n")
    (tmp_path / "TEST04").mkdir()
    (tmp_path / "TEST04" / "verify_performance.txt").symlink_to(elsewhere)
    with pytest.raises(
        SettingsError,
        match=r"is a symbolic link \(nothing read back is followed\), not the verify file",
    ):
        recorded_pass(tmp_path / "TEST04", "TEST04")


# --- noise: inconclusive short audits ---------------------------------------------------------------
def test_short_audit_with_a_spread_above_the_band_is_inconclusive(tmp_path: Path) -> None:
    """A short TEST04 30% faster on a machine whose measured spread is 25% is inconclusive, not
    FAIL (the noise may explain it), and says the spread."""
    folder = _instance(tmp_path, "TEST04", test_rate=130.0)
    verdict = verify_audit(
        "TEST04", folder, benchmark=RESNET50, loadgen_scenario="Offline", short=True, spread=0.25
    )
    assert verdict.inconclusive and not verdict.passed
    assert (
        verdict.summary().startswith("TEST04 inconclusive (short):")
        and "25.0%" in verdict.summary()
    )
    text = (folder / "TEST04" / "verify_performance.txt").read_text()
    assert "TEST INCONCLUSIVE:" in text and "TEST PASS" not in text


def test_short_audit_far_beyond_the_noise_fails(tmp_path: Path) -> None:
    """A short TEST04 five times faster (a cache) fails whatever the measured spread of 25%:
    no noise explains it."""
    folder = _instance(tmp_path, "TEST04", test_rate=500.0)
    verdict = verify_audit(
        "TEST04", folder, benchmark=RESNET50, loadgen_scenario="Offline", short=True, spread=0.25
    )
    assert not verdict.passed and not verdict.inconclusive
    assert "TEST FAIL" in (folder / "TEST04" / "verify_performance.txt").read_text()


def test_short_audit_with_a_small_spread_keeps_its_verdict(tmp_path: Path) -> None:
    """A spread within the band leaves the 40%-faster TEST04 a FAIL."""
    folder = _instance(tmp_path, "TEST04", test_rate=140.0)
    verdict = verify_audit(
        "TEST04", folder, benchmark=RESNET50, loadgen_scenario="Offline", short=True, spread=0.03
    )
    assert not verdict.passed and not verdict.inconclusive


def test_full_length_audit_keeps_the_mlcommons_rule_whatever_the_spread(tmp_path: Path) -> None:
    """A full-length TEST04 40% faster fails even with a large measured spread."""
    _write_detail(tmp_path / "performance", _offline(100.0, "VALID"))
    _write_detail(tmp_path / "TEST04", {**_offline(140.0, "VALID"), **TEST04_SETTINGS}, audit=True)
    verdict = verify_audit(
        "TEST04",
        tmp_path,
        benchmark=RESNET50,
        loadgen_scenario="Offline",
        short=False,
        spread=0.5,
    )
    assert not verdict.passed and not verdict.inconclusive


def test_noise_does_not_hide_a_test01_payload_failure(tmp_path: Path) -> None:
    """A TEST01 whose payloads differ on synthetic data fails even when the spread makes its score inconclusive."""
    folder = _instance(tmp_path, "TEST01", test_rate=150.0, audit_entries=[(1, 2), (3, 3), (5, 5)])
    verdict = verify_audit(
        "TEST01", folder, benchmark=RESNET50, loadgen_scenario="Offline", short=True, spread=0.3
    )
    assert not verdict.passed and not verdict.inconclusive and "payloads differ" in verdict.reason
