"""The jobs of a run's rounds, shared by every way of running them (local processes, Ray nodes).

What one instance's worker gets (its harness task, its environment), the engine-build job, the
unified round's sample capacity, and a supervised local round with its progress display. The
executor (execute.py) and the cluster rounds (mlperf_mig/cluster/rounds.py) both build on these.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from mlperf_mig.runner.plan import EngineRequest, RunPlan
from mlperf_mig.runner.progress import ProgressDisplay
from mlperf_mig.runner.supervisor import Supervisor, Timeouts, WorkerOutcome
from mlperf_mig.runner.worker import WorkerJob
from mlperf_mig.workloads import Workload

if TYPE_CHECKING:
    from mlperf_mig.engines import EngineSpec
    from mlperf_mig.harness import InstanceTask
    from mlperf_mig.harness.samples import InputLayout
    from mlperf_mig.placement.deployment import InstanceSlot

LAYOUT_FOLDER = "layout"
USER_CONF = "user.conf"
BUILD_TIMEOUT_S = 3600.0
BUILD_ENTRY = "mlperf_mig.runner.jobs:build_engine_job"
COORDINATOR_ENTRY = "mlperf_mig.runner.unified:coordinate"
SERVE_ENTRY = "mlperf_mig.runner.unified:serve_instance"
# a generative workload's unified round (token streams): runner/unified_tokens.py
TOKEN_COORDINATOR_ENTRY = "mlperf_mig.runner.unified_tokens:coordinate"
TOKEN_SERVE_ENTRY = "mlperf_mig.runner.unified_tokens:serve_instance"


def unified_entries(benchmark: Workload) -> tuple[str, str]:
    """The coordinator's and the instance workers' entries of a unified round of `benchmark`."""
    if benchmark.generates_tokens:
        return TOKEN_COORDINATOR_ENTRY, TOKEN_SERVE_ENTRY
    return COORDINATOR_ENTRY, SERVE_ENTRY


INSTANCE_ENTRY = "mlperf_mig.harness:run_instance"
ACCURACY_COUNT = "accuracy_sample_count_override"


# --- worker entry of the engine round ------------------------------------------------------------
def build_engine_job(request: EngineRequest, **_protocol: object) -> dict[str, Any]:
    """Worker entry: resolve the EngineSpec and build (or reuse) its engine in this slice."""
    from mlperf_mig.engines import backend_class, build_engine, resolve_spec

    spec = resolve_spec(request.benchmark, **request.spec_options())
    if not backend_class(spec.backend).engine_suffix:
        return {"spec": spec.to_dict(), "path": None, "reused": None}
    built = build_engine(spec, request.cache_dir)
    return {"spec": spec.to_dict(), "path": str(built.path), "reused": built.reused}


def _expected(plan: RunPlan, phase: str) -> float | None:
    """About how long the round's tests last (runner/speed.py); builds have no estimate."""
    if phase == "accuracy":
        return plan.accuracy_s
    return plan.expected_s if phase == "performance" else None


class SupervisedRound:
    """One supervised round with its progress display."""

    def __init__(
        self,
        plan: RunPlan,
        phase: str,
        names: list[str],
        stream: TextIO | None,
        timeouts: Timeouts | None = None,
        on_finish: Callable[[WorkerOutcome], None] | None = None,
    ) -> None:
        self.display = (
            ProgressDisplay(names, phase=phase, expected_s=_expected(plan, phase), stream=stream)
            if stream is not None
            else None
        )
        d = self.display
        self.supervisor = Supervisor(
            timeouts=timeouts or plan.timeouts,
            on_progress=d.progress if d else None,
            on_event=d.event if d else None,
            on_tick=d.tick if d else None,
            on_finish=on_finish,
        )

    def run(
        self,
        jobs: list[WorkerJob],
        *,
        after_start: Callable[[], None] | None = None,
        lead: str | None = None,
    ) -> dict[str, WorkerOutcome]:
        try:
            outcomes = self.supervisor.run(jobs, after_start=after_start, lead=lead)
        finally:
            if self.display is not None:
                self.display.close()
        return {o.name: o for o in outcomes}

    @property
    def interrupted(self) -> bool:
        return self.supervisor.interrupted


