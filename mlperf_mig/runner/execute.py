"""Executing a RunPlan: engine builds, the performance round, the accuracy round, results.json.

Every LoadGen test runs in a fresh worker process (traps 1 and 2), so a run is a sequence of
rounds, each supervised by one Supervisor:
    engines       one build per distinct engine, on the device of the first instance that uses it
    performance   independent: one worker per instance, released together at the start barrier;
                  unified: a LoadGen coordinator plus one serving worker per instance
    accuracy      the same again in AccuracyOnly mode (fresh processes), when asked for
How a round runs and what its outcomes mean depends on the plan's mode and where it runs;
`choose_rounds` picks that once (runner/rounds.py, or the rounds an open cluster session hands
over, `rounds_handed`: cluster/rounds.py) and the run below is the same for all. The instances'
results and logs are kept whatever happens to the others; after Ctrl-C the results gathered so
far are written and KeyboardInterrupt is raised again.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import logging
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TextIO

import attrs

from mlperf_mig import errors
from mlperf_mig._io import atomic_write_bytes, atomic_write_json, ensure_writable_dir
from mlperf_mig._text import printable
from mlperf_mig.errors import SettingsError
from mlperf_mig.placement.cluster_address import ClusterSpec, parse_cluster
from mlperf_mig.runner.jobs import LAYOUT_FOLDER, USER_CONF
from mlperf_mig.runner.plan import RunPlan
from mlperf_mig.runner.results import RESULTS_FILE, InstanceRun, RunResult
from mlperf_mig.runner.rounds import IndependentRounds, Rounds, UnifiedRounds, instance_result
from mlperf_mig.runner.speed import record_speeds
from mlperf_mig.runner.supervisor import WorkerOutcome, observe_workers

if TYPE_CHECKING:
    from mlperf_mig.telemetry import RunTelemetry
    from mlperf_mig.telemetry.recorder import RunRecorder

log = logging.getLogger(__name__)


# --- helpers ----------------------------------------------------------------------------------------
class ClusterRounds(Protocol):
    """What an open cluster session hands the runner: the rounds of a plan on its nodes (Ray
    actors instead of worker processes). The runner imports nothing of cluster/."""

    @property
    def spec(self) -> ClusterSpec: ...

    def rounds(self, plan: RunPlan, outdir: Path, stream: TextIO | None) -> Rounds:
        """The plan's rounds (independent or unified) on the cluster's nodes."""
        ...


_handed: list[ClusterRounds] = []


@contextlib.contextmanager
def rounds_handed(cluster: ClusterRounds | None) -> Iterator[None]:
    """Plans on cluster `cluster.spec` run their rounds on it during the block; None hands
    nothing (runs on this host)."""
    if cluster is None:
        yield
        return
    _handed.append(cluster)
    try:
        yield
    finally:
        _handed.remove(cluster)


def choose_rounds(plan: RunPlan, outdir: Path, stream: TextIO | None) -> Rounds:
    """The kind of round the plan runs, chosen once: independent or unified, local or on a
    Ray cluster's nodes (handed over by the session that placed the plan there)."""
    if plan.deployment.cluster is not None:
        return _cluster_of(plan.deployment.cluster).rounds(plan, outdir, stream)
    return (UnifiedRounds if plan.mode == "unified" else IndependentRounds)(plan, outdir, stream)


def _cluster_of(cluster: str) -> ClusterRounds:
    """The session handed for the plan's cluster; ClusterError when none is open."""
    spec = parse_cluster(cluster)
    for handed in reversed(_handed):
        if handed.spec == spec:
            return handed
    raise errors.ClusterError(
        f"the plan runs on Ray cluster {cluster}, but no session of it is open; run it through "
        "mlperf_mig.run / sweep (or the CLI), which open it"
    )


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
                performance=None if unified else instance_result(perf),
                accuracy=None if unified else instance_result(acc),
                dispatched_samples=None if served is None else served.get(slot.name, 0),
                gpu_index=slot.gpu_index,
                cpu_share=slot.cpu_share,
                cpu_budget=slot.cpu_budget,
                cpu_used=None
                if perf is None or perf.cpu_per_s is None
                else round(perf.cpu_per_s, 4),
            )
        )
    return runs


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
    """Total throughput of a scenario-1 run with the same settings in a sibling folder.

    Each sibling's results.json is read bounded (runner/results.py: a regular file, not a
    link, of limited size and nesting); one that cannot be read is skipped with a note, never
    the end of the run that measured just now."""
    for candidate in sibling_indexes(outdir, RESULTS_FILE):
        try:
            other = RunResult.load(candidate)
        except errors.MlperfMigError as exc:
            skipped_sibling(candidate, exc)
            continue
        if other.scenario == 1 and other.settings_key == plan.settings_key and other.ok:
            return other.total_throughput, str(candidate.parent)
    return None, None


