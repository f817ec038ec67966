"""The rounds of a run across Ray nodes: the same outcomes as a local round, from actors.

Independent mode keeps the study's method: one actor per instance on its node, each with its own
LoadGen, all released together by the barrier actor once every instance has loaded its model and
samples (LoadGen's first load callback has run); each records when its node released it, and the
spread of those instants is the run's start skew. Unified mode is LoadGen over the network (as
MLPerf's network division does): the coordinator runs on the driver as locally, and each instance
is an actor on its node whose data channel the coordinator's process is handed, to speak the local
serving protocol over it (serving.py).

Every ending returns one outcome per instance, as the local supervisor does: ok, raised, crashed
(the actor or its node died), hung (missed its deadline, killed) or interrupted (Ctrl-C, SIGTERM).
No actor outlives its round.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import time
from collections.abc import Callable, Mapping, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import attrs

from mlperf_mig._io import atomic_write_bytes
from mlperf_mig.cluster.actors import (
    InstanceActor,
    RemoteJob,
    RoundBarrier,
    actor_errors,
    remove_scratch,
    scratch_folder,
    write_files,
)
from mlperf_mig.cluster.inventory import pinned
from mlperf_mig.cluster.ray_api import RayActor, RayApi, RayRef
from mlperf_mig.errors import ClusterError
from mlperf_mig.placement.deployment import InstanceSlot
from mlperf_mig.runner.plan import RunPlan
from mlperf_mig.runner.progress import ProgressDisplay
from mlperf_mig.runner.round_clock import RoundClock, interrupted_error
from mlperf_mig.runner.rounds import IndependentRounds, OnFinish, UnifiedRounds
from mlperf_mig.runner.supervisor import WorkerOutcome

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from mlperf_mig.engines import EngineSpec
    from mlperf_mig.harness.task import InstanceTask
    from mlperf_mig.runner.plan import EngineRequest


log = logging.getLogger(__name__)

_POLL_S = 0.2
_BARRIER_CALL_S = 30.0
_SCRATCH_S = 30.0  # to remove the scratch folders killed actors left
_CLOSE_S = 60.0  # for the serving actors to close their models after a unified test
# Unified over the network: the dispatcher's window of each instance (batches in flight, in
# proportion to its weight) is this many times a local one's, to cover a call's round trip.
# Scaling every weight alike leaves the shares of the dispatch unchanged.
REMOTE_WINDOW_SCALE = 4


def head_node(ray: RayApi) -> str:
    """The ID of the cluster's head node (the one running the GCS), else this driver's node."""
    for node in ray.nodes():
        if node.get("Alive") and "node:__internal_head__" in node.get("Resources", {}):
            return node["NodeID"]
    return ray.get_runtime_context().get_node_id()


def slot_node(slot: InstanceSlot) -> str:
    """The Ray node the cluster placement put the instance on (each of a cluster's has one)."""
    if slot.node is None:
        raise ClusterError(
            f"instance {slot.name} has no Ray node: a cluster round runs only a plan placed on "
            "the cluster's nodes; make the plan with the cluster session"
        )
    return slot.node


def start_actor(
    ray: RayApi, slot: InstanceSlot, env: Mapping[str, str], scratch_token: str | None = None
) -> RayActor:
    """A fresh instance actor pinned to the slot's node (never restarted: a lost one is lost);
    `scratch_token` names its scratch folder there (actors.scratch_folder)."""
    remote = ray.remote(InstanceActor)
    return remote.options(
        num_cpus=0,
        max_restarts=0,
        max_concurrency=2,
        scheduling_strategy=pinned(slot_node(slot)),
        name=None,
    ).remote(slot.name, dict(env), slot.cpus, scratch_token)


def remove_scratch_folders(
    ray: RayApi, nodes: Mapping[str, str], token: str, timeout_s: float = _SCRATCH_S
) -> None:
    """Have each node remove the scratch folders of the round `token` that instances `nodes`
    (name -> node) left (their actors were killed), waiting at most `timeout_s`; what could not
    be removed (a node gone with its files) is logged."""
    by_node: dict[str, list[str]] = {}
    for name, node in nodes.items():
        by_node.setdefault(node, []).append(name)
    if not by_node:
        return
    task = ray.remote(remove_scratch)
    refs = {
        task.options(num_cpus=0, max_retries=0, scheduling_strategy=pinned(node)).remote(
            token, names
        ): node
        for node, names in by_node.items()
    }
    done, pending = ray.wait(list(refs), num_returns=len(refs), timeout=timeout_s)
    for ref in done:
        try:
            for folder in ray.get(ref):
                log.info("removed the scratch folder %s on node %s", folder, refs[ref])
        except Exception as exc:  # the node is gone, and its files with it
            log.warning(
                "could not remove the scratch folders of %s on node %s: %s",
                ", ".join(by_node[refs[ref]]),
                refs[ref],
                " ".join(str(exc).split())[:300],
            )
    for ref in pending:
        ray.cancel(ref, force=True)
        log.warning(
            "node %s did not remove the scratch folders of %s within %.0f s (%s)",
            refs[ref],
            ", ".join(by_node[refs[ref]]),
            timeout_s,
            scratch_folder(token, by_node[refs[ref]][0]).parent,
        )


def kill_all(ray: RayApi, actors: Mapping[str, RayActor]) -> None:
    """Kill every actor of the round (a dead one is a no-op)."""
    for actor in actors.values():
        try:
            ray.kill(actor, no_restart=True)
        except Exception as exc:  # already gone with its node: nothing left to stop
            log.debug("kill: %s", exc)


class _Display:
    """The local progress display, or nothing when progress is off."""

    def __init__(
        self, names: list[str], phase: str, expected_s: float | None, stream: TextIO | None
    ) -> None:
        self._display = (
            ProgressDisplay(names, phase=phase, expected_s=expected_s, stream=stream)
            if stream
            else None
        )

    def event(self, name: str, what: str) -> None:
        if self._display:
            self._display.event(name, what)

    def progress(self, counts: Mapping[str, int]) -> None:
        if self._display:
            for name, completed in counts.items():
                self._display.progress(name, completed)
            self._display.tick()

    def close(self) -> None:
        if self._display:
            self._display.close()


def _outcome(name: str, reply: Mapping[str, Any]) -> WorkerOutcome:
    log_tail = None
    if reply["status"] != "ok":
        log_tail = reply.get("files", {}).get("worker.log", b"")[-2000:].decode("utf-8", "replace")
    return WorkerOutcome(
        name=name,
        status=reply["status"],
        value=reply.get("value"),
        error=reply.get("error"),
        traceback=reply.get("traceback"),
        log_tail=log_tail,
        started_ns=reply.get("started_ns"),
        cpu_per_s=reply.get("cpu_per_s"),
    )


@attrs.frozen(kw_only=True)
class RoundInput:
    """What a round across the nodes gets from the executor, the same in both modes."""

    plan: RunPlan
    outdir: Path
    tasks: Mapping[str, InstanceTask]  # by instance name; its engine is built on the node
    mode: str  # "performance" or "accuracy"
    stream: TextIO | None  # progress display, or None
    on_finish: Callable[[WorkerOutcome], None] | None
    specs: MutableMapping[str, EngineSpec]  # by engine key: what the nodes built (filled in here)


class _OnNodes:
    """What both kinds of round do differently on a cluster: engines are built (or reused) by
    each node in its own cache as its instances start, and results.json names the cluster."""

    plan: RunPlan
    outdir: Path
    stream: TextIO | None
    specs: dict[str, Any]

    def build_engines(self) -> None:
        """Nothing to build here: each node builds its instances' engines (their specs come back
        with the instances' results)."""

    def _input(self, mode: str, names: list[str], on_finish: OnFinish | None) -> RoundInput:
        from mlperf_mig.runner.jobs import instance_task

        plan = self.plan
        tasks = {
            slot.name: instance_task(
                plan,
                name=slot.name,
                outdir=self.outdir,
                mode=mode,
                engine=None,
                threads=slot.threads,
                profile=plan.settings_profile(slot),
            )
            for slot in plan.slots
            if slot.name in names
        }
        return RoundInput(
            plan=plan,
            outdir=self.outdir,
            tasks=tasks,
            mode=mode,
            stream=self.stream,
            on_finish=on_finish,
            specs=self.specs,
        )

    def cluster_facts(self, performance: Mapping[str, WorkerOutcome]) -> dict[str, Any] | None:
        """The cluster, its nodes, how the instances were grouped into GPUs, the start skew."""
        return {
            "cluster": self.plan.deployment.cluster,
            "nodes": sorted({slot.node for slot in self.plan.slots if slot.node}),
            "grouping": self.plan.deployment.grouping,
            "start_skew_ms": start_skew_ms(performance),
        }


class ClusterIndependentRounds(_OnNodes, IndependentRounds):
    """Independent rounds with one instance actor per instance on its node."""

    def run(
        self, mode: str, names: list[str], on_finish: OnFinish | None = None
    ) -> tuple[dict[str, WorkerOutcome], bool]:
        return independent_round(self._input(mode, names, on_finish))


class ClusterUnifiedRounds(_OnNodes, UnifiedRounds):
    """Unified rounds: the coordinator on the driver, serving actors on the nodes."""

    def run(
        self, mode: str, names: list[str], on_finish: OnFinish | None = None
    ) -> tuple[dict[str, WorkerOutcome], bool]:
        return unified_round(self._input(mode, names, on_finish))


def independent_round(job: RoundInput) -> tuple[dict[str, WorkerOutcome], bool]:
    """One instance actor per task, on its node; returns outcomes and whether interrupted."""
    import ray

    from mlperf_mig.runner.jobs import INSTANCE_ENTRY, instance_env

    plan = job.plan
    slots = {slot.name: slot for slot in plan.slots if slot.name in job.tasks}
    requests = {e.key: e for e in plan.engines}
    display = _Display(
        list(slots), job.mode, plan.expected_s if job.mode == "performance" else None, job.stream
    )
    # on the head node, whose loss ends the cluster anyway: on an instance's node the barrier
    # would die with that node (and on local:N the driver's own node may be any of them)
    barrier = (
        ray.remote(RoundBarrier)
        .options(num_cpus=0, max_restarts=0, scheduling_strategy=pinned(head_node(ray)))
        .remote()
    )
    actors: dict[str, RayActor] = {}
    refs: dict[RayRef, str] = {}
    outcomes: dict[str, WorkerOutcome] = {}
    interrupted = False
    # names the instances' scratch folders on their nodes: this driver and a random token
    token = f"{os.getpid()}-{secrets.token_hex(4)}"
    replied: set[str] = set()  # actors that ended their job (and removed their folder)

    def finish(name: str, outcome: WorkerOutcome) -> None:
        if outcome.status in ("ok", "raised"):
            replied.add(name)
        outcomes[name] = outcome
        display.event(name, outcome.status)
        if job.on_finish is not None:
            job.on_finish(outcome)

    try:
        for name, slot in slots.items():
            actors[name] = start_actor(ray, slot, instance_env(slot), token)
            remote_job = RemoteJob(
                name=name,
                entry=plan.worker_entry or INSTANCE_ENTRY,
                task=job.tasks[name],
                engine=requests.get(plan.engine_of[name]),
                ready_timeout_s=plan.timeouts.ready_s,
            )
            refs[actors[name].run.remote(remote_job, barrier, str(job.outdir / name))] = name
            display.event(name, "started")
        _wait(ray, job, refs, actors, barrier, display, finish)
    except KeyboardInterrupt:
        interrupted = True
        log.warning("interrupted: stopping %d instance actors", len(actors) - len(outcomes))
        for name in slots:
            if name not in outcomes:
                finish(
                    name, WorkerOutcome(name=name, status="interrupted", error=interrupted_error())
                )
    finally:
        kill_all(ray, {**actors, "barrier": barrier})
        # a killed actor (Ctrl-C, hung, a lost barrier) left its scratch folder on its node
        left = [n for n in actors if n not in replied]
        remove_scratch_folders(ray, {n: slot_node(slots[n]) for n in left}, token)
        if (plan.deployment.cluster or "").startswith("local:"):
            # the emulated nodes are this machine: what a killed node's actor left is here too
            remove_scratch(token, left)
        display.close()
    return outcomes, interrupted


def _wait(
    ray: RayApi,
    job: RoundInput,
    refs: dict[RayRef, str],
    actors: Mapping[str, RayActor],
    barrier: RayActor,
    display: _Display,
    finish: Callable[[str, WorkerOutcome], None],
) -> None:
    """Collect every actor's reply; release the barrier when all live ones are at it; keep the
    round's clock (until every instance is at the barrier, then until all are done)."""
    from ray import exceptions

    from mlperf_mig.engines import EngineSpec

    barrier_lost: tuple[type[BaseException], ...] = (*actor_errors(), exceptions.GetTimeoutError)
    clock = RoundClock(job.plan.timeouts)
    pending = dict(refs)
    announced: set[str] = set()
    trouble_since: float | None = None
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1, timeout=_POLL_S)
        for ref in done:
            name = pending.pop(ref)
            try:
                reply = ray.get(ref)
            except actor_errors() as exc:
                finish(
                    name,
                    WorkerOutcome(
                        name=name,
                        status="crashed",
                        error=f"its actor or node died ({type(exc).__name__}: {' '.join(str(exc).split())[:300]})",
                    ),
                )
                continue
            write_files(job.outdir / name, reply.get("files", {}), atomic_write_bytes)
            if reply.get("engine"):
                job.specs[job.plan.engine_of[name]] = EngineSpec.from_dict(reply["engine"])
            finish(name, _outcome(name, reply))
        try:
            arrived, counts = ray.get(barrier.state.remote(), timeout=_BARRIER_CALL_S)
            trouble_since = None
        except exceptions.ActorUnavailableError:
            # transient (a connection reset as another node went down): ask again next time,
            # and give the barrier up only when it stays unreachable
            trouble_since = trouble_since or time.monotonic()
            if time.monotonic() - trouble_since < _BARRIER_CALL_S:
                continue
            _lose_round(ray, pending, actors, finish, "ActorUnavailableError")
            return
        except barrier_lost as exc:
            _lose_round(
                ray,
                pending,
                actors,
                finish,
                f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}",
            )
            return
        for name in arrived:
            if name not in announced:
                announced.add(name)
                display.event(name, "ready")
        display.progress(counts)
        if not clock.released and set(pending.values()) <= set(arrived):
            try:
                ray.get(barrier.release.remote(), timeout=_BARRIER_CALL_S)
            except barrier_lost as exc:
                _lose_round(
                    ray,
                    pending,
                    actors,
                    finish,
                    f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}",
                )
                return
            clock.release()
            log.info("cluster start barrier released")
        if clock.remaining() <= 0:
            error = clock.overdue()
            for ref, name in list(pending.items()):
                ray.kill(actors[name], no_restart=True)
                finish(name, WorkerOutcome(name=name, status="hung", error=error))
                del pending[ref]


