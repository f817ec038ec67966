"""The compliance rounds of a run (`compliance=True`): after the accuracy round, each audit the
benchmark requires runs as a round of its own (fresh processes, as every LoadGen test), in
independent mode once per instance and in unified mode once for the layout; then each audit is
verified against its instance's (or the layout's) performance and accuracy runs
(harness/compliance.py), which writes its verify_*.txt files next to its logs.

A short (quick-preset) audit compares two measurements of a few seconds each, which a busy
machine moves by more than the 10% band. So its noise is measured: after the audits the
performance test runs once more (into `audit-reference/<folder>/performance/`), bracketing them,
and the spread is the larger of how far the two performance runs differ and, on emulated
partitions, how far the parts of its CPU budget that each of the three tests received differ (a
test that got less CPU ran slower by as much). A spread above the band makes the verdict
inconclusive, with the spread, instead of PASS or FAIL, unless the score is off by more than the
band and the spread together (a FAIL the noise cannot explain, such as a cache answering TEST04
many times faster); an inconclusive audit does not fail the run. Full-length audits
(preset='submission') keep the MLCommons rule and run no bracket.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from mlperf_mig.runner.jobs import instance_task
from mlperf_mig.runner.plan import RunPlan
from mlperf_mig.runner.supervisor import WorkerOutcome

if TYPE_CHECKING:
    from mlperf_mig.harness.compliance import AuditVerdict
    from mlperf_mig.workloads.samples import SampleSource

log = logging.getLogger(__name__)

REFERENCE_FOLDER = "audit-reference"  # the performance test again, after the short audits
CPU_BOUND_PART = 0.5  # a test that used at least this part of its CPU budget was held by it

# (mode, names) -> (outcomes by folder, interrupted): one round of the run, in the plan's mode
Round = Callable[[str, list[str]], tuple[dict[str, WorkerOutcome], bool]]
# names -> (outcomes by folder, interrupted): the performance round again, into REFERENCE_FOLDER
ReferenceRound = Callable[[list[str]], tuple[dict[str, WorkerOutcome], bool]]


def run_audits(
    plan: RunPlan,
    outdir: Path,
    run_round: Round,
    names: list[str],
    folders: list[str],
    *,
    reference_round: ReferenceRound | None = None,
    performance: Mapping[str, WorkerOutcome] | None = None,
) -> tuple[dict[str, tuple[AuditVerdict, ...]], bool]:
    """Run every required audit of `names` (the instances whose performance and accuracy runs
    finished) and verify it in `folders` (the instances', or the layout's); return the verdicts
    by folder and whether the run was interrupted. Short audits are bracketed by
    `reference_round` (the performance test again) and judged against their measured spread;
    `performance` holds the performance round's outcomes (the CPU time each test received)."""
    if not folders:
        return {}, False
    outcomes: dict[str, dict[str, WorkerOutcome]] = {}
    for audit in plan.benchmark.required_audits:
        outcomes[audit], interrupted = run_round(audit, names)
        if interrupted:
            return {}, True
    reference: dict[str, WorkerOutcome] = {}
    if _short(plan) and reference_round is not None:
        reference, interrupted = reference_round(names)
        if interrupted:
            return {}, True
    spreads = {
        folder: _spreads(plan, outdir, folder, outcomes, reference, performance or {})
        for folder in folders
    }
    return {
        folder: _verdicts(plan, outdir, folder, outcomes, spreads[folder]) for folder in folders
    }, False


def _score(folder: Path, loadgen_scenario: str) -> float | None:
    """The score the audits are judged by, from the detail log in `folder` (None: none)."""
    from mlperf_mig.errors import DatasetError
    from mlperf_mig.harness.compliance import SCORE_KEYS
    from mlperf_mig.harness.logs import parse_detail_log

    try:
        value = parse_detail_log(folder).get(SCORE_KEYS[loadgen_scenario])
        return float(value) if value is not None else None
    except (DatasetError, TypeError, ValueError):
        return None


def relative_spread(values: Sequence[float | None]) -> float | None:
    """How far the largest of `values` is above the smallest, relative to it (None: fewer than
    two positive values)."""
    positive = [v for v in values if v is not None and v > 0]
    if len(positive) < 2:
        return None
    return max(positive) / min(positive) - 1.0


