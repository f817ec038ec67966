"""Every rule that compares a number with a bound, just inside, exactly on and just outside it.

The expected verdicts come from the rules' texts: MLCommons' compliance/TEST01 and TEST04
verify_performance.py (within 10% both ways, inclusive; TEST04 strictly less than 10% faster;
20% for stream scenarios whose score is at or under 200,000 / 1,600,000), the submission
checker (accuracy delta <= 1% with its own float arithmetic, min_duration >= 600 s, performance
sample count >= 1024, Server latency target <= 15 ms, Offline >= 24,576 samples per query,
accuracy >= 99% of 76.46, accuracy log <= 10 KiB) and the advisor's constraints (instances at
least / at most, p99 at most, only the profiles allowed). The capacity search's tolerance is in
test_capacity_search.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from mlperf_mig.harness import compliance
from mlperf_mig.harness.result import AccuracyReport
from mlperf_mig.study.advisor import Constraints
from mlperf_mig.submission import accuracy, check, rules
from mlperf_mig.submission.logs import DetailLog
from mlperf_mig.workloads.resnet50 import RESNET50

NUDGE = 1e-9  # a relative step just inside or outside a bound


def _records(scenario: str, score: float, **extra: object) -> dict[str, object]:
    return {"result_validity": "VALID", compliance.SCORE_KEYS[scenario]: score, **extra}


def _verdict(audit: str, scenario: str, reference: float, test: float) -> bool:
    found = compliance.compare_performance(
        audit, _records(scenario, reference), _records(scenario, test), scenario, short=False
    )
    assert not isinstance(found, str), found
    return found.passed


# --- TEST01 performance: within 10% either way, bounds included ---------------------------------
@pytest.mark.parametrize(
    ("test", "passed"),
    [
        (900.0 * (1 - NUDGE), False),
        (900.0, True),  # exactly 10% slower: on the bound
        (900.0 * (1 + NUDGE), True),
        (1100.0 * (1 - NUDGE), True),
        (1100.0, True),  # exactly 10% faster: on the bound
        (1100.0 * (1 + NUDGE), False),
    ],
)
def test_test01_offline_band_is_ten_percent_inclusive(test: float, passed: bool) -> None:
    """TEST01 Offline against 1,000 samples/s: 900 and 1,100 pass, a hair beyond fails."""
    assert _verdict("TEST01", "Offline", 1000.0, test) is passed


@pytest.mark.parametrize(
    ("reference", "test", "passed"),
    [
        (200_000.0, 240_000.0, True),  # at the limit: 20% band, on its upper bound
        (200_000.0, 240_000.0 * (1 + NUDGE), False),
        (200_000.0, 160_000.0, True),
        (200_000.0, 160_000.0 * (1 - NUDGE), False),
        (200_001.0, 200_001.0 * 1.1 * (1 + NUDGE), False),  # past the limit: 10% band
        (200_001.0, 200_001.0 * 1.1 * (1 - NUDGE), True),
    ],
)
def test_test01_single_stream_band_widens_at_the_latency_limit(
    reference: float, test: float, passed: bool
) -> None:
    """SingleStream latency at or under 200,000 ns gets 20%; one ns more gets 10%."""
    assert _verdict("TEST01", "SingleStream", reference, test) is passed


@pytest.mark.parametrize(
    ("reference", "test", "passed"),
    [(1_600_000.0, 1_920_000.0, True), (1_600_001.0, 1_600_001.0 * 1.1 * (1 + NUDGE), False)],
)
def test_test01_multi_stream_limit(reference: float, test: float, passed: bool) -> None:
    """MultiStream: 20% at or under 1,600,000 ns, 10% above."""
    assert _verdict("TEST01", "MultiStream", reference, test) is passed


# --- TEST04: strictly less than 10% faster ------------------------------------------------------
@pytest.mark.parametrize(
    ("test", "passed"),
    [
        (500.0, True),  # slower is no cache
        (1100.0 * (1 - NUDGE), True),
        (1100.0, False),  # exactly 10% faster: the reference's `<` fails it
        (1100.0 * (1 + NUDGE), False),
    ],
)
def test_test04_offline_is_strictly_under_ten_percent_faster(test: float, passed: bool) -> None:
    """TEST04 against 1,000 samples/s: 1,100 fails (strict), a hair under passes."""
    assert _verdict("TEST04", "Offline", 1000.0, test) is passed


@pytest.mark.parametrize(
    ("test_latency", "passed"),
    [(1e9 / 120.0 * (1 + NUDGE), True), (1e9 / 120.0 * (1 - NUDGE), False), (1e9 / 90.0, True)],
)
def test_test04_single_stream_scores_the_inverse_latency(test_latency: float, passed: bool) -> None:
    """A 10 ms latency is 100/s, under the limit, so 20%: 120/s (8.33 ms) is the bound."""
    assert _verdict("TEST04", "SingleStream", 10_000_000.0, test_latency) is passed


# --- TEST01 accuracy: delta <= 1% (the checker's arithmetic) ------------------------------------
def _report(value: float) -> AccuracyReport:
    return AccuracyReport(
        metric="top1", value=value, target=75.0, meaningful=True, passed=True, sample_count=100
    )


@pytest.mark.parametrize(
    ("baseline", "audited", "passed"),
    [
        (99.5, 100.0, True),
        (
            99.0,
            100.0,
            False,
        ),  # exactly 1% by the text, 1.0000000000000009 in float: fails there too
        (99.0000001, 100.0, True),
        (98.99, 100.0, False),
        (100.9, 100.0, True),
        (101.0, 100.0, False),  # exactly 1% the other way: 1.0000000000000009 as well
    ],
)
def test_test01_accuracy_delta(
    monkeypatch: pytest.MonkeyPatch, baseline: float, audited: float, passed: bool
) -> None:
    """|1 - baseline / audited| x 100 <= 1, computed as the checker computes it."""
    reports = iter([_report(baseline), _report(audited)])
    monkeypatch.setattr(compliance, "score_entries", lambda *args, **kwargs: next(reports))
    entries = [(0, b"a")]
    ok, _reason, _b, _a = compliance._metric_fallback(RESNET50, None, entries, entries, [0], 1)
    expected = abs(1 - baseline / audited) * 100 <= compliance.ACCURACY_DELTA_PERCENT
    assert ok is passed is expected


def _fallback_problems(tmp_path: Path, baseline: str, audited: str) -> list[str]:
    folder = tmp_path / "accuracy"
    folder.mkdir()
    (folder / "baseline_accuracy.txt").write_text(f"accuracy={baseline}%, good=1, total=1\n")
    (folder / "compliance_accuracy.txt").write_text(f"accuracy={audited}%, good=1, total=1\n")
    return [m for _, m in check._test01_accuracy_fallback(folder, "resnet") if "differs" in m]


@pytest.mark.parametrize(
    ("baseline", "passed"),
    [("99.500", True), ("99.000", False), ("98.990", False), ("100.900", True)],
)
def test_checker_test01_accuracy_delta(tmp_path: Path, baseline: str, passed: bool) -> None:
    """The checker's own TEST01 delta on baseline/compliance_accuracy.txt, against 100%."""
    assert (not _fallback_problems(tmp_path, baseline, "100.000")) is passed