def _lose_round(
    ray: RayApi,
    pending: dict[RayRef, str],
    actors: Mapping[str, RayActor],
    finish: Callable[[str, WorkerOutcome], None],
    why: str,
) -> None:
    """The round's start barrier is gone: every instance still running is stopped and lost."""
    kill_all(ray, {name: actors[name] for name in pending.values()})
    for name in pending.values():
        finish(
            name,
            WorkerOutcome(
                name=name, status="crashed", error=f"the round's start barrier was lost ({why})"
            ),
        )
    pending.clear()


def start_skew_ms(outcomes: Mapping[str, WorkerOutcome]) -> float | None:
    """Spread of the instants the nodes released their LoadGen tests (ms); None below two."""
    started = [o.started_ns for o in outcomes.values() if o.started_ns is not None]
    if len(started) < 2:
        return None
    return round((max(started) - min(started)) / 1e6, 3)


def unified_round(job: RoundInput) -> tuple[dict[str, WorkerOutcome], bool]:
    """The layout's one LoadGen on the driver, dispatching to serving actors on the nodes over
    their data channels, which the coordinator's process is handed (no relay on the driver)."""
    import ray

    from mlperf_mig.cluster.serving import AUTHKEY_BYTES, ServeActor, connect_channel
    from mlperf_mig.engines import EngineSpec
    from mlperf_mig.runner.jobs import (
        LAYOUT_FOLDER,
        SupervisedRound,
        instance_env,
        instance_task,
        sample_capacity,
        unified_entries,
    )
    from mlperf_mig.runner.unified import CoordinatorJob, SharedSamples
    from mlperf_mig.runner.worker import WorkerJob

    plan = job.plan
    layout_task = instance_task(
        plan,
        name=LAYOUT_FOLDER,
        outdir=job.outdir,
        mode=job.mode,
        engine=None,
        threads=None,
        profile=None,
    )
    layouts, performance_count, capacity = sample_capacity(plan, layout_task)
    slots = [slot for slot in plan.slots if slot.name in job.tasks]
    requests = {e.key: e for e in plan.engines}
    actors = {
        slot.name: ray.remote(ServeActor)
        .options(num_cpus=0, max_restarts=0, scheduling_strategy=pinned(slot_node(slot)))
        .remote(slot.name, instance_env(slot), slot.cpus, capacity)
        for slot in slots
    }
    outcomes: dict[str, WorkerOutcome] = {}
    channels: dict[str, Connection] = {}  # each actor's data channel (cluster/serving.py)
    authkey = os.urandom(AUTHKEY_BYTES)  # this round's; reaches the actors through Ray only
    try:
        opened = _open_all(ray, job, slots, actors, requests, outcomes, authkey)
        nodes = {slot.name: slot.node for slot in slots}
        for name, reply in list(opened.items()):
            # every step has a deadline and fails naming the node (serving.py)
            who = f"instance {name} on node {nodes[name]}"
            try:
                channels[name] = connect_channel(reply.get("address"), authkey, node=who)
                _measure_round_trip(plan, layout_task, name, reply, opened, channels, capacity, who)
            except (ClusterError, OSError, EOFError) as exc:  # its node went away, or stalled
                outcomes[name] = WorkerOutcome(
                    name=name,
                    status="crashed",
                    error=f"its data channel failed: {exc}"
                    if isinstance(exc, ClusterError)
                    else f"its data channel failed ({type(exc).__name__}: {exc}) ({who})",
                )
                del opened[name]
        for name, reply in opened.items():
            if reply.get("engine"):
                job.specs[plan.engine_of[name]] = EngineSpec.from_dict(reply["engine"])
        batch_size = min((r["batch_size"] for r in opened.values()), default=1)
        round_ = SupervisedRound(
            plan, job.mode, [LAYOUT_FOLDER], job.stream, on_finish=job.on_finish
        )
        links = [channels.get(slot.name) or _closed_link(round_) for slot in slots]
        # the instances' targets as the driver measured them: rows only, no cached target,
        # and a copy of the samples to fill at each load (runner/unified.py)
        preset = tuple(
            ("target", opened[slot.name]["target"], True, None, True)
            if slot.name in opened
            else None
            for slot in slots
        )
        with SharedSamples(layouts, capacity) as samples:
            coordinator = WorkerJob(
                name=LAYOUT_FOLDER,
                entry=unified_entries(plan.benchmark)[0],
                payload=CoordinatorJob(
                    task=layout_task,
                    samples=samples.specs,
                    performance_count=performance_count,
                    links=tuple(links),
                    names=tuple(s.name for s in slots),
                    weights=tuple(REMOTE_WINDOW_SCALE * float(s.compute_slices) for s in slots),
                    batch_size=batch_size,
                    synthetic_weights=plan.model_path is None,
                    ready_timeout_s=plan.timeouts.ready_s,
                    reply_timeout_s=plan.timeouts.run_s / 2,  # as locally: a silent node is dropped
                    preset_targets=preset,
                ),
                log_path=str(job.outdir / LAYOUT_FOLDER / "worker.log"),
            )

            def handed_over() -> None:  # the coordinator has its own ends now
                for link in links:
                    link.close()

            outcomes.update(round_.run([coordinator], after_start=handed_over))
        for name, outcome in _close_serving(
            ray, {n: actors[n] for n in opened}, round_.interrupted
        ).items():
            outcomes.setdefault(name, outcome)
        return outcomes, round_.interrupted
    except KeyboardInterrupt:
        for slot in slots:
            outcomes.setdefault(
                slot.name,
                WorkerOutcome(name=slot.name, status="interrupted", error=interrupted_error()),
            )
        return outcomes, True
    finally:
        for channel in channels.values():
            with contextlib.suppress(OSError):
                channel.close()
        kill_all(ray, actors)


