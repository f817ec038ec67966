"""The two kinds of round a run is made of, behind one interface, chosen once per run.

A run is a sequence of rounds (engine builds, performance, accuracy, audits), each one LoadGen
test per process (traps 1 and 2). What differs between the aggregation modes is fixed here, once:
    IndependentRounds  one worker per instance, each with its own LoadGen; every instance's
                       folder holds its own results, and a lost worker loses that instance only
    UnifiedRounds      one LoadGen coordinator for the layout plus one serving worker per
                       instance; the results are the layout's (folder `layout`), and a lost worker
                       degrades the layout (the others serve its samples) unless the coordinator
                       itself is lost
Both start their workers as local processes here; mlperf_mig/cluster/rounds.py subclasses each
to start them as Ray actors on the cluster's nodes instead, the third way of running a round.
The executor (execute.py) asks a Rounds for the jobs to run (`build_engines`, `run`), which
folders a round's results are in (`folders`), who goes on to the next round (`passed`,
`instances_of`) and what the layout as a whole came to (`layout`).
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import attrs

from mlperf_mig import errors
from mlperf_mig.errors import WorkerError
from mlperf_mig.placement.deployment import InstanceSlot
from mlperf_mig.runner.jobs import (
    BUILD_ENTRY,
    BUILD_TIMEOUT_S,
    INSTANCE_ENTRY,
    LAYOUT_FOLDER,
    SupervisedRound,
    instance_env,
    instance_task,
    sample_capacity,
    target_reuse_env,
    unified_entries,
)
from mlperf_mig.runner.plan import RunPlan
from mlperf_mig.runner.supervisor import Timeouts, WorkerOutcome
from mlperf_mig.runner.worker import WorkerJob

if TYPE_CHECKING:
    from mlperf_mig.engines import EngineSpec
    from mlperf_mig.harness import InstanceResult
    from mlperf_mig.harness.task import InstanceTask

log = logging.getLogger(__name__)

OnFinish = Callable[[WorkerOutcome], None]


@attrs.frozen(kw_only=True)
class LayoutOutcome:
    """What a round's kind makes of the outcomes beyond each instance's own: in unified mode the
    layout's result, status and samples served per instance; in independent mode nothing."""

    result: InstanceResult | None = None
    accuracy: InstanceResult | None = None
    status: str | None = None
    error: str | None = None
    served: Mapping[str, int] | None = None  # instance -> samples it served (unified mode only)


def instance_result(outcome: WorkerOutcome | None, key: str | None = None) -> InstanceResult | None:
    """The harness result a finished worker sent back (under `key` of its value), or None."""
    if outcome is None or not outcome.ok:
        return None
    from mlperf_mig.harness import InstanceResult

    return InstanceResult.from_dict(outcome.value if key is None else outcome.value[key])


