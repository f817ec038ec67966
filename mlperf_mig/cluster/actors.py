"""What runs on the nodes: one actor per instance, and the round's barrier on the driver's side.

An instance actor is a fresh Ray worker process pinned to its node (one LoadGen test per
process, as locally). It takes its device variables and CPUs, builds (or reuses) its engine in the
node's own cache, runs its job in a scratch folder of the node and sends back the result with
every file the job wrote, paths rewritten to the driver's run folder; a job that raises sends its
traceback and files the same way. The scratch folder is named by the round (the driver's pid and
a random token) and the instance, so that the driver can have it removed on the node however the
round ends (`remove_scratch`: an actor killed on Ctrl-C, a hang or a lost barrier does not
remove its own). The barrier actor releases every instance's LoadGen test at
once (the cluster-wide start barrier) and collects progress.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import socket
import stat
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from mlperf_mig._io import JsonData
    from mlperf_mig.cluster.ray_api import RayActor
    from mlperf_mig.engines import EngineSpec
    from mlperf_mig.harness.task import InstanceTask
    from mlperf_mig.runner.plan import EngineRequest


log = logging.getLogger(__name__)

_PROGRESS_INTERVAL_S = 0.5
SCRATCH_PREFIX = "mlperf-mig-"
_SCRATCH_SETTLE_S = 0.5  # a killed actor may write a moment longer: removed until it stays gone
MAX_FILE_BYTES = 256 * 1024 * 1024  # a node's file larger than this stays there (named in the log)


def actor_errors() -> tuple[type[BaseException], ...]:
    """Ray's exceptions for an actor whose process or node is gone."""
    from ray import exceptions

    return (
        exceptions.RayActorError,
        exceptions.NodeDiedError,
        exceptions.WorkerCrashedError,
        exceptions.ObjectLostError,
        exceptions.OwnerDiedError,
    )


class RoundBarrier:
    """The cluster-wide start barrier of one round, and the instances' progress (async actor)."""

    def __init__(self) -> None:
        self._released = asyncio.Event()
        self._arrived: set[str] = set()
        self._progress: dict[str, int] = {}

    async def arrive(self, name: str) -> None:
        self._arrived.add(name)
        await self._released.wait()

    async def release(self) -> None:
        self._released.set()

    async def report(self, name: str, completed: int) -> None:
        self._progress[name] = completed

    async def state(self) -> tuple[list[str], dict[str, int]]:
        return sorted(self._arrived), dict(self._progress)


@attrs.frozen(kw_only=True)
class RemoteJob:
    """One instance's job: the entry point to call on its node, with what the node must build."""

    name: str
    entry: str  # "package.module:function", called as entry(payload, before_start=, progress=)
    task: InstanceTask  # its outdir and engine are filled in on the node
    engine: EngineRequest | None  # to build on the node; None: no engine (null backend)
    ready_timeout_s: float


