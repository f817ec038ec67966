"""Compliance audits (reference/mlperf.md section 5): the audit.config of TEST01 and TEST04, and
their verification in our code, written as the verify_*.txt files the MLCommons checker reads.

An audit is a performance-mode LoadGen test of its own (a fresh process) whose audit.config
LoadGen reads at StartTest (loadgen_test.py writes it into the audit's log folder and removes it
afterwards; one that a killed audit left there is recognised by its exact text, first line a
comment naming mlperf-mig, and replaced by the next test of that audit; any other file there is
refused, never deleted). The audit's logs, user.conf and verify files live in `<instance>/<audit>/`, next to
the instance's `performance/` and `accuracy/` folders it is compared with:
- TEST01 (ResNet50, BERT) logs a sample of the responses of a performance run. Pass: each sampled
  response equals the accuracy run's response for the same sample (compared by SHA-256 of the
  payloads); where some differ, the accuracy metric on the sampled set must agree within 1% (the
  checker's delta for 99% targets); and the audit's score is within 10% of the performance run's.
- TEST04 (ResNet50) issues one sample over and over, which a cache would answer without running
  the model. Pass: the audit is not more than 10% faster than the performance run.
Scores and bands are the reference scripts' (compliance/TEST01/verify_performance.py,
compliance/TEST04/verify_performance.py): 20% for stream scenarios under their latency limits.
A quick-preset audit is short (its Offline query holds seconds of work, like the quick
performance run): its verdict says so, and validity is not asked of its logs.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from mlperf_mig._io import atomic_write_text, read_small_text
from mlperf_mig.errors import DatasetError, SettingsError
from mlperf_mig.harness.accuracy import first_answers, score_entries
from mlperf_mig.harness.logs import parse_detail_log, read_accuracy_log, read_token_log
from mlperf_mig.harness.result import AccuracyReport
from mlperf_mig.harness.task import AUDITS
from mlperf_mig.workloads.samples import SampleSource
from mlperf_mig.workloads.workload import Workload

logger = logging.getLogger(__name__)

AUDIT_CONFIG = "audit.config"
# The first line of the audit.config we write: LoadGen skips '#' lines (its own compliance/
# audit.config files open with them), and a person who finds a leftover learns what wrote it.
AUDIT_CONFIG_MARKER = (
    "# written by mlperf-mig for {audit}: it removes this file when the test ends\n"
)
VERIFY_ACCURACY = "verify_accuracy.txt"
VERIFY_PERFORMANCE = "verify_performance.txt"
AUDIT_FOUND = "Found Audit Config file"  # LoadGen's warning when it read an audit.config
PASS_LINE = "TEST PASS"
# verify_accuracy.txt of a TEST01 whose payloads differ but whose metric agrees (a pass)
ACCURACY_AGREES_LINE = "TEST FAIL (payloads differ; the accuracy on the sampled set agrees)"
BAND = 0.10
STREAM_BAND = 0.20
ACCURACY_DELTA_PERCENT = 1.0  # the checker's delta for 99% accuracy targets (0.1 for 99.9%)

# The audit.config values (compliance/TEST01/<model>/audit.config, compliance/TEST04/audit.config).
# LoadGen applies audit.config lines with model "*" only, so every key is `*.*.key`.
AUDIT_VALUES: dict[str, dict[str, int]] = {
    "TEST01": {
        "mode": 2,
        "accuracy_log_rng_seed": 720381539243781796,
        "accuracy_log_sampling_target": 4096,
    },
    "TEST04": {
        "mode": 2,
        "performance_issue_unique": 0,
        "performance_issue_same": 1,
        "performance_issue_same_index": 3,
    },
    # compliance/TEST06/audit.config: 100 sampled responses of a performance run, no equal issue
    "TEST06": {
        "mode": 2,
        "accuracy_log_rng_seed": 720381539243781796,
        "accuracy_log_sampling_target": 100,
        "min_query_count": 100,
        "min_duration": 0,
        "sample_concatenate_permutation": 0,
    },
}
# What an audit's detail log must show it ran with (its `effective_*` records).
AUDIT_EFFECTIVE: dict[str, dict[str, Any]] = {
    "TEST01": {"accuracy_log_rng_seed": 720381539243781796, "accuracy_log_sampling_target": 4096},
    "TEST04": {
        "performance_issue_unique": False,
        "performance_issue_same": True,
        "performance_issue_same_index": 3,
    },
    "TEST06": {"accuracy_log_rng_seed": 720381539243781796, "accuracy_log_sampling_target": 100},
}
TEST06_COMPLETE = "TEST06 verification complete"  # what the checker reads in verify_accuracy.txt
# The score of each LoadGen scenario in the reference scripts (a latency for the stream ones).
SCORE_KEYS = {
    "Offline": "result_samples_per_second",
    "Server": "result_completed_samples_per_sec",
    "SingleStream": "early_stopping_latency_ss",
    "MultiStream": "early_stopping_latency_ms",
}
# Stream scenarios get the wider band at or under these (TEST01: latency in ns; TEST04: its
# summary's 1e9 / latency), as in the reference scripts.
STREAM_LIMITS = {"SingleStream": 200_000, "MultiStream": 1_600_000}


def audit_config_text(audit: str) -> str:
    """The audit.config of `audit`, in LoadGen's `model.Scenario.key = value` format, after the
    comment line that marks it as ours."""
    return AUDIT_CONFIG_MARKER.format(audit=audit) + _audit_values_text(audit)


def _audit_values_text(audit: str) -> str:
    """The value lines of `audit`'s audit.config (the whole file before the marker line)."""
    return "".join(f"*.*.{key} = {value}\n" for key, value in AUDIT_VALUES[audit].items())