def _measure_round_trip(
    plan: RunPlan,
    layout_task: InstanceTask,
    name: str,
    reply: dict[str, Any],
    opened: Mapping[str, Mapping[str, Any]],
    channels: Mapping[str, Connection],
    capacity: int,
    who: str,
) -> None:
    """Lower the instance's target (a rate: Offline, Server) to what the driver sees over its
    data channel: frames of rows of the node's copy of the samples, of the size the dispatcher
    will send it (a chunk in Offline, a batch in Server). A generative workload's target
    stands as its node timed it: a request is a message of a few ids each way against the steps
    of its generation, and its node answers no frames of rows."""
    import numpy as np

    from mlperf_mig.cluster.serving import round_trip_rate
    from mlperf_mig.harness.sut import payload_layout
    from mlperf_mig.runner.unified import chunk_samples, largest_chunk

    if reply["target"] is None or plan.loadgen_scenario not in ("Offline", "Server"):
        return
    if layout_task.benchmark.generates_tokens:
        return
    batch_size = int(reply["batch_size"])
    rows = batch_size
    if plan.loadgen_scenario == "Offline":
        shape, dtype = payload_layout(layout_task.benchmark)
        largest = largest_chunk(batch_size, int(np.prod(shape)) * np.dtype(dtype).itemsize)
        layout_rate = sum(float(r["target"] or 0.0) for r in opened.values())
        rows = chunk_samples(layout_rate, 1.0, batch_size, largest)
    rate = round_trip_rate(channels[name], min(rows, capacity), node=who)
    log.info(
        "%s: target %.0f on its node, %.0f samples/s from the driver (frames of %d rows)",
        name,
        reply["target"],
        rate,
        min(rows, capacity),
    )
    reply["target"] = min(reply["target"], rate)


