"""Executing a RunPlan: engine builds, the performance round, the accuracy round, results.json.

Every LoadGen test runs in a fresh spawned process (traps 1 and 2), so a run is a sequence of
rounds, each supervised by one Supervisor:
    engines       one build per distinct engine, on the device of the first instance that uses it
    performance   independent: one worker per instance, released together at the start barrier;
                  unified: a LoadGen coordinator plus one serving worker per instance
    accuracy      the same again in AccuracyOnly mode (fresh processes), when asked for
The instances' results and logs are kept whatever happens to the others; after Ctrl-C the
results gathered so far are written and KeyboardInterrupt is raised again.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

import attrs

from mlperf_mig import errors
from mlperf_mig._io import atomic_write_bytes, atomic_write_json, ensure_writable_dir
from mlperf_mig.errors import SettingsError, WorkerError
from mlperf_mig.runner.jobs import (
    BUILD_TARGET,
    BUILD_TIMEOUT_S,
    COORDINATOR_TARGET,
    INSTANCE_TARGET,
    LAYOUT_FOLDER,
    SERVE_TARGET,
    USER_CONF,
    SupervisedRound,
    instance_env,
    instance_task,
    sample_capacity,
)
from mlperf_mig.runner.plan import RunPlan
from mlperf_mig.runner.results import RESULTS_FILE, InstanceRun, RunResult
from mlperf_mig.runner.supervisor import Timeouts, WorkerOutcome
from mlperf_mig.runner.worker import WorkerJob

log = logging.getLogger(__name__)



# --- helpers ----------------------------------------------------------------------------------------
def _reraise_build_failure(key: str, outcome: WorkerOutcome) -> None:
    """A failed engine build stops the run: library errors come back as themselves (exit 2)."""
    if outcome.status == "interrupted":
        raise KeyboardInterrupt
    if outcome.status == "raised" and outcome.error:
        kind, _, message = outcome.error.partition(": ")
        cls = getattr(errors, kind, None)
        if isinstance(cls, type) and issubclass(cls, errors.MlperfMigError):
            raise cls(message)
        raise WorkerError(
            f"engine build {key!r} raised {outcome.error}; traceback:\n{outcome.traceback}"
        )
    raise WorkerError(f"engine build {key!r} {outcome.status}: {outcome.error}; log tail:\n{outcome.log_tail}")


def _build_engines(plan: RunPlan, outdir: Path, stream: TextIO | None) -> dict[str, Any]:
    """key -> EngineSpec for every engine of the plan (None for the null backend)."""
    from mlperf_mig.engines import EngineSpec

    if not plan.engines:
        return {"null": None}
    if plan.target.cluster is not None:
        return {}  # each node builds (or reuses) its instances' engines in its own cache
    jobs = [
        WorkerJob(
            name=f"build-{request.key}",
            target=BUILD_TARGET,
            payload=request,
            log_path=str(outdir / "engines" / f"build-{request.key}.log"),
            env=request.env,
            cpus=request.cpus,
            wait_at_barrier=False,
        )
        for request in plan.engines
    ]
    # Builds have their own deadline: a TensorRT build inside a small slice can take minutes, and
    # a short --timeout meant for hung LoadGen tests must not kill it.
    timeouts = Timeouts(ready_s=BUILD_TIMEOUT_S, run_s=BUILD_TIMEOUT_S)
    round_ = SupervisedRound(plan, "engines", [j.name for j in jobs], stream, timeouts)
    outcomes = round_.run(jobs)
    if round_.interrupted:
        raise KeyboardInterrupt
    specs = {}
    for request in plan.engines:
        outcome = outcomes[f"build-{request.key}"]
        if not outcome.ok:
            _reraise_build_failure(request.key, outcome)
        specs[request.key] = EngineSpec.from_dict(outcome.value["spec"])
        log.info("engine %s: %s", request.key, "reused" if outcome.value["reused"] else "built")
    return specs


def _slot_task(plan: RunPlan, slot: Any, *, outdir: Path, mode: str, specs: Mapping[str, Any]) -> Any:
    """The harness task of one instance: its engine, threads and per-profile settings."""
    return instance_task(
        plan,
        name=slot.name,
        outdir=outdir,
        mode=mode,
        engine=specs[plan.engine_of[slot.name]],
        threads=slot.threads,
        profile=plan.settings_profile(slot),
    )


# --- independent mode ---------------------------------------------------------------------------------
def _independent_round(
    plan: RunPlan, outdir: Path, specs: Mapping[str, Any], mode: str, names: list[str], stream: TextIO | None,
    on_finish: Callable[[WorkerOutcome], None] | None = None,
) -> tuple[dict[str, WorkerOutcome], bool]:
    jobs = []
    for slot in plan.slots:
        if slot.name not in names:
            continue
        jobs.append(
            WorkerJob(
                name=slot.name,
                target=plan.worker_target or INSTANCE_TARGET,
                payload=_slot_task(plan, slot, outdir=outdir, mode=mode, specs=specs),
                log_path=str(outdir / slot.name / "worker.log"),
                env=instance_env(slot),
                cpus=slot.cpus,
            )
        )
    round_ = SupervisedRound(plan, mode, names, stream, on_finish=on_finish)
    outcomes = round_.run(jobs)
    return outcomes, round_.interrupted


def _instance_result(outcome: WorkerOutcome | None) -> Any:
    if outcome is None or not outcome.ok:
        return None
    from mlperf_mig.harness import InstanceResult

    return InstanceResult.from_dict(outcome.value)


def _instance_runs(
    plan: RunPlan,
    performance: Mapping[str, WorkerOutcome],
    accuracy: Mapping[str, WorkerOutcome],
    served: Mapping[str, int] | None,
) -> list[InstanceRun]:
    host = socket.gethostname()
    runs = []
    for slot in plan.slots:
        perf = performance.get(slot.name)
        acc = accuracy.get(slot.name)
        unified = served is not None
        runs.append(
            InstanceRun(
                name=slot.name,
                index=slot.index,
                profile=slot.profile,
                compute_slices=slot.compute_slices,
                device=slot.device,
                cpus=slot.cpus,
                threads=slot.threads,
                host=slot.host or host,
                node=slot.node,
                status=perf.status if perf else "not run",
                error=perf.error if perf else None,
                traceback=perf.traceback if perf else None,
                log_tail=perf.log_tail if perf else None,
                accuracy_status=acc.status if acc else None,
                accuracy_error=acc.error if acc else None,
                performance=None if unified else _instance_result(perf),
                accuracy=None if unified else _instance_result(acc),
                dispatched_samples=served.get(slot.name, 0) if unified else None,
            )
        )
    return runs


# --- unified mode --------------------------------------------------------------------------------------
def _unified_round(
    plan: RunPlan, outdir: Path, specs: Mapping[str, Any], mode: str, stream: TextIO | None,
    on_finish: Callable[[WorkerOutcome], None] | None = None,
) -> tuple[dict[str, WorkerOutcome], bool]:
    from mlperf_mig.harness.instance import batch_size_of
    from mlperf_mig.runner.unified import CoordinatorJob, ServeJob, SharedSamples

    layout_task = instance_task(
        plan, name=LAYOUT_FOLDER, outdir=outdir, mode=mode, engine=None, threads=None, profile=None
    )
    layouts, performance_count, capacity = sample_capacity(plan, layout_task)
    tasks = [_slot_task(plan, slot, outdir=outdir, mode=mode, specs=specs) for slot in plan.slots]
    names = [LAYOUT_FOLDER, *(slot.name for slot in plan.slots)]
    round_ = SupervisedRound(plan, mode, names, stream, on_finish=on_finish)
    with SharedSamples(layouts, capacity) as samples:
        pipes = [round_.supervisor.context.Pipe() for _ in plan.slots]
        coordinator = WorkerJob(
            name=LAYOUT_FOLDER,
            target=COORDINATOR_TARGET,
            payload=CoordinatorJob(
                task=layout_task,
                samples=samples.specs,
                performance_count=performance_count,
                links=tuple(a for a, _ in pipes),
                names=tuple(slot.name for slot in plan.slots),
                weights=tuple(float(slot.compute_slices) for slot in plan.slots),
                batch_size=min(batch_size_of(task) for task in tasks),
                synthetic_weights=plan.model_path is None,
                ready_timeout_s=plan.timeouts.ready_s,
                # an instance silent for half the test's deadline is dropped, so that the others
                # can still serve its samples within the deadline
                reply_timeout_s=plan.timeouts.run_s / 2,
            ),
            log_path=str(outdir / LAYOUT_FOLDER / "worker.log"),
        )
        workers = [
            WorkerJob(
                name=slot.name,
                target=plan.worker_target or SERVE_TARGET,
                payload=ServeJob(
                    task=task,
                    samples=samples.specs,
                    link=b,
                    batch_size=batch_size_of(task),
                ),
                log_path=str(outdir / slot.name / "worker.log"),
                env=instance_env(slot),
                cpus=slot.cpus,
            )
            for slot, task, (_, b) in zip(plan.slots, tasks, pipes)
        ]

        def close_parent_ends() -> None:
            for a, b in pipes:
                a.close()
                b.close()

        outcomes = round_.run(
            [coordinator, *workers], after_start=close_parent_ends, lead=LAYOUT_FOLDER
        )
    return outcomes, round_.interrupted


# --- the run ---------------------------------------------------------------------------------------------
def _device_of(runs: list[InstanceRun], outcomes: Mapping[str, WorkerOutcome]) -> str:
    """What the instances actually ran on, as their backends reported it."""
    for run in runs:
        if run.performance is not None:
            d = run.performance.device
            return f"{d.provider} on {d.device}"
    for outcome in outcomes.values():
        if outcome.ok and isinstance(outcome.value, dict) and "device" in outcome.value:
            d = outcome.value["device"]
            if isinstance(d, dict):
                return f"{d['provider']} on {d['device']}"
    return "unknown (no instance finished)"


def find_baseline(plan: RunPlan, outdir: Path) -> tuple[float | None, str | None]:
    """Total throughput of a scenario-1 run with the same settings in a sibling folder."""
    for candidate in sorted(outdir.parent.glob(f"*/{RESULTS_FILE}")):
        if candidate.parent == outdir:
            continue
        try:
            other = RunResult.load(candidate)
        except errors.MlperfMigError:
            continue
        if other.scenario == 1 and other.settings_key == plan.settings_key and other.ok:
            return other.total_throughput, str(candidate.parent)
    return None, None


def _given_baseline(baseline: Any, plan: RunPlan) -> tuple[float | None, str | None]:
    other = baseline if isinstance(baseline, RunResult) else RunResult.load(baseline)
    if (other.benchmark, other.loadgen_scenario) != (plan.benchmark, plan.loadgen_scenario):
        raise SettingsError(
            f"baseline is {other.benchmark} {other.loadgen_scenario} but this run is "
            f"{plan.benchmark} {plan.loadgen_scenario} (LoadGen scenario); pass a baseline of the same"
        )
    if other.settings_key != plan.settings_key:
        log.warning("the baseline run used other settings than this run; the change is indicative")
    return other.total_throughput, other.outdir


@contextlib.contextmanager
def _performance_user_conf_kept(folders: list[Path]) -> Iterator[None]:
    """Keep `<instance>/user.conf` the performance run's (the one a submission needs); the
    accuracy run's own user.conf goes to `<instance>/accuracy/user.conf`."""
    kept = {f: (f / USER_CONF).read_bytes() for f in folders if (f / USER_CONF).is_file()}
    try:
        yield
    finally:
        for folder, data in kept.items():
            written = folder / USER_CONF
            if (folder / "accuracy").is_dir() and written.is_file():
                os.replace(written, folder / "accuracy" / USER_CONF)
            atomic_write_bytes(written, data)