def own_audit_config(text: str) -> str | None:
    """The audit whose audit.config we wrote is exactly `text` (with the marker line, or
    without it as releases before the marker wrote it); None for any other text."""
    for audit in AUDIT_VALUES:
        if text in (audit_config_text(audit), _audit_values_text(audit)):
            return audit
    return None


def clear_leftover_audit_config(path: Path, audit: str | None) -> None:
    """Before a test whose LoadGen reads its audit.config from `path` (`audit`: the audit it
    runs, None for a performance or accuracy test): remove the audit.config that a killed test
    of the same audit left there, which this test writes again; refuse anything else at
    `path` (a user's file, a link, our file for another test), which LoadGen would apply
    silently and which we did not write for this test, with one line. Nothing else is removed."""
    if not os.path.lexists(path):
        return
    why = _not_ours_for(path, audit)
    if why is None:
        logger.warning(
            "removing %s: the %s audit.config mlperf-mig wrote for a test that was killed before "
            "it ended; this test writes its own", path, audit,
        )  # fmt: skip
        path.unlink()
        return
    raise SettingsError(
        f"{str(path)!r} exists ({why}) and LoadGen would apply it, silently changing the "
        f"settings of this {_test_name(audit)}; it is not removed, as mlperf-mig did not write it "
        "for this test: move it away (mlperf-mig writes and removes its audits' audit.config itself)"
    )


def _not_ours_for(path: Path, audit: str | None) -> str | None:
    """Why the file at `path` is not the audit.config a killed test of `audit` left (None: it
    is)."""
    try:
        text = read_small_text(path)
    except SettingsError as exc:
        return f"it is {exc}"
    owner = own_audit_config(text)
    if owner is None:
        return "not an audit.config mlperf-mig writes"
    if owner != audit:
        return f"mlperf-mig's {owner} audit.config, but this folder is the {_test_name(audit)}'s"
    return None


def _test_name(audit: str | None) -> str:
    return f"{audit} audit" if audit is not None else "performance or accuracy test"