def _closed_link(round_: Any) -> Connection:
    """A link whose other end is closed: the coordinator counts its instance lost at once."""
    link, other = round_.supervisor.context.Pipe()
    other.close()
    return link


def _close_serving(
    ray: RayApi, actors: Mapping[str, RayActor], interrupted: bool
) -> dict[str, WorkerOutcome]:
    """Each serving actor closes its model once the coordinator is done: how it ended, as a
    local serving worker's outcome (a model that raised while serving says what it raised)."""
    from ray import exceptions

    if interrupted:
        return {
            name: WorkerOutcome(name=name, status="interrupted", error=interrupted_error())
            for name in actors
        }
    refs = {actor.close.remote(): name for name, actor in actors.items()}
    done, pending = ray.wait(list(refs), num_returns=len(refs), timeout=_CLOSE_S)
    outcomes = {}
    for ref in done:
        name = refs[ref]
        try:
            value = dict(ray.get(ref))
        except actor_errors() as exc:
            outcomes[name] = WorkerOutcome(
                name=name, status="crashed", error=f"its actor or node died ({type(exc).__name__})"
            )
            continue
        except exceptions.RayTaskError as exc:  # its model failed to close
            cause = exc.cause if getattr(exc, "cause", None) is not None else exc
            outcomes[name] = WorkerOutcome(
                name=name, status="raised", error=f"{type(cause).__name__}: {cause}"
            )
            continue
        error = value.pop("error", None)
        if error:
            outcomes[name] = WorkerOutcome(name=name, status="raised", error=error, value=value)
        else:
            outcomes[name] = WorkerOutcome(name=name, status="ok", value=value)
    for ref in pending:
        name = refs[ref]
        outcomes[name] = WorkerOutcome(
            name=name, status="hung", error=f"its model did not close within {_CLOSE_S:g} s"
        )
    return outcomes