def execute(plan: RunPlan, *, progress: bool | TextIO = True, baseline: Any = None) -> RunResult:
    """Run `plan`: engines, performance round, accuracy round; write and return the RunResult."""
    outdir = ensure_writable_dir(plan.outdir)
    stream = (sys.stderr if progress is True else progress) or None
    atomic_write_json(outdir / "plan.json", plan.to_dict())
    started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    began = time.monotonic()
    specs = _build_engines(plan, outdir, stream)
    names = [slot.name for slot in plan.slots]
    unified = plan.mode == "unified"
    known: dict[str, dict[str, WorkerOutcome]] = {"performance": {}, "accuracy": {}}

    def checkpoint(phase: str) -> Callable[[WorkerOutcome], None]:
        """Write results.json (marked incomplete) as each worker of `phase` finishes, so that
        whatever ends the run later, what finished is on disk."""

        def write(outcome: WorkerOutcome) -> None:
            known[phase][outcome.name] = outcome
            elapsed = time.monotonic() - began
            _assemble(plan, specs, known["performance"], known["accuracy"], True, started_at, elapsed).save(outdir)

        return write

    performance, interrupted = _round(
        plan, outdir, specs, "performance", names, stream, checkpoint("performance")
    )
    accuracy: dict[str, WorkerOutcome] = {}
    layout_ok = not unified or (LAYOUT_FOLDER in performance and performance[LAYOUT_FOLDER].ok)
    passed = [n for n in names if n in performance and performance[n].ok]
    if plan.accuracy and not interrupted and layout_ok and (unified or passed):
        folders = [outdir / n for n in ([LAYOUT_FOLDER] if unified else passed)]
        with _performance_user_conf_kept(folders):
            accuracy, interrupted = _round(
                plan, outdir, specs, "accuracy", passed, stream, checkpoint("accuracy")
            )
    verdicts: dict[str, Any] = {}
    if plan.compliance and not interrupted:
        verdicts, interrupted = _compliance(plan, outdir, specs, names, performance, accuracy, stream)
    result = _assemble(plan, specs, performance, accuracy, interrupted, started_at, time.monotonic() - began)
    if verdicts:
        result = attrs.evolve(
            result,
            instances=[attrs.evolve(i, compliance=verdicts.get(i.name, ())) for i in result.instances],
            layout_compliance=verdicts.get(LAYOUT_FOLDER, ()),
        )
    if baseline is not None:
        base, source = _given_baseline(baseline, plan)
    elif plan.target.scenario == 1:
        base, source = result.total_throughput, "this run"
    else:
        base, source = find_baseline(plan, outdir)
    result = attrs.evolve(result, baseline_throughput=base, baseline_source=source)
    result.save(outdir)
    if interrupted:
        raise KeyboardInterrupt
    return result