def rewrite_paths(value: JsonData, old: str, new: str) -> JsonData:
    """`value` with every string that starts with the folder `old` moved under `new`."""
    if isinstance(value, str):
        return new + value[len(old) :] if value.startswith(old) else value
    if isinstance(value, Mapping):
        return {k: rewrite_paths(v, old, new) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [rewrite_paths(v, old, new) for v in value]
    return value


def collect_files(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` by relative path (those over MAX_FILE_BYTES are left out)."""
    files = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.stat().st_size <= MAX_FILE_BYTES:
            files[str(path.relative_to(folder))] = path.read_bytes()
    return files


def scratch_folder(token: str, name: str) -> Path:
    """Instance `name`'s scratch folder of the round `token` in this node's temp folder."""
    return Path(tempfile.gettempdir()) / f"{SCRATCH_PREFIX}{token}-{name}"


def remove_scratch(token: str, names: list[str]) -> list[str]:
    """Remove the scratch folders the round `token` made on this node for `names` (a Ray task
    pinned to the node, after their actors were killed); returns those removed. Only a real
    folder of that name owned by this user is removed, never what a link points to."""
    removed = []
    for name in names:
        folder = scratch_folder(token, name)
        for _ in range(10):
            try:
                info = folder.lstat()
            except FileNotFoundError:
                break
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
                log.warning("%s is not this run's scratch folder; left as it is", folder)
                break
            shutil.rmtree(folder, ignore_errors=True)
            if str(folder) not in removed:
                removed.append(str(folder))
            time.sleep(_SCRATCH_SETTLE_S)
    return removed


class InstanceActor:
    """One instance on its node (a Ray actor): runs one job in its own scratch folder."""

    def __init__(
        self,
        name: str,
        env: Mapping[str, str],
        cpus: tuple[int, ...] | None,
        scratch_token: str | None = None,
    ) -> None:
        """`scratch_token`: the round's, which names the scratch folder (scratch_folder) so
        the driver can remove it whatever happens to the actor; None: a fresh random name."""
        from mlperf_mig.emulation.cpu_budget import enter_budget

        os.environ.update(env)
        if cpus is not None:
            os.sched_setaffinity(0, cpus)
        enter_budget()  # an emulated instance's CPU quota (local:N), before its threads start
        self.name = name
        if scratch_token is None:
            self.folder = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{name}-"))
        else:
            self.folder = scratch_folder(scratch_token, name)
            self.folder.mkdir(mode=0o700)  # a name already taken is an error, never shared

    def run(self, job: RemoteJob, barrier: RayActor, driver_folder: str) -> dict[str, Any]:
        """Build the engine, run the job, and return its outcome with the files it wrote."""
        import ray

        from mlperf_mig.runner.worker import _redirect_output, resolve_entry

        log_file = _redirect_output(str(self.folder / "worker.log"))
        started: list[int] = []
        released: list[tuple[float, float]] = []  # CPU and wall clock at the barrier's release
        last = [0.0]

        def before_start() -> None:
            ray.get(barrier.arrive.remote(job.name), timeout=job.ready_timeout_s)
            started.append(time.time_ns())
            released.append((time.process_time(), time.monotonic()))

        def progress(completed: int) -> None:
            now = time.monotonic()
            if now - last[0] >= _PROGRESS_INTERVAL_S:
                last[0] = now
                barrier.report.remote(job.name, int(completed))

        reply: dict[str, Any] = {"host": socket.gethostname()}
        try:
            spec = build_on_node(job.engine)
            task = attrs.evolve(job.task, outdir=str(self.folder), engine=spec)
            value = resolve_entry(job.entry)(task, before_start=before_start, progress=progress)
            to_dict = getattr(value, "to_dict", None)
            plain = to_dict() if callable(to_dict) else value
            reply.update(status="ok", value=rewrite_paths(plain, str(self.folder), driver_folder))
            reply["engine"] = None if spec is None else spec.to_dict()
        except BaseException as exc:  # the driver gets the reason and the files, as locally
            reply.update(
                status="raised",
                error=f"{type(exc).__name__}: {exc}",
                traceback=traceback.format_exc(),
            )
        reply["started_ns"] = started[0] if started else None
        if released and time.monotonic() > released[0][1]:
            # CPU-seconds per second this actor used once released (an emulated budget's check)
            cpu, wall = time.process_time() - released[0][0], time.monotonic() - released[0][1]
            reply["cpu_per_s"] = cpu / wall
        log_file.flush()
        reply["files"] = collect_files(self.folder)
        shutil.rmtree(self.folder, ignore_errors=True)
        return reply


def build_on_node(request: EngineRequest | None) -> EngineSpec | None:
    """The EngineSpec of `request`, built or reused in this node's cache (None: no engine)."""
    if request is None:
        return None
    from mlperf_mig.engines import EngineSpec
    from mlperf_mig.runner.jobs import build_engine_job

    return EngineSpec.from_dict(build_engine_job(request)["spec"])


def write_files(
    folder: Path, files: Mapping[str, bytes], write: Callable[[Path, bytes], object]
) -> None:
    """Put a node's files into the driver's run folder (`write` is the atomic writer; what it
    returns is not used)."""
    for relative, data in files.items():
        destination = folder / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        write(destination, data)