def _open_all(
    ray: RayApi,
    job: RoundInput,
    slots: list[InstanceSlot],
    actors: Mapping[str, RayActor],
    requests: Mapping[str, EngineRequest],
    outcomes: dict[str, WorkerOutcome],
    authkey: bytes,
) -> dict[str, dict[str, Any]]:
    """Each actor builds, opens and calibrates its model and opens its data channel; those that
    fail get their outcome now."""
    from ray import exceptions

    plan = job.plan
    refs = {
        actors[slot.name].open.remote(
            job.tasks[slot.name], requests.get(plan.engine_of[slot.name]), authkey
        ): slot.name
        for slot in slots
    }
    done, pending = ray.wait(list(refs), num_returns=len(refs), timeout=plan.timeouts.ready_s)
    opened = {}
    for ref in done:
        name = refs[ref]
        try:
            opened[name] = ray.get(ref)
        except actor_errors() as exc:
            outcomes[name] = WorkerOutcome(
                name=name, status="crashed", error=f"its actor or node died ({type(exc).__name__})"
            )
        except exceptions.RayTaskError as exc:
            cause = exc.cause if getattr(exc, "cause", None) is not None else exc
            outcomes[name] = WorkerOutcome(
                name=name,
                status="raised",
                error=f"{type(cause).__name__}: {cause}",
                traceback=str(exc),
            )
    for ref in pending:
        name = refs[ref]
        ray.kill(actors[name], no_restart=True)
        outcomes[name] = WorkerOutcome(
            name=name,
            status="hung",
            error=f"did not open its model within {plan.timeouts.ready_s:g} s; killed",
        )
    return opened