def recorded_pass(folder: Path, audit: str) -> bool:
    """Whether the audit folder `folder` holds a passing verdict of `audit`: its
    verify_performance.txt says TEST PASS and, for TEST01, its verify_accuracy.txt says TEST
    PASS or that the accuracy on the sampled set agrees. Read without following links; a
    verify file that cannot be read as text is refused with one line."""
    needed: dict[str, tuple[str, ...]] = {VERIFY_PERFORMANCE: (PASS_LINE,)}
    if audit == "TEST06":
        needed = {VERIFY_ACCURACY: (TEST06_COMPLETE,)}
    if audit == "TEST01":
        needed[VERIFY_ACCURACY] = (PASS_LINE, ACCURACY_AGREES_LINE)
    for name, lines in needed.items():
        path = folder / name
        if not os.path.lexists(path):
            return False
        try:
            text = read_small_text(path)
        except SettingsError as exc:
            raise SettingsError(
                f"{str(path)!r} is {exc}, not the verify file of an audit; move it away"
            ) from None
        if not any(line in lines for line in text.splitlines()):
            return False
    return True


def audit_setting_problems(audit: str, records: Mapping[str, Any]) -> list[str]:
    """Why a detail log does not show `audit`'s settings (empty when it does)."""
    problems = []
    if not any(AUDIT_FOUND in w for w in records.get("warnings", ())):
        problems.append("LoadGen did not log that it read an audit.config")
    for key, expected in AUDIT_EFFECTIVE[audit].items():
        value = records.get(f"effective_{key}")
        if value != expected:
            problems.append(f"effective_{key} is {value!r}, expected {expected!r}")
    return problems


