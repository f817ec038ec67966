"""Short audits judged against their measured noise: the spread and what an inconclusive one does to the run."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from mlperf_mig.harness.compliance import AuditVerdict
from mlperf_mig.runner.audits import relative_spread


def _verdict(**fields: Any) -> AuditVerdict:
    return AuditVerdict(
        audit="TEST04", short=True, log_dir="x", **{"passed": True, "reason": "", **fields}
    )


def test_spread_is_the_largest_over_the_smallest() -> None:
    """Scores 100 and 125 differ by 25%; one score alone has no spread."""
    assert relative_spread([100.0, 125.0]) == pytest.approx(0.25)
    assert relative_spread([100.0]) is None


@pytest.mark.slow
def test_an_inconclusive_audit_does_not_fail_the_run(good_run: Any) -> None:
    """A run whose only unpassed audit is inconclusive is not a compliance failure (None), one with a FAIL is."""
    inconclusive = _verdict(passed=False, inconclusive=True, reason="noise", spread=0.3)
    failed = _verdict(passed=False, reason="40% faster")
    first = good_run.instances[0]
    with_inconclusive = attrs.evolve(
        good_run, instances=[attrs.evolve(first, compliance=[inconclusive, _verdict()])]
    )
    with_failure = attrs.evolve(
        good_run, instances=[attrs.evolve(first, compliance=[inconclusive, failed])]
    )
    assert with_inconclusive.compliance_passed is None
    assert with_failure.compliance_passed is False


def test_inconclusive_verdict_survives_a_dict() -> None:
    """The inconclusive flag and the spread are read back from results.json."""
    verdict = _verdict(passed=False, inconclusive=True, reason="noise", spread=0.3)
    again = AuditVerdict.from_dict(verdict.to_dict())
    assert again.inconclusive and again.spread == 0.3