# --- the checker's bounds on a performance log --------------------------------------------------
def _detail(**changes: object) -> DetailLog:
    values: dict[str, object] = {
        "effective_scenario": "Offline",
        "effective_test_mode": "PerformanceOnly",
        "result_samples_per_second": 100.0,
        "effective_performance_sample_count": 1024,
        "effective_min_duration_ms": 600_000,
        "effective_min_query_count": 1,
        "effective_samples_per_query": 24_576,
        "result_validity": "VALID",
        **{f"effective_{name}": seed for name, seed in rules.SEEDS["v6.1"].items()},
    }
    values.update(changes)
    return DetailLog(path=Path("mlperf_log_detail.txt"), values=values, errors=())


def _problems(**changes: object) -> list[str]:
    return check.performance_problems(
        _detail(**changes),
        model="resnet",
        scenario=str(changes.get("effective_scenario", "Offline")),
        division="closed",
        version="v6.1",
    )


def test_the_base_log_has_no_problem() -> None:
    """The log every bound below is moved from passes as it is."""
    assert _problems() == []


@pytest.mark.parametrize(
    ("key", "inside", "on", "outside", "word"),
    [
        ("effective_min_duration_ms", 600_001, 600_000, 599_999, "min_duration"),
        ("effective_performance_sample_count", 1025, 1024, 1023, "performance_sample_count"),
        ("effective_samples_per_query", 24_577, 24_576, 24_575, "samples per query"),
    ],
)
def test_checker_minimums(key: str, inside: int, on: int, outside: int, word: str) -> None:
    """A minimum passes just above and exactly on it, and is reported one below."""
    assert _problems(**{key: inside}) == [] and _problems(**{key: on}) == []
    assert any(word in p for p in _problems(**{key: outside}))