@attrs.frozen(kw_only=True)
class AuditVerdict:
    """One audit's verdict and the numbers it rests on (plain data, to_dict / from_dict).

    `reference_score` / `test_score`: the performance run's and the audit's score in
    `score_unit`; `band`: the allowed relative difference. TEST01 also has the payload comparison
    (`sampled` responses in the audit log, `matched` found in the accuracy run, `mismatched` of
    those different) and, where payloads differ, the accuracy metric of both on the sampled set.
    `short`: a quick-preset audit, shorter than the official 10-minute run.
    """

    audit: str
    passed: bool
    reason: str  # why it failed, one line; "" when it passed
    short: bool
    log_dir: str
    reference_score: float | None = None
    test_score: float | None = None
    score_unit: str = ""
    band: float = BAND
    performance_passed: bool | None = None
    accuracy_passed: bool | None = None  # TEST01 only
    sampled: int = 0
    matched: int = 0
    mismatched: int = 0
    baseline_accuracy: AccuracyReport | None = None
    compliance_accuracy: AccuracyReport | None = None
    # a short audit whose measured noise (`spread`: how far two measurements that should agree
    # differ, runner/audits.py) exceeds its band: neither PASS nor FAIL, and it does not fail
    # the run; `passed` is then False, so that no submission counts it as a pass
    inconclusive: bool = False
    spread: float | None = None
    # TEST06: each check's verdict ("first token", "eos", "sample length"; None: skipped)
    token_checks: tuple[tuple[str, bool | None], ...] = attrs.field(
        default=(), converter=lambda pairs: tuple((str(k), v) for k, v in pairs)
    )

    def to_dict(self) -> dict[str, Any]:
        data = attrs.asdict(self, recurse=False)
        for name in ("baseline_accuracy", "compliance_accuracy"):
            report = getattr(self, name)
            data[name] = None if report is None else report.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AuditVerdict:
        fields = dict(data)
        for name in ("baseline_accuracy", "compliance_accuracy"):
            if fields.get(name) is not None:
                fields[name] = AccuracyReport.from_dict(fields[name])
        return cls(**fields)

    @property
    def change(self) -> float | None:
        """The audit's score against the performance run's (0.05 = 5% higher)."""
        if not self.reference_score or self.test_score is None:
            return None
        return self.test_score / self.reference_score - 1.0

    def summary(self) -> str:
        """One cell: 'TEST04 PASS (+1.2%)', 'TEST01 FAIL: <reason>'; '(short)' for quick audits."""
        short = " (short)" if self.short else ""
        if self.inconclusive:
            return f"{self.audit} inconclusive{short}: {self.reason}"
        if not self.passed:
            return f"{self.audit} FAIL{short}: {self.reason}"
        change = self.change
        return f"{self.audit} PASS{short}" + ("" if change is None else f" ({change:+.1%})")

    def performance_text(self) -> str:
        """verify_performance.txt, in the reference script's words (the checker reads TEST PASS)."""
        lines = ["Verifying performance."]
        if self.short:
            lines.append("Note: a short audit of the quick preset, not the official 10-minute run")
        if self.reference_score is not None and self.test_score is not None:
            lines += [
                f"reference score = {self.reference_score}",
                f"test score = {self.test_score}",
            ]
        if self.spread is not None:
            lines.append(f"measured spread = {self.spread:.4f} (band {self.band})")
        if self.inconclusive:
            lines.append(f"TEST INCONCLUSIVE: {self.reason}")
        elif self.performance_passed:
            lines.append(PASS_LINE)
        else:
            lines.append(f"TEST FAIL: {self._performance_reason()}")
        return "\n".join(lines) + "\n"

    @property
    def payloads_match(self) -> bool:
        """TEST01: every sampled response found in the accuracy run has its payload."""
        return self.matched > 0 and self.mismatched == 0

    def accuracy_text(self) -> str:
        """verify_accuracy.txt of TEST01: `TEST PASS` only when the payloads match, as the
        reference script writes it; where they differ and the metrics agree, the checker reads
        the verdict from accuracy/baseline_accuracy.txt and compliance_accuracy.txt instead."""
        lines = [
            "Verifying accuracy.",
            f"num_perf_log_entries = {self.sampled}",
            f"num_perf_log_qsl_idx_match = {self.matched}",
            f"num_perf_log_data_mismatch = {self.mismatched}",
            f"num_missing_qsl_idxs = {self.sampled - self.matched}",
        ]
        if self.baseline_accuracy is not None and self.compliance_accuracy is not None:
            lines.append(
                f"payloads differ: accuracy on the sampled set {self.baseline_accuracy.summary()} "
                f"(accuracy run) vs {self.compliance_accuracy.summary()} (audit)"
            )
        if self.payloads_match:
            lines.append(PASS_LINE)
        elif self.accuracy_passed:
            lines.append(ACCURACY_AGREES_LINE)
        else:
            lines.append(f"TEST FAIL: {self.reason}")
        return "\n".join(lines) + "\n"

    def test06_text(self) -> str:
        """verify_accuracy.txt of TEST06, in compliance/TEST06/run_verification.py's words."""

        def word(value: bool | None) -> str:
            return "Skipped" if value is None else str(value)

        checks = dict(self.token_checks)
        lines = [
            f"First token check pass: {word(checks.get('first token'))}",
            f"EOS check pass: {word(checks.get('eos'))}",
            f"Sample length check pass: {word(checks.get('sample length'))}",
        ]
        if self.passed:
            lines.append(TEST06_COMPLETE)
        else:
            lines += ["TEST06 verification failed", f"reason: {self.reason}"]
        return "\n".join(lines) + "\n"

    def _performance_reason(self) -> str:
        return self.reason if self.performance_passed is False else "not checked"

    def write_files(self, folder: str | os.PathLike[str]) -> None:
        """Write verify_performance.txt (and TEST01's verify_accuracy.txt) into `folder`;
        TEST06 has only its verify_accuracy.txt."""
        folder = Path(folder)
        if self.audit == "TEST06":
            atomic_write_text(folder / VERIFY_ACCURACY, self.test06_text())
            return
        atomic_write_text(folder / VERIFY_PERFORMANCE, self.performance_text())
        if self.audit == "TEST01":
            atomic_write_text(folder / VERIFY_ACCURACY, self.accuracy_text())