class Rounds(abc.ABC):
    """What every kind of round shares: the plan, the run folder, the engines built for it."""

    def __init__(self, plan: RunPlan, outdir: Path, stream: TextIO | None) -> None:
        self.plan = plan
        self.outdir = outdir
        self.stream = stream
        self.specs: dict[str, EngineSpec | None] = {}  # engine key -> the spec built or reused

    # --- the jobs ------------------------------------------------------------------------------
    def build_engines(self) -> None:
        """One build per distinct engine, on the device of the first instance that uses it."""
        from mlperf_mig.engines import EngineSpec

        plan = self.plan
        if not plan.engines:
            self.specs = {"null": None}
            return
        jobs = [
            WorkerJob(
                name=f"build-{request.key}",
                entry=BUILD_ENTRY,
                payload=request,
                log_path=str(self.outdir / "engines" / f"build-{request.key}.log"),
                env=request.env,
                cpus=request.cpus,
                wait_at_barrier=False,
            )
            for request in plan.engines
        ]
        # Builds have their own deadline: a TensorRT build inside a small slice can take minutes,
        # and a short --timeout meant for hung LoadGen tests must not kill it.
        timeouts = Timeouts(ready_s=BUILD_TIMEOUT_S, run_s=BUILD_TIMEOUT_S)
        round_ = SupervisedRound(plan, "engines", [j.name for j in jobs], self.stream, timeouts)
        outcomes = round_.run(jobs)
        if round_.interrupted:
            raise KeyboardInterrupt
        for request in plan.engines:
            outcome = outcomes[f"build-{request.key}"]
            if not outcome.ok:
                _reraise_build_failure(request.key, outcome)
            self.specs[request.key] = EngineSpec.from_dict(outcome.value["spec"])
            log.info("engine %s: %s", request.key, "reused" if outcome.value["reused"] else "built")

    def task(self, slot: InstanceSlot, mode: str) -> InstanceTask:
        """The harness task of one instance: its engine, threads and per-profile settings."""
        return instance_task(
            self.plan,
            name=slot.name,
            outdir=self.outdir,
            mode=mode,
            engine=self.specs[self.plan.engine_of[slot.name]],
            threads=slot.threads,
            profile=self.plan.settings_profile(slot),
        )

    def cluster_facts(self, performance: Mapping[str, WorkerOutcome]) -> dict[str, Any] | None:
        """What results.json says of the cluster the round ran on; None for local rounds."""
        return None

    @abc.abstractmethod
    def run(
        self, mode: str, names: list[str], on_finish: OnFinish | None = None
    ) -> tuple[dict[str, WorkerOutcome], bool]:
        """One round (`mode`: performance, accuracy or an audit) of the instances `names`; the
        outcomes by folder, and whether the run was interrupted."""

    @abc.abstractmethod
    def folders(self, names: list[str]) -> list[str]:
        """The folders holding the results of a round of the instances `names`."""

    @abc.abstractmethod
    def passed(self, performance: Mapping[str, WorkerOutcome]) -> list[str]:
        """The instances that go on to the accuracy round."""

    @abc.abstractmethod
    def instances_of(self, folders: list[str]) -> list[str]:
        """The instances to run so that `folders` get a round's results."""

    @abc.abstractmethod
    def layout(
        self, performance: Mapping[str, WorkerOutcome], accuracy: Mapping[str, WorkerOutcome]
    ) -> LayoutOutcome:
        """What the layout as a whole came to, beyond each instance's own outcome."""


class IndependentRounds(Rounds):
    """The study's method: one worker with its own LoadGen per instance, released together."""

    def run(
        self, mode: str, names: list[str], on_finish: OnFinish | None = None
    ) -> tuple[dict[str, WorkerOutcome], bool]:
        """One round of the instances `names`; returns the outcomes by folder, and whether the
        run was interrupted."""
        plan = self.plan
        jobs = [
            WorkerJob(
                name=slot.name,
                entry=plan.worker_entry or INSTANCE_ENTRY,
                payload=self.task(slot, mode),
                log_path=str(self.outdir / slot.name / "worker.log"),
                env={**instance_env(slot), **target_reuse_env(plan)},
                cpus=slot.cpus,
            )
            for slot in plan.slots
            if slot.name in names
        ]
        round_ = SupervisedRound(plan, mode, names, self.stream, on_finish=on_finish)
        outcomes = round_.run(jobs)
        return outcomes, round_.interrupted

    def folders(self, names: list[str]) -> list[str]:
        """The folders holding the results of a round of the instances `names`."""
        return list(names)

    def passed(self, performance: Mapping[str, WorkerOutcome]) -> list[str]:
        """The instances whose performance run finished: they go on to the accuracy round."""
        return [s.name for s in self.plan.slots if s.name in performance and performance[s.name].ok]

    def instances_of(self, folders: list[str]) -> list[str]:
        """The instances to run so that `folders` get a round's results."""
        return list(folders)

    def layout(
        self, performance: Mapping[str, WorkerOutcome], accuracy: Mapping[str, WorkerOutcome]
    ) -> LayoutOutcome:
        """Independent instances have no layout-wide result."""
        return LayoutOutcome()