def _compliance(
    plan: RunPlan,
    outdir: Path,
    specs: Mapping[str, Any],
    names: list[str],
    performance: Mapping[str, WorkerOutcome],
    accuracy: Mapping[str, WorkerOutcome],
    stream: TextIO | None,
) -> tuple[dict[str, Any], bool]:
    """The audit rounds after the accuracy round (runner/audits.py): of each instance whose
    performance and accuracy runs finished, or of the layout; the others' audits are not run."""
    from mlperf_mig.runner.audits import not_run, run_audits

    folders = [LAYOUT_FOLDER] if plan.mode == "unified" else names
    ready = [f for f in folders if f in performance and performance[f].ok and f in accuracy and accuracy[f].ok]
    verdicts, interrupted = run_audits(
        plan, outdir, lambda audit, which: _round(plan, outdir, specs, audit, which, stream),
        names if plan.mode == "unified" else ready, ready,
    )  # fmt: skip
    for folder in folders:
        if folder not in ready and not interrupted:
            verdicts[folder] = not_run(plan, outdir, folder, "its performance or accuracy run did not finish")
    return verdicts, interrupted


def _round(
    plan: RunPlan,
    outdir: Path,
    specs: Mapping[str, Any],
    mode: str,
    names: list[str],
    stream: TextIO | None,
    on_finish: Callable[[WorkerOutcome], None] | None = None,
) -> tuple[dict[str, WorkerOutcome], bool]:
    """One round in the plan's mode; independent mode runs the instances `names` only."""
    if plan.target.cluster is not None:  # across Ray nodes; the nodes' engine specs land in `specs`
        from mlperf_mig.cluster import rounds

        assert isinstance(specs, dict)
        tasks = {
            slot.name: instance_task(
                plan, name=slot.name, outdir=outdir, mode=mode, engine=None, threads=slot.threads,
                profile=plan.settings_profile(slot),
            )
            for slot in plan.slots
            if slot.name in names
        }
        job = rounds.RoundInput(
            plan=plan, outdir=outdir, tasks=tasks, mode=mode, stream=stream, on_finish=on_finish, specs=specs
        )
        return rounds.unified_round(job) if plan.mode == "unified" else rounds.independent_round(job)
    if plan.mode == "unified":
        return _unified_round(plan, outdir, specs, mode, stream, on_finish)
    return _independent_round(plan, outdir, specs, mode, names, stream, on_finish)