def failed_verdict(
    audit: str, log_dir: str | os.PathLike[str], reason: str, *, short: bool
) -> AuditVerdict:
    """The verdict of an audit that did not produce what it is judged by (a crash, no logs)."""
    return AuditVerdict(
        audit=audit, passed=False, reason=reason, short=short, log_dir=os.fspath(log_dir),
        performance_passed=False, accuracy_passed=False if audit == "TEST01" else None,
    )  # fmt: skip


# --- performance -------------------------------------------------------------------------------
@attrs.frozen
class PerformanceComparison:
    """The reference script's comparison: both scores in `unit`, the band, the verdict."""

    reference: float
    test: float
    unit: str
    band: float
    passed: bool
    reason: str


def compare_performance(
    audit: str,
    reference: Mapping[str, Any],
    test: Mapping[str, Any],
    loadgen_scenario: str,
    *,
    short: bool,
) -> PerformanceComparison | str:
    """The reference scripts' comparison of the audit's detail-log records with the performance
    run's, or why it cannot be made."""
    key = SCORE_KEYS[loadgen_scenario]
    if not short:
        for name, records in (("performance run", reference), ("audit", test)):
            if records.get("result_validity") != "VALID":
                return f"the {name} is INVALID (the reference script refuses invalid results)"
    try:
        ref, value = float(reference[key]), float(test[key])
    except (KeyError, TypeError, ValueError):
        return f"no {key} in the performance run's or the audit's detail log"
    if loadgen_scenario == "Server" and reference.get("effective_target_latency_ns") != test.get(
        "effective_target_latency_ns"
    ):
        return "the Server target latency of the audit differs from the performance run's"
    latency = loadgen_scenario in STREAM_LIMITS
    if audit == "TEST04" and latency:
        ref, value = 1e9 / ref, 1e9 / value  # TEST04 scores a latency as its inverse
        latency = False
    limit = STREAM_LIMITS.get(loadgen_scenario)
    band = STREAM_BAND if limit is not None and ref <= limit else BAND
    unit = "ns (latency)" if latency else "samples/s"
    if audit == "TEST04":
        passed = value < ref * (1 + band)
        reason = (
            ""
            if passed
            else (
                f"{value / ref - 1:+.1%} faster than the performance run (at most {band:.0%} allowed): "
                "a repeated sample is answered faster, as a cache would"
            )
        )
    else:
        passed = ref * (1 - band) <= value <= ref * (1 + band)
        reason = (
            ""
            if passed
            else (
                f"score {value / ref - 1:+.1%} off the performance run's (within {band:.0%} allowed)"
            )
        )
    return PerformanceComparison(ref, value, unit, band, passed, reason)


# --- TEST01 accuracy ---------------------------------------------------------------------------
def compare_payloads(
    accuracy_entries: Sequence[tuple[int, bytes]], audit_entries: Sequence[tuple[int, bytes]]
) -> tuple[int, int, list[int]]:
    """(sampled, matched, indices whose payload differs): every audit record against the
    accuracy run's first answer for its sample, byte for byte."""
    expected = first_answers(accuracy_entries)
    matched, differing = 0, []
    for index, data in audit_entries:
        if index not in expected:
            continue
        matched += 1
        if data != expected[index]:
            differing.append(index)
    return len(audit_entries), matched, differing


def _subset(entries: Sequence[tuple[int, bytes]], indices: set[int]) -> list[tuple[int, bytes]]:
    return [(i, d) for i, d in first_answers(entries).items() if i in indices]


