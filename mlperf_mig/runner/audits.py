"""The compliance rounds of a run (`compliance=True`): after the accuracy round, each audit the
benchmark requires runs as a round of its own (fresh processes, as every LoadGen test), in
independent mode once per instance and in unified mode once for the layout; then each audit is
verified against its instance's (or the layout's) performance and accuracy runs
(harness/compliance.py), which writes its verify_*.txt files next to its logs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlperf_mig.runner.jobs import instance_task
from mlperf_mig.runner.plan import RunPlan
from mlperf_mig.runner.supervisor import WorkerOutcome

if TYPE_CHECKING:
    from mlperf_mig.harness.compliance import AuditVerdict

log = logging.getLogger(__name__)

# (mode, names) -> (outcomes by folder, interrupted): one round of the run, in the plan's mode
Round = Callable[[str, list[str]], tuple[dict[str, WorkerOutcome], bool]]


def run_audits(
    plan: RunPlan, outdir: Path, run_round: Round, names: list[str], folders: list[str]
) -> tuple[dict[str, tuple[AuditVerdict, ...]], bool]:
    """Run every required audit of `names` (the instances whose performance and accuracy runs
    finished) and verify it in `folders` (the instances', or the layout's); return the verdicts
    by folder and whether the run was interrupted."""
    from mlperf_mig.harness.compliance import required_audits

    if not folders:
        return {}, False
    outcomes: dict[str, dict[str, WorkerOutcome]] = {}
    for audit in required_audits(plan.benchmark):
        outcomes[audit], interrupted = run_round(audit, names)
        if interrupted:
            return {}, True
    return {folder: _verdicts(plan, outdir, folder, outcomes) for folder in folders}, False


def not_run(plan: RunPlan, outdir: Path, folder: str, why: str) -> tuple[AuditVerdict, ...]:
    """The verdicts of an instance whose audits could not run (`why`)."""
    from mlperf_mig.harness.compliance import failed_verdict, required_audits

    return tuple(
        failed_verdict(audit, outdir / folder / audit, f"not run: {why}", short=_short(plan))
        for audit in required_audits(plan.benchmark)
    )


def _short(plan: RunPlan) -> bool:
    return plan.preset != "submission"


def _verdicts(
    plan: RunPlan, outdir: Path, folder: str, outcomes: Mapping[str, Mapping[str, WorkerOutcome]]
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
    value: Any = outcome.value
    result = value.get("result", value) if isinstance(value, dict) else None
    error = result.get("error") if isinstance(result, dict) else None
    return None if error is None else f"the audit run failed: {error}"


def _open_source(plan: RunPlan, outdir: Path, folder: str) -> Any:
    from mlperf_mig.benchmark import get_benchmark
    from mlperf_mig.harness import datasets

    task = instance_task(
        plan, name=folder, outdir=outdir, mode="performance", engine=None, threads=None,
        profile=None,
    )  # fmt: skip
    return datasets.open_source(task, get_benchmark(plan.benchmark))