class UnifiedRounds(Rounds):
    """One LoadGen for the layout, dispatching to one serving worker per instance."""

    def run(
        self, mode: str, names: list[str], on_finish: OnFinish | None = None
    ) -> tuple[dict[str, WorkerOutcome], bool]:
        """The coordinator and every instance's serving worker (`names` is not a choice here:
        the layout is served by all its instances)."""
        from mlperf_mig.harness.instance import batch_size_of
        from mlperf_mig.runner.unified import CoordinatorJob, ServeJob, SharedSamples

        plan, outdir = self.plan, self.outdir
        layout_task = instance_task(
            plan,
            name=LAYOUT_FOLDER,
            outdir=outdir,
            mode=mode,
            engine=None,
            threads=None,
            profile=None,
        )
        layouts, performance_count, capacity = sample_capacity(plan, layout_task)
        tasks = [self.task(slot, mode) for slot in plan.slots]
        round_ = SupervisedRound(
            plan,
            mode,
            [LAYOUT_FOLDER, *(s.name for s in plan.slots)],
            self.stream,
            on_finish=on_finish,
        )
        with SharedSamples(layouts, capacity) as samples:
            pipes = [round_.supervisor.context.Pipe() for _ in plan.slots]
            coordinator = WorkerJob(
                name=LAYOUT_FOLDER,
                entry=unified_entries(plan.benchmark)[0],
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
                    # an instance silent for half the test's deadline is dropped, so that the
                    # others can still serve its samples within the deadline
                    reply_timeout_s=plan.timeouts.run_s / 2,
                ),
                log_path=str(outdir / LAYOUT_FOLDER / "worker.log"),
            )
            workers = [
                WorkerJob(
                    name=slot.name,
                    entry=plan.worker_entry or unified_entries(plan.benchmark)[1],
                    payload=ServeJob(
                        task=task, samples=samples.specs, link=b, batch_size=batch_size_of(task)
                    ),
                    log_path=str(outdir / slot.name / "worker.log"),
                    env={**instance_env(slot), **target_reuse_env(plan)},
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

    def folders(self, names: list[str]) -> list[str]:
        """The layout's one folder, whichever instances served it."""
        return [LAYOUT_FOLDER]

    def passed(self, performance: Mapping[str, WorkerOutcome]) -> list[str]:
        """When the layout's performance run finished, the instances that served to its end;
        else none (a local round starts all the instances' workers afresh anyway)."""
        coordinator = performance.get(LAYOUT_FOLDER)
        if coordinator is None or not coordinator.ok:
            return []
        return [s.name for s in self.plan.slots if s.name in performance and performance[s.name].ok]

    def instances_of(self, folders: list[str]) -> list[str]:
        """The layout's folder is served by all the instances."""
        return [s.name for s in self.plan.slots] if folders else []

    def layout(
        self, performance: Mapping[str, WorkerOutcome], accuracy: Mapping[str, WorkerOutcome]
    ) -> LayoutOutcome:
        """The layout's results; a lost serving worker is a degraded layout, not a failed one."""
        coordinator = performance.get(LAYOUT_FOLDER)
        coordinator_acc = accuracy.get(LAYOUT_FOLDER)
        # the coordinator's value when it finished (its dict of served samples and lost workers)
        finished = coordinator.value if coordinator is not None and coordinator.ok else None
        lost = finished.get("lost_workers", []) if finished is not None else []
        error = None
        if coordinator is not None and not coordinator.ok:
            error = coordinator.error
        elif lost:
            error = f"degraded: lost {', '.join(lost)}; their samples were served by the others"
        elif coordinator_acc is not None and not coordinator_acc.ok:
            error = f"accuracy run: {coordinator_acc.error}"
        return LayoutOutcome(
            result=instance_result(coordinator, "result"),
            accuracy=instance_result(coordinator_acc, "result"),
            status=coordinator.status if coordinator else "not run",
            error=error,
            served=finished["served"] if finished is not None else {},
        )


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
    raise WorkerError(
        f"engine build {key!r} {outcome.status}: {outcome.error}; log tail:\n{outcome.log_tail}"
    )