def _metric_fallback(
    benchmark: Workload,
    source: SampleSource,
    accuracy_entries: Sequence[tuple[int, bytes]],
    audit_entries: Sequence[tuple[int, bytes]],
    differing: list[int],
    matched: int,
) -> tuple[bool, str, AccuracyReport | None, AccuracyReport | None]:
    """Payloads differ: the accuracy metric of both runs on the sampled set must agree."""
    sampled = {i for i, _ in audit_entries} & {i for i, _ in accuracy_entries}
    baseline = score_entries(
        benchmark, source, _subset(accuracy_entries, sampled), weights_synthetic=False
    )
    audited = score_entries(
        benchmark, source, _subset(audit_entries, sampled), weights_synthetic=False
    )
    what = f"payloads differ on {len(differing)} of {matched} sampled samples"
    if baseline.value is None or audited.value is None:
        return (
            False,
            f"{what}, and synthetic data has no accuracy metric to compare them by",
            None,
            None,
        )
    if not audited.value:
        return False, f"{what}, and the audit's accuracy on them is 0", baseline, audited
    delta = abs(1 - baseline.value / audited.value) * 100
    if delta <= ACCURACY_DELTA_PERCENT:
        return True, "", baseline, audited
    reason = (
        f"{what}; their {baseline.metric} differs by {delta:.2f}% "
        f"(at most {ACCURACY_DELTA_PERCENT}% allowed)"
    )
    return False, reason, baseline, audited


# --- the verdict -------------------------------------------------------------------------------
def verify_audit(
    audit: str,
    instance_dir: str | os.PathLike[str],
    *,
    benchmark: Workload,
    loadgen_scenario: str,
    short: bool,
    open_source: Callable[[], SampleSource] | None = None,
    spread: float | None = None,
    end_ids: Sequence[int] = (),
) -> AuditVerdict:
    """Verify the audit logged in `<instance_dir>/<audit>/` against `<instance_dir>/performance/`
    (and, for TEST01, `<instance_dir>/accuracy/`); write its verify files there and return its
    verdict. `open_source()` gives the samples, opened only when TEST01's payloads differ (their
    accuracy metric is then compared).

    `spread`: the noise a short audit's performance comparison rests on, measured by the runner
    (how far two measurements that should agree differ). Above the band the comparison cannot
    tell the audit from the noise: the verdict is inconclusive, with the spread, instead of PASS
    or FAIL, unless the score is off by more than the band and the spread together, which the
    noise cannot explain (FAIL); a failed TEST01 accuracy check still fails. A full-length audit
    keeps the MLCommons rule whatever the spread."""
    if audit not in AUDITS:
        raise ValueError(f"unknown audit {audit!r}")
    folder = Path(instance_dir)
    log_dir = folder / audit
    try:
        reference = parse_detail_log(folder / "performance")
        test = parse_detail_log(log_dir)
    except DatasetError as exc:
        return failed_verdict(audit, log_dir, str(exc), short=short)
    problems = audit_setting_problems(audit, test)
    if audit == "TEST06" and not problems:
        verdict = verify_test06(log_dir, loadgen_scenario, end_ids=end_ids, short=short)
        verdict.write_files(log_dir)
        return verdict
    if problems:
        verdict = failed_verdict(
            audit, log_dir, "audit settings not in its log: " + "; ".join(problems), short=short
        )
        verdict.write_files(log_dir)
        return verdict
    scores = compare_performance(audit, reference, test, loadgen_scenario, short=short)
    if isinstance(scores, str):
        verdict = failed_verdict(audit, log_dir, scores, short=short)
        verdict.write_files(log_dir)
        return verdict
    fields: dict[str, Any] = {
        "reference_score": scores.reference, "test_score": scores.test, "score_unit": scores.unit,
        "band": scores.band, "performance_passed": scores.passed,
    }  # fmt: skip
    change = scores.test / scores.reference - 1 if scores.reference else 0.0
    # the noise can hide what a short audit shows only as far as it reaches: a score further
    # off than the band and the spread together is the audit's finding whatever the noise
    noisy = (
        short and spread is not None and spread > scores.band
        and abs(change) <= scores.band + spread
    )  # fmt: skip
    reasons = [scores.reason] if scores.reason and not noisy else []
    if audit == "TEST01":
        fields.update(_test01_accuracy(folder, log_dir, benchmark, open_source, reasons))
    inconclusive = noisy and not reasons
    if inconclusive:
        reasons = [
            f"score {change:+.1%} against the performance run, but two measurements that should "
            f"agree differ by {spread:.1%} here (more than the {scores.band:.0%} band): the "
            "machine's noise hides what this short audit could show; rerun on a quieter machine "
            "or with preset='submission'"
        ]
    verdict = AuditVerdict(
        audit=audit, passed=not reasons, reason="; ".join(reasons), short=short, log_dir=str(log_dir),
        inconclusive=inconclusive, spread=spread, **fields,
    )  # fmt: skip
    verdict.write_files(log_dir)
    return verdict