@pytest.mark.parametrize(
    ("target", "passed"), [(14_999_999, True), (15_000_000, True), (15_000_001, False)]
)
def test_checker_server_latency_bound(target: int, passed: bool) -> None:
    """ResNet50 Server: a target latency at most 15 ms passes."""
    found = _problems(
        effective_scenario="Server",
        effective_target_latency_ns=target,
        early_stopping_met=True,
        result_completed_samples_per_sec=10.0,
        result_scheduled_samples_per_sec=10.0,
    )
    assert (not [p for p in found if "target latency" in p]) is passed


@pytest.mark.parametrize(
    ("value", "passed"),
    [(rules.checker_model("resnet").accuracy_target * (1 + NUDGE), True), (rules.checker_model("resnet").accuracy_target, True),
     (rules.checker_model("resnet").accuracy_target * (1 - NUDGE), False)],
)  # fmt: skip
def test_checker_accuracy_target(value: float, passed: bool) -> None:
    """Closed division: accuracy at 99% of 76.46 or above passes."""
    line = f"accuracy={value!r}%, good=1, total=1"
    problems = check.accuracy_txt_problems([line, f"hash={'0' * 64}"], None, "resnet", "closed")
    assert (not [p for p in problems if "below the target" in p]) is passed


@pytest.mark.parametrize(
    ("size", "whole"), [(10 * 1024 - 1, True), (10 * 1024, True), (10 * 1024 + 1, False)]
)
def test_accuracy_log_is_cut_above_10_kib(size: int, whole: bool) -> None:
    """A log of at most 10 KiB is kept whole; one byte more is truncated."""
    data = b"x" * size
    assert (accuracy.truncate(data) == data) is whole


# --- the advisor's constraints ------------------------------------------------------------------
def _prediction(
    instances: int, p99: float | None = 5.0, profiles: tuple[str, ...] = ("1g.10gb",)
) -> object:
    layout = SimpleNamespace(profiles=[SimpleNamespace(name=name) for name in profiles])
    return SimpleNamespace(instances=instances, worst_p99_ms=p99, layout_obj=layout)


@pytest.mark.parametrize(("instances", "allowed"), [(2, False), (3, True), (4, True)])
def test_min_instances(instances: int, allowed: bool) -> None:
    """min_instances=3: 3 instances are enough."""
    assert Constraints(min_instances=3).allows(_prediction(instances)) is allowed


@pytest.mark.parametrize(("instances", "allowed"), [(2, True), (3, True), (4, False)])
def test_max_instances(instances: int, allowed: bool) -> None:
    """max_instances=3: 3 instances are not too many."""
    assert Constraints(max_instances=3).allows(_prediction(instances)) is allowed


@pytest.mark.parametrize(
    ("p99", "allowed"), [(9.999, True), (10.0, True), (10.001, False), (None, False)]
)
def test_max_p99_ms(p99: float | None, allowed: bool) -> None:
    """max_p99_ms=10: a worst p99 of exactly 10 ms is allowed; an unknown p99 is not."""
    assert Constraints(max_p99_ms=10.0).allows(_prediction(1, p99=p99)) is allowed