def _cluster_facts(plan: RunPlan, performance: Mapping[str, WorkerOutcome]) -> dict[str, Any] | None:
    """What results.json says of a cluster run: the cluster, its nodes, the grouping, the skew."""
    if plan.target.cluster is None:
        return None
    from mlperf_mig.cluster.rounds import start_skew_ms

    return {
        "cluster": plan.target.cluster,
        "nodes": sorted({slot.node for slot in plan.slots if slot.node}),
        "grouping": plan.target.grouping,
        "start_skew_ms": start_skew_ms(performance),
    }


def _precision(specs: Mapping[str, Any], plan: RunPlan) -> str:
    built = sorted({spec.precision for spec in specs.values() if spec is not None})
    return ",".join(built) if built else (plan.precision or "none (null backend)")


def _assemble(
    plan: RunPlan,
    specs: Mapping[str, Any],
    performance: Mapping[str, WorkerOutcome],
    accuracy: Mapping[str, WorkerOutcome],
    interrupted: bool,
    started_at: str,
    duration_s: float,
) -> RunResult:
    from mlperf_mig import registry
    from mlperf_mig.harness import InstanceResult

    unified = plan.mode == "unified"
    coordinator = performance.get(LAYOUT_FOLDER)
    coordinator_acc = accuracy.get(LAYOUT_FOLDER)
    served = None
    layout_result = layout_accuracy = None
    if unified:
        served = coordinator.value["served"] if coordinator and coordinator.ok else {}
        if coordinator is not None and coordinator.ok:
            layout_result = InstanceResult.from_dict(coordinator.value["result"])
        if coordinator_acc is not None and coordinator_acc.ok:
            layout_accuracy = InstanceResult.from_dict(coordinator_acc.value["result"])
    runs = _instance_runs(plan, performance, accuracy, served)
    layout_error = None
    lost = coordinator.value.get("lost_workers", []) if unified and coordinator and coordinator.ok else []
    if unified and coordinator is not None and not coordinator.ok:
        layout_error = coordinator.error
    elif lost:
        layout_error = f"degraded: lost {', '.join(lost)}; their samples were served by the others"
    elif unified and coordinator_acc is not None and not coordinator_acc.ok:
        layout_error = f"accuracy run: {coordinator_acc.error}"
    return RunResult(
        gpu=plan.gpu,
        layout=plan.layout,
        system_id=registry.system_id(plan.target.layout),
        scenario=plan.target.scenario,
        target=plan.target.kind,
        mode=plan.mode,
        benchmark=plan.benchmark,
        loadgen_scenario=plan.loadgen_scenario,
        backend=plan.backend,
        device=_device_of(runs, performance),
        precision=_precision(specs, plan),
        variant=plan.variant,
        preset=plan.preset,
        synthetic_weights=plan.model_path is None,
        synthetic_data=plan.dataset is None,
        outdir=plan.outdir,
        settings_key=plan.settings_key,
        started_at=started_at,
        duration_s=round(duration_s, 2),
        instances=runs,
        layout_result=layout_result,
        layout_accuracy=layout_accuracy,
        layout_status=(coordinator.status if coordinator else "not run") if unified else None,
        layout_error=layout_error,
        interrupted=interrupted,
        hosts=tuple(dict.fromkeys(slot.host for slot in plan.slots if slot.host)) or (socket.gethostname(),),
        cluster=_cluster_facts(plan, performance),
    )