def verify_test06(
    log_dir: Path, loadgen_scenario: str, *, end_ids: Sequence[int], short: bool
) -> AuditVerdict:
    """TEST06 (generative workloads) as compliance/TEST06/run_verification.py checks the audit's
    sampled responses: the logged first token equals the output's first token (every scenario
    but Offline), at most one end token closes an output (`end_ids`: the model's), and
    `token_count` equals the output's length."""
    try:
        entries = read_token_log(log_dir)
    except DatasetError as exc:
        return failed_verdict("TEST06", log_dir, str(exc), short=short)
    stops = set(end_ids)
    first_ok: bool | None = None
    reasons = []
    if loadgen_scenario != "Offline":
        wrong = [e for e in entries if e.first is None or e.first[:1] != e.tokens[:1]]
        first_ok = not wrong
        if wrong:
            reasons.append(f"{len(wrong)} of {len(entries)} first tokens differ from the output's")
    doubled = [
        e for e in entries if len(e.tokens) > 1 and {int(e.tokens[-1]), int(e.tokens[-2])} <= stops
    ]
    if doubled:
        reasons.append(f"{len(doubled)} outputs end with more than one end token")
    short_count = [e for e in entries if e.count != len(e.tokens)]
    if short_count:
        reasons.append(f"{len(short_count)} outputs have a token_count other than their length")
    if not entries:
        reasons.append("the audit logged no responses")
    return AuditVerdict(
        audit="TEST06", passed=not reasons, reason="; ".join(reasons), short=short,
        log_dir=str(log_dir), sampled=len(entries),
        token_checks=(("first token", first_ok), ("eos", not doubled),
                      ("sample length", not short_count)),
    )  # fmt: skip


def _test01_accuracy(
    folder: Path,
    log_dir: Path,
    benchmark: Workload,
    open_source: Callable[[], SampleSource] | None,
    reasons: list[str],
) -> dict[str, Any]:
    """TEST01's payload comparison (and metric fallback); its reason, if any, joins `reasons`."""
    try:
        accuracy_entries = read_accuracy_log(folder / "accuracy")
        audit_entries = read_accuracy_log(log_dir)
    except DatasetError as exc:
        reasons.append(str(exc))
        return {"accuracy_passed": False}
    sampled, matched, differing = compare_payloads(accuracy_entries, audit_entries)
    fields: dict[str, Any] = {"sampled": sampled, "matched": matched, "mismatched": len(differing)}
    if not matched:
        reasons.append(
            f"none of the audit's {sampled} logged samples is in the accuracy run, so nothing "
            "could be compared (run the accuracy test on more samples)"
        )
        return {**fields, "accuracy_passed": False}
    if not differing:
        return {**fields, "accuracy_passed": True}
    if open_source is None:
        reasons.append(f"payloads differ on {len(differing)} of {matched} sampled samples")
        return {**fields, "accuracy_passed": False}
    ok, reason, baseline, audited = _metric_fallback(
        benchmark, open_source(), accuracy_entries, audit_entries, differing, matched
    )
    if reason:
        reasons.append(reason)
    return {
        **fields, "accuracy_passed": ok, "baseline_accuracy": baseline, "compliance_accuracy": audited,
    }  # fmt: skip