@pytest.mark.parametrize(
    ("profiles", "allowed"),
    [
        (("1g.10gb",), True),
        (("2g.20gb", "1g.10gb"), True),
        (("3g.40gb", "1g.10gb"), False),
        (("2g.20gb", "1g.10gb", "1g.10gb", "3g.40gb"), False),
    ],
)
def test_profiles_allowed(profiles: tuple[str, ...], allowed: bool) -> None:
    """profiles_allowed=2g,1g: a layout of only those (or fewer kinds) passes; one other kind,
    wherever it stands in the layout, does not."""
    constraint = Constraints(profiles_allowed=("2g.20gb", "1g.10gb"))
    assert constraint.allows(_prediction(len(profiles), profiles=profiles)) is allowed


# --- a short audit's noise against its band (inconclusive) --------------------------------------
def _mllog(folder: Path, records: dict[str, object], *, audit: bool = False) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    if audit:  # LoadGen's warning that it read an audit.config
        lines.append({"key": "warning_generic_message", "value": compliance.AUDIT_FOUND,
                      "metadata": {"is_error": False, "is_warning": True}})  # fmt: skip
    lines += [
        {"key": k, "value": v, "metadata": {"is_error": False, "is_warning": False}}
        for k, v in records.items()
    ]
    (folder / "mlperf_log_detail.txt").write_text(
        "".join(f":::MLLOG {json.dumps(line)}\n" for line in lines)
    )


@pytest.mark.parametrize(
    ("spread", "inconclusive"),
    [(0.10 * (1 - NUDGE), False), (0.10, False), (0.10 * (1 + NUDGE), True)],
)
def test_short_test04_is_inconclusive_only_above_its_band(
    tmp_path: Path, spread: float, inconclusive: bool
) -> None:
    """A short TEST04 15% faster: with a measured spread at or under the 10% band it FAILs, just
    above it it is inconclusive (neither PASS nor FAIL)."""
    _mllog(
        tmp_path / "performance", {"result_samples_per_second": 100.0, "result_validity": "INVALID"}
    )
    settings = {f"effective_{k}": v for k, v in compliance.AUDIT_EFFECTIVE["TEST04"].items()}
    _mllog(tmp_path / "TEST04", {"result_samples_per_second": 115.0, "result_validity": "INVALID", **settings},
           audit=True)  # fmt: skip
    verdict = compliance.verify_audit(
        "TEST04",
        tmp_path,
        benchmark=RESNET50,
        loadgen_scenario="Offline",
        short=True,
        spread=spread,
    )
    assert verdict.inconclusive is inconclusive and not verdict.passed


@pytest.mark.parametrize(
    ("rate", "inconclusive"), [(130.0 * (1 - NUDGE), True), (130.0 * (1 + NUDGE), False)]
)
def test_noise_hides_a_short_test04_only_within_the_band_and_the_spread(
    tmp_path: Path, rate: float, inconclusive: bool
) -> None:
    """With a measured spread of 20%, a TEST04 up to 30% faster (the 10% band and the spread)
    is inconclusive; beyond it, the noise cannot explain the score: FAIL."""
    _mllog(
        tmp_path / "performance", {"result_samples_per_second": 100.0, "result_validity": "INVALID"}
    )
    settings = {f"effective_{k}": v for k, v in compliance.AUDIT_EFFECTIVE["TEST04"].items()}
    _mllog(tmp_path / "TEST04", {"result_samples_per_second": rate, "result_validity": "INVALID",
           **settings}, audit=True)  # fmt: skip
    verdict = compliance.verify_audit(
        "TEST04", tmp_path, benchmark=RESNET50, loadgen_scenario="Offline", short=True, spread=0.2
    )
    assert verdict.inconclusive is inconclusive and not verdict.passed
    assert inconclusive or "faster than the performance run" in verdict.reason


def test_spread_is_the_largest_over_the_smallest() -> None:
    """Two measurements of 100 and 110 samples/s differ by 10%: exactly the TEST01 band."""
    from mlperf_mig.runner.audits import relative_spread

    assert relative_spread([110.0, 100.0]) == pytest.approx(0.10)
    assert relative_spread([100.0]) is None
