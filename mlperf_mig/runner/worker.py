"""The child side of the one worker protocol: everything that runs inside a worker process.

A worker is a process of its own for one LoadGen test (reference/mlperf.md traps 1 and 2), forked
by multiprocessing's fork server, which has imported the harness once (supervisor.py), or
spawned where there is none. `worker_main` is its importable entry point, so the runner works
from notebooks. It sets up the process (the runner's environment and CPU affinity, then the
job's; own process group; death with the runner; log file), resolves the job's entry point from its
"module:function" path, and calls `entry(payload, before_start=..., progress=...)`.

Messages to the parent are plain tuples on a one-way pipe:
    ("ready",)                      the model and samples are loaded; waiting at the start barrier
    ("progress", completed)         samples completed so far
    ("usage", cpu_per_s)            CPU-seconds per second it used from the barrier's release to the end
    ("done", value)                 the entry's return value as plain data (to_dict() if it has one)
    ("error", kind, message, tb)    the entry raised: exception type, message and traceback text
A crash (signal, exit code) sends nothing: the parent reads it from the process sentinel.
"""

from __future__ import annotations

import ctypes
import faulthandler
import importlib
import logging
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from typing import Any, TextIO

import attrs

from mlperf_mig.emulation.cpu_budget import enter_budget
from mlperf_mig.errors import WorkerError

_PR_SET_PDEATHSIG = 1
_PROGRESS_INTERVAL_S = 0.5


@attrs.frozen(kw_only=True)
class WorkerJob:
    """What one worker process runs: an entry point by import path, its payload and its process setup."""

    name: str
    entry: str  # "package.module:function"
    payload: object  # picklable; handed to the entry as its first argument
    log_path: str
    env: Mapping[str, str] = attrs.field(factory=dict)
    cpus: tuple[int, ...] | None = None  # CPU affinity (emulated partitions); None = inherit
    wait_at_barrier: bool = True  # False for jobs that never call before_start (engine builds)


@attrs.frozen(kw_only=True)
class RunnerState:
    """What a spawned worker would inherit from the runner, taken when the round starts: a forked
    worker inherits the fork server's instead (started once, perhaps long before)."""

    env: Mapping[str, str]
    cpus: tuple[int, ...]


def resolve_entry(path: str) -> Callable[..., Any]:
    """Import 'package.module:function' and return the function."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise WorkerError(f"worker entry {path!r} is not of the form 'package.module:function'")
    function = getattr(importlib.import_module(module_name), attr, None)
    if not callable(function):
        raise WorkerError(f"worker entry {path!r}: module {module_name!r} has no function {attr!r}")
    return function


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies, so no worker outlives the runner.

    The parent of a forked worker is the fork server, which ends as soon as no runner holds the
    write end of its "alive" pipe; each forked worker holds a copy of it (for servers of its
    own), which would keep the server, and so the worker, alive after the runner is killed:
    the worker closes its copy first. A parent that died before the request is seen at once.
    """
    from multiprocessing import forkserver

    parent = os.getppid()  # read before our copy of the alive pipe closes: the server may end then

    server = forkserver._forkserver
    alive_fd = getattr(server, "_forkserver_alive_fd", None)  # CPython's, since 3.4
    if server.get_inherited_fds() is not None and alive_fd is not None:
        os.close(alive_fd)
        # a server of this worker's own would be started anew; the attribute is CPython's private
        # one, read with getattr above, which typeshed's ForkServer does not declare
        server._forkserver_alive_fd = None  # type: ignore[attr-defined]
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)


def _redirect_output(log_path: str) -> TextIO:
    """Send fd 1 and 2 (LoadGen prints there too) and Python logging to the worker's log file."""
    os.makedirs(os.path.dirname(log_path) or ".", exist_ok=True)
    log_file = open(log_path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - lives as long as the process
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(log_file.fileno(), 1)
    os.dup2(log_file.fileno(), 2)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=log_file,
        force=True,
    )
    faulthandler.enable(log_file)
    return log_file