def sibling_indexes(outdir: Path, name: str) -> list[Path]:
    """The files `name` in the folders next to `outdir` that are candidates for its baseline:
    plain folders (no link is followed out of the folder next to ours) holding `name` as
    anything but a link (a FIFO or a huge file is refused by the bounded reader, with a note)."""
    found = []
    try:
        siblings = sorted(outdir.parent.iterdir())
    except OSError as exc:
        log.warning("no baseline looked for next to %s: %s", printable(outdir), exc)
        return []
    for folder in siblings:
        candidate = folder / name
        with contextlib.suppress(OSError):
            plain = folder != outdir and not folder.is_symlink() and folder.is_dir()
            if plain and os.path.lexists(candidate) and not candidate.is_symlink():
                found.append(candidate)
    return found


def skipped_sibling(candidate: Path, exc: BaseException) -> None:
    """The note for a sibling the baseline search could not read."""
    log.warning("baseline search: skipped %s (%s)", printable(candidate), printable(exc))


def _given_baseline(
    baseline: RunResult | str | os.PathLike[str], plan: RunPlan
) -> tuple[float | None, str | None]:
    other = baseline if isinstance(baseline, RunResult) else RunResult.load(baseline)
    if (other.benchmark, other.loadgen_scenario) != (plan.benchmark.name, plan.mlperf_scenario):
        raise SettingsError(
            f"baseline is {other.benchmark} {other.loadgen_scenario} but this run is "
            f"{plan.benchmark} {plan.mlperf_scenario} (LoadGen scenario); pass a baseline of the same"
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


def execute(
    plan: RunPlan,
    *,
    progress: bool | TextIO = True,
    baseline: RunResult | str | os.PathLike[str] | None = None,
) -> RunResult:
    """Run `plan`: engines, performance round, accuracy round; write and return the RunResult.

    Whatever ends the run (Ctrl-C or SIGTERM in any round, the engine builds included),
    results.json is written with what is known, marked interrupted."""
    outdir = ensure_writable_dir(plan.outdir)
    stream = (sys.stderr if progress is True else progress) or None
    atomic_write_json(outdir / "plan.json", plan.to_dict())
    started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    began = time.monotonic()
    rounds = choose_rounds(plan, outdir, stream)
    known: dict[str, dict[str, WorkerOutcome]] = {"performance": {}, "accuracy": {}}

    def save(interrupted: bool) -> None:
        """results.json of what is known so far."""
        elapsed = time.monotonic() - began
        _assemble(
            plan, rounds, known["performance"], known["accuracy"], interrupted, started_at, elapsed
        ).save(outdir)

    def checkpoint(phase: str) -> Callable[[WorkerOutcome], None]:
        """Write results.json (marked incomplete) as each worker of `phase` finishes, so that
        whatever ends the run later, what finished is on disk."""

        def write(outcome: WorkerOutcome) -> None:
            known[phase][outcome.name] = outcome
            save(True)

        return write

    recorder = _open_telemetry(plan)
    try:
        try:
            rounds.build_engines()
        except KeyboardInterrupt:
            save(True)  # nothing measured yet, but the folder says what happened
            raise
        performance, interrupted, telemetry = _performance_round(
            plan, rounds, recorder, checkpoint("performance")
        )
    finally:
        if recorder is not None:
            recorder.close()
    accuracy: dict[str, WorkerOutcome] = {}
    passed = rounds.passed(performance)
    if plan.accuracy and not interrupted and passed:
        with _performance_user_conf_kept([outdir / f for f in rounds.folders(passed)]):
            accuracy, interrupted = rounds.run("accuracy", passed, checkpoint("accuracy"))
    verdicts: dict[str, Any] = {}
    if plan.compliance and not interrupted:
        verdicts, interrupted = _compliance(plan, outdir, rounds, performance, accuracy)
    result = _assemble(
        plan, rounds, performance, accuracy, interrupted, started_at, time.monotonic() - began
    )
    if verdicts:
        result = attrs.evolve(
            result,
            instances=[
                attrs.evolve(i, compliance=verdicts.get(i.name, ())) for i in result.instances
            ],
            layout_compliance=verdicts.get(LAYOUT_FOLDER, ()),
        )
    if baseline is not None:
        base, source = _given_baseline(baseline, plan)
    elif plan.deployment.scenario == 1:
        base, source = result.total_throughput, "this run"
    else:
        base, source = find_baseline(plan, outdir)
    result = attrs.evolve(
        result, baseline_throughput=base, baseline_source=source, telemetry=telemetry
    )
    result.save(outdir)
    record_speeds(plan, result)  # the next plan's estimates and hang limit (runner/speed.py)
    if interrupted:
        raise KeyboardInterrupt
    return result


def _open_telemetry(plan: RunPlan) -> RunRecorder | None:
    """The run's telemetry sampler, with idle readings taken now, before anything of the run
    is loaded; None with telemetry=False."""
    if not plan.telemetry:
        return None
    from mlperf_mig.telemetry.recorder import RunRecorder

    recorder = RunRecorder.open(plan)
    recorder.measure_idle()
    return recorder


def _performance_round(
    plan: RunPlan,
    rounds: Rounds,
    recorder: RunRecorder | None,
    on_finish: Callable[[WorkerOutcome], None],
) -> tuple[dict[str, WorkerOutcome], bool, RunTelemetry | None]:
    """The performance round, sampled by the recorder (from the moment its workers start to
    the moment the last ends); the telemetry is summarised over the timed window the LoadGen
    logs of the round's folders have in common, and the series written to telemetry.csv."""
    names = [s.name for s in plan.slots]
    if recorder is None:
        return *rounds.run("performance", names, on_finish), None
    # the sampler runs for the whole block; the supervisor tells its watch of every worker
    with recorder.sampling(), observe_workers(recorder.watch):
        performance, interrupted = rounds.run("performance", names, on_finish)
    outdir = Path(plan.outdir)
    logs = [outdir / folder / "performance" for folder in rounds.folders(names)]
    return performance, interrupted, recorder.finish(outdir, logs)


def _compliance(
    plan: RunPlan,
    outdir: Path,
    rounds: Rounds,
    performance: Mapping[str, WorkerOutcome],
    accuracy: Mapping[str, WorkerOutcome],
) -> tuple[dict[str, Any], bool]:
    """The audit rounds after the accuracy round (runner/audits.py): of each instance whose
    performance and accuracy runs finished, or of the layout; the others' audits are not run."""
    from mlperf_mig.runner.audits import REFERENCE_FOLDER, not_run, run_audits

    folders = rounds.folders([s.name for s in plan.slots])
    ready = [
        f
        for f in folders
        if f in performance and performance[f].ok and f in accuracy and accuracy[f].ok
    ]

    def reference_round(names: list[str]) -> tuple[dict[str, WorkerOutcome], bool]:
        """The performance test again, into its own folder, bracketing the short audits."""
        again = copy.copy(rounds)
        again.outdir = outdir / REFERENCE_FOLDER
        return again.run("performance", names)

    verdicts, interrupted = run_audits(
        plan,
        outdir,
        rounds.run,
        rounds.instances_of(ready),
        ready,
        reference_round=reference_round,
        performance=performance,
    )
    for folder in folders:
        if folder not in ready and not interrupted:
            verdicts[folder] = not_run(
                plan, outdir, folder, "its performance or accuracy run did not finish"
            )
    return verdicts, interrupted


def _precision(specs: Mapping[str, Any], plan: RunPlan) -> str:
    built = sorted({spec.precision for spec in specs.values() if spec is not None})
    return ",".join(built) if built else (plan.precision or "none (null backend)")


def _assemble(
    plan: RunPlan,
    rounds: Rounds,
    performance: Mapping[str, WorkerOutcome],
    accuracy: Mapping[str, WorkerOutcome],
    interrupted: bool,
    started_at: str,
    duration_s: float,
) -> RunResult:
    from mlperf_mig.placement.deployment import parts_to_dicts, system_id

    layout = rounds.layout(performance, accuracy)
    runs = _instance_runs(plan, performance, accuracy, layout.served)
    return RunResult(
        gpu=plan.gpu,
        layout=plan.layout,
        system_id=system_id(plan.deployment.parts),
        scenario=plan.deployment.scenario,
        partitioning=plan.deployment.partitioning,
        mode=plan.mode,
        benchmark=plan.benchmark.name,
        loadgen_scenario=plan.mlperf_scenario,
        backend=plan.backend,
        device=_device_of(runs, performance),
        precision=_precision(rounds.specs, plan),
        variant=plan.variant,
        preset=plan.preset,
        synthetic_weights=plan.model_path is None,
        synthetic_data=plan.dataset is None,
        outdir=plan.outdir,
        settings_key=plan.settings_key,
        started_at=started_at,
        duration_s=round(duration_s, 2),
        instances=runs,
        layout_result=layout.result,
        layout_accuracy=layout.accuracy,
        layout_status=layout.status,
        layout_error=layout.error,
        interrupted=interrupted,
        hosts=tuple(dict.fromkeys(slot.host for slot in plan.slots if slot.host))
        or (socket.gethostname(),),
        cluster=rounds.cluster_facts(performance),
        gpus=parts_to_dicts(plan.deployment.parts, plan.slots),
        host_notes=plan.host_notes,
        emulation_notes=plan.deployment.notes,
    )