def _spreads(
    plan: RunPlan,
    outdir: Path,
    folder: str,
    outcomes: Mapping[str, Mapping[str, WorkerOutcome]],
    reference: Mapping[str, WorkerOutcome],
    performance: Mapping[str, WorkerOutcome],
) -> dict[str, float | None]:
    """Each audit's measured spread (None for full-length audits or without a bracket)."""
    if not _short(plan) or folder not in reference:
        return dict.fromkeys(outcomes)
    before = _score(outdir / folder / "performance", plan.loadgen_scenario)
    after = _score(outdir / REFERENCE_FOLDER / folder / "performance", plan.loadgen_scenario)
    scores = relative_spread([before, after])
    result: dict[str, float | None] = {}
    for audit, by_folder in outcomes.items():
        spread = scores
        share = next((s.cpu_share for s in plan.slots if s.name == folder), None)
        if share:
            # the part of its CPU budget each test received: a test that got 60% of it where
            # the others got 95% ran about a third slower, whatever the audit checks. Only tests
            # that used at least half their budget count: one that waits (a paced SUT) has no
            # use for the rest, and its part says nothing of the machine
            tests = (performance.get(folder), by_folder.get(folder), reference.get(folder))
            parts = [
                min(t.cpu_per_s / share, 1.0)
                for t in tests
                if t is not None and t.cpu_per_s is not None
            ]
            parts = [p for p in parts if p >= CPU_BOUND_PART]
            cpu = max(parts) - min(parts) if len(parts) > 1 else None
            spread = max((s for s in (scores, cpu) if s is not None), default=None)
        result[audit] = spread
    return result


def not_run(plan: RunPlan, outdir: Path, folder: str, why: str) -> tuple[AuditVerdict, ...]:
    """The verdicts of an instance whose audits could not run (`why`)."""
    from mlperf_mig.harness.compliance import failed_verdict

    return tuple(
        failed_verdict(audit, outdir / folder / audit, f"not run: {why}", short=_short(plan))
        for audit in plan.benchmark.required_audits
    )


def _short(plan: RunPlan) -> bool:
    return plan.preset != "submission"


def _verdicts(
    plan: RunPlan,
    outdir: Path,
    folder: str,
    outcomes: Mapping[str, Mapping[str, WorkerOutcome]],
    spreads: Mapping[str, float | None],
) -> tuple[AuditVerdict, ...]:
    from mlperf_mig.harness.compliance import failed_verdict, verify_audit

    verdicts = []
    for audit, by_folder in outcomes.items():
        failure = _failure(by_folder.get(folder))
        if failure is not None:
            verdicts.append(
                failed_verdict(audit, outdir / folder / audit, failure, short=_short(plan))
            )
            continue
        verdict = verify_audit(
            audit,
            outdir / folder,
            benchmark=plan.benchmark,
            loadgen_scenario=plan.loadgen_scenario,
            short=_short(plan),
            open_source=lambda: _open_source(plan, outdir, folder),
            spread=spreads.get(audit),
            end_ids=plan.benchmark.end_token_ids(plan.variant) if plan.engines else (),
        )
        log.info("%s %s: %s", folder, audit, verdict.summary())
        verdicts.append(verdict)
    return tuple(verdicts)


def _failure(outcome: WorkerOutcome | None) -> str | None:
    """Why an audit's worker gave nothing to verify (None: it did)."""
    if outcome is None:
        return "the audit did not run"
    if not outcome.ok:
        return f"the audit's worker {outcome.status}: {outcome.error}"
    value: object = outcome.value
    result = value.get("result", value) if isinstance(value, dict) else None
    error = result.get("error") if isinstance(result, dict) else None
    return None if error is None else f"the audit run failed: {error}"


def _open_source(plan: RunPlan, outdir: Path, folder: str) -> SampleSource:
    from mlperf_mig.harness import datasets

    task = instance_task(
        plan, name=folder, outdir=outdir, mode="performance", engine=None, threads=None,
        profile=None,
    )  # fmt: skip
    return datasets.open_source(task)