def _plain(value: object) -> object:
    """`value` as plain data for the pipe: a record's to_dict(), anything else as it is."""
    to_dict = getattr(value, "to_dict", None)
    return to_dict() if callable(to_dict) else value


class _Channel:
    """The worker's end of the protocol: ready/progress/done/error and the start barrier."""

    def __init__(self, conn: Connection, barrier: Connection, ready_timeout_s: float) -> None:
        self._conn = conn
        self._barrier = barrier  # released at its end of file
        self._ready_timeout_s = ready_timeout_s
        self._last_progress = 0.0
        self._released: tuple[float, float] | None = None

    def before_start(self) -> None:
        self._conn.send(("ready",))
        if not self._barrier.poll(self._ready_timeout_s):  # end of file: the runner closed its end
            raise WorkerError(
                f"the runner did not release the start barrier within {self._ready_timeout_s:.0f} s"
            )
        self._barrier.close()
        self._released = (time.process_time(), time.monotonic())

    def progress(self, completed: int) -> None:
        now = time.monotonic()
        if now - self._last_progress >= _PROGRESS_INTERVAL_S:
            self._last_progress = now
            self._conn.send(("progress", int(completed)))

    def done(self, value: object) -> None:
        if self._released is not None:
            # CPU-seconds per second this process (every thread) used from the barrier's release:
            # an emulated instance's budget is checked against it
            cpu, wall = (
                time.process_time() - self._released[0],
                time.monotonic() - self._released[1],
            )
            if wall > 0:
                self._conn.send(("usage", cpu / wall))
        self._conn.send(("done", _plain(value)))

    def error(self, exc: BaseException) -> None:
        message = str(exc)
        fed = _fed_from_cache()
        if fed:  # what the cache fed this worker may be why it failed: say which files
            message += (
                f" [this worker used from the cache folder: {', '.join(fed)}; if it was put "
                "there by someone else, delete it and run again]"
            )
        self._conn.send(("error", type(exc).__name__, message, traceback.format_exc()))


def _fed_from_cache() -> list[str]:
    """The cached files this worker used (engines/cache.py), if that module was loaded."""
    cache = sys.modules.get("mlperf_mig.engines.cache")
    return [] if cache is None else cache.fed_from_cache()


def _take_runner_state(state: RunnerState, job: WorkerJob) -> None:
    """The runner's environment and CPU affinity, then the job's own (device variables such as
    CUDA_VISIBLE_DEVICES before anything can initialise CUDA)."""
    os.environ.clear()
    os.environ.update(state.env)
    os.environ.update(job.env)
    os.sched_setaffinity(0, job.cpus if job.cpus is not None else state.cpus)


def worker_main(
    conn: Connection,
    barrier: Connection,
    job: WorkerJob,
    ready_timeout_s: float,
    state: RunnerState,
) -> None:
    """Entry point of a worker: set the process up, run the entry, report, exit."""
    _take_runner_state(state, job)
    # Lead a process group of our own: the runner kills the group, so whatever this worker starts
    # dies with it, and a terminal's Ctrl-C or hangup reaches only the runner, which stops us.
    os.setpgrp()
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent owns Ctrl-C and stops us itself
    _redirect_output(job.log_path)
    log = logging.getLogger(__name__)
    log.info(
        "worker %s pid=%d entry=%s cpus=%s",
        job.name,
        os.getpid(),
        job.entry,
        sorted(os.sched_getaffinity(0)),
    )
    channel = _Channel(conn, barrier, ready_timeout_s)
    try:
        enter_budget()  # an emulated instance's CPU quota, before any thread of the entry starts
        entry = resolve_entry(job.entry)
        value = entry(job.payload, before_start=channel.before_start, progress=channel.progress)
    except BaseException as exc:
        log.exception("worker %s failed", job.name)
        channel.error(exc)
        conn.close()
        sys.exit(1)
    log.info("worker %s finished", job.name)
    channel.done(value)
    conn.close()