def instance_task(
    plan: RunPlan,
    *,
    name: str,
    outdir: Path,
    mode: str,
    engine: EngineSpec | None,
    threads: int | None,
    profile: str | None,
) -> InstanceTask:
    """The harness task of one instance in a round; `mode` is "performance", "accuracy" or an
    audit ("TEST01", "TEST04": a performance-mode test with its audit.config)."""
    from mlperf_mig.harness import InstanceTask, SettingsSpec
    from mlperf_mig.harness.task import AUDITS

    audit = mode if mode in AUDITS else None
    overrides, user_conf = plan.overrides, plan.user_conf
    performance_conf = outdir / name / USER_CONF
    if audit is not None and performance_conf.is_file():
        # An audit is compared with its performance run, so it runs with the values that run
        # resolved (measured target included); they travel in the task, to cluster nodes too.
        # A unified run's serving instances have no user.conf and run no LoadGen test.
        overrides, user_conf = _resolved_values(plan, performance_conf), None
    if mode == "accuracy" and plan.compliance and not _sets_accuracy_count(plan):
        # TEST01 compares the samples it logs with the accuracy run's answers for them: the
        # accuracy run covers every sample (the quick preset's 64 would rarely meet them).
        overrides = (*overrides, (ACCURACY_COUNT, 0))
    return InstanceTask(
        benchmark=plan.benchmark,
        loadgen_scenario=plan.loadgen_scenario,
        outdir=str(outdir / name),
        mode="performance" if audit else mode,
        audit=audit,
        engine=engine,
        cache_dir=plan.cache_dir,
        threads=threads,
        settings=SettingsSpec(
            preset=plan.preset,
            overrides=overrides,
            user_conf=user_conf,
            profile=profile,
            target_from=plan.target_from,
        ),
        dataset=plan.dataset,
        vocab=plan.vocab,
        sample_count=plan.sample_count,
        batch_size=plan.batch_size,
    )


def _sets_accuracy_count(plan: RunPlan) -> bool:
    """Whether the user set the accuracy sample count (an override or the user.conf)."""
    from mlperf_mig.harness.settings import read_user_conf

    if ACCURACY_COUNT in dict(plan.overrides):
        return True
    if plan.user_conf is None:
        return False
    model = plan.benchmark.conf_model_name
    return ACCURACY_COUNT in read_user_conf(plan.user_conf, model, plan.loadgen_scenario)


def _resolved_values(plan: RunPlan, conf: Path) -> tuple[tuple[str, float], ...]:
    """The values of the user.conf a performance run wrote (all of its settings, resolved)."""
    from mlperf_mig.harness.settings import read_user_conf

    model = plan.benchmark.conf_model_name
    return tuple(read_user_conf(conf, model, plan.loadgen_scenario).items())


def target_reuse_env(plan: RunPlan) -> dict[str, str]:
    """What tells an instance's worker not to use a target an earlier run calibrated: set for
    the runs of a study, which each measure their own (harness/reuse.py REUSE_TARGETS_ENV)."""
    from mlperf_mig.harness.reuse import REUSE_TARGETS_ENV

    return {} if plan.reuse_targets else {REUSE_TARGETS_ENV: "0"}


def instance_env(slot: InstanceSlot) -> dict[str, str]:
    """The slot's device variables, its name (for logs and tests), its thread count and its
    emulated CPU budget (emulation/cpu_budget.py)."""
    from mlperf_mig.emulation.cpu_budget import budget_env

    env = {**slot.env, "MLPERF_MIG_INSTANCE": slot.name}
    env.update(budget_env(getattr(slot, "cpu_share", None), getattr(slot, "cpu_budget", None)))
    if slot.threads is not None:
        env["OMP_NUM_THREADS"] = str(slot.threads)
    return env


def sample_capacity(plan: RunPlan, task: InstanceTask) -> tuple[tuple[InputLayout, ...], int, int]:
    """Input layouts, LoadGen's performance sample count, and how many samples the shared
    sample memory must hold (MultiStream may load one query more than the performance count)."""
    from mlperf_mig.harness import datasets
    from mlperf_mig.harness.loadgen_test import performance_count
    from mlperf_mig.harness.samples import input_layouts
    from mlperf_mig.harness.settings import resolve_settings

    benchmark = plan.benchmark
    source = datasets.open_source(task)
    resolved = resolve_settings(
        task.settings, benchmark, plan.loadgen_scenario, calibrated_target=1.0
    )
    values = resolved.values
    count = performance_count(resolved, source)
    extra = int(values.get("samples_per_query", 8)) if plan.loadgen_scenario == "MultiStream" else 0
    return input_layouts(benchmark), count, min(count + extra, source.total_count)
