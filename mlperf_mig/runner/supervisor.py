"""The parent side of the one worker protocol: start workers, hold the barrier, collect outcomes.

Waits are bounded and event-driven (`multiprocessing.connection.wait` on the pipes and the process
sentinels): a crash is seen the moment the process exits, a hang when its deadline passes, and
Ctrl-C stops every worker within seconds. Each worker ends in exactly one status:
    ok           the entry returned; `value` holds its plain-data result
    raised       the entry raised; `error` is "Type: message", `traceback` the child's text
    crashed      the process died without reporting (exit code or signal in `error`)
    hung         it missed its deadline and was killed
    interrupted  the run was stopped (Ctrl-C, SIGTERM, SIGHUP) before it finished

Each worker leads its own process group, so a kill reaches whatever it started. Under
`stop_signals()` SIGTERM and SIGHUP stop a run like Ctrl-C; a second signal during the shutdown
the first one started hurries it (workers are killed at once) but never interrupts the writing of
what is already known.

Workers are started by multiprocessing's fork server (where the platform has one; 'spawn'
elsewhere): a fresh interpreter, started once per runner process and kept across rounds and
runs, that has imported the worker's modules (numpy, LoadGen, the harness and engine modules:
`PRELOAD`, none of which starts a thread when imported) and forks a worker per job. Each worker
still runs one LoadGen test in a process of its own (traps 1 and 2) and still enters through the
importable `worker_main`, so the runner works from notebooks, but no longer pays the imports
(about 0.4 s of CPU per worker). A forked worker inherits the server's state, not the runner's:
the round hands each worker the runner's environment and CPU affinity as they are when the round
starts, and `worker_main` puts them in place before anything else runs (worker.py).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from mlperf_mig.emulation.cpu_budget import remove_worker_cgroup
from mlperf_mig.runner.round_clock import RoundClock, interrupted_error
from mlperf_mig.runner.worker import RunnerState, WorkerJob, worker_main

if TYPE_CHECKING:
    from multiprocessing.context import ForkServerContext, SpawnContext
    from multiprocessing.process import BaseProcess

    from mlperf_mig._io import JsonData

    WorkerContext = ForkServerContext | SpawnContext  # what worker_context() starts workers with

log = logging.getLogger(__name__)

# What the fork server imports once for all the workers it forks. Only modules that start no
# thread when imported (a fork copies only the forking thread; a lock held by another one would
# stay locked in the worker). onnxruntime starts one, so each worker imports it itself (~0.05 s);
# numpy starts OpenBLAS threads unless OPENBLAS_NUM_THREADS=1 is set when it loads (below).
PRELOAD = (
    "numpy",
    "mlperf_loadgen",
    "mlperf_mig.cli",
    "mlperf_mig.runner.worker",
    "mlperf_mig.harness.instance",
    "mlperf_mig.engines.build",
    "mlperf_mig.engines.backends.onnxruntime",
    "mlperf_mig.runner.unified",
)
# The fork server's own environment while it starts: numpy's OpenBLAS with one thread (the
# harness does no BLAS work; ONNX Runtime and TensorRT have their own threads), and the runner's
# sys.path, so that it preloads the same files as the runner would import (a notebook may have
# put a source checkout first). Workers do not keep it: they take the runner's environment.
_SERVER_ENV = {"OPENBLAS_NUM_THREADS": "1"}
_server_lock = threading.Lock()

STATUSES = ("ok", "raised", "crashed", "hung", "interrupted")
_TERMINATE_GRACE_S = 3.0
_LOG_TAIL_CHARS = 2000

ProgressCallback = Callable[[str, int], None]
EventCallback = Callable[[str, str], None]
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class StopSignal(KeyboardInterrupt):
    """The run was stopped by a signal; `signum` says which (the CLI exits 128 + signum)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


class _StopState:
    """What stop_signals() has received: the first signal, and whether to hurry the shutdown."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.hurry = False

    def handle(self, signum: int, frame: object) -> None:
        if self.signum is None:
            self.signum = signum
            raise KeyboardInterrupt if signum == signal.SIGINT else StopSignal(signum)
        self.hurry = True  # already stopping: never raise again while results are written
        log.warning("%s during the shutdown: killing the workers now", signal.Signals(signum).name)


_active: _StopState | None = None


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """Turn SIGINT, SIGTERM and SIGHUP into one StopSignal in the main thread for the duration.

    Only the first signal raises (KeyboardInterrupt for Ctrl-C); later ones hurry the shutdown. A
    KeyboardInterrupt that leaves the block after SIGTERM or SIGHUP comes out as StopSignal with
    that signal's number. Outside the main
    thread (where Python cannot set handlers), or nested, it leaves the handlers as they are.
    """
    global _active
    if threading.current_thread() is not threading.main_thread() or _active is not None:
        yield
        return
    state = _StopState()
    previous = {signum: signal.getsignal(signum) for signum in _STOP_SIGNALS}
    for signum in _STOP_SIGNALS:
        signal.signal(signum, state.handle)
    _active = state
    try:
        yield
    except KeyboardInterrupt as exc:
        if state.signum not in (None, signal.SIGINT) and not isinstance(exc, StopSignal):
            raise StopSignal(state.signum) from None
        raise
    finally:
        _active = None
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class WorkerObserver(Protocol):
    """Told of every worker a Supervisor of this process starts and ends (the telemetry sampler
    follows each worker's CPU use and memory by its pid)."""

    def worker_started(self, name: str, pid: int) -> None: ...

    def worker_ended(self, name: str) -> None: ...


_observers: list[WorkerObserver] = []


@contextlib.contextmanager
def observe_workers(observer: WorkerObserver) -> Iterator[None]:
    """Tell `observer` of the workers started and ended while the block runs."""
    _observers.append(observer)
    try:
        yield
    finally:
        _observers.remove(observer)


def _hurry() -> bool:
    return _active is not None and _active.hurry


def _stop_reason() -> str:
    if _active is None or _active.signum in (None, signal.SIGINT):
        return "Ctrl-C"
    return signal.Signals(_active.signum).name


def kill_group(process: BaseProcess, sig: int = signal.SIGKILL) -> None:
    """Send `sig` to the worker's process group: the worker and what it started. A worker that
    has not made its group yet gets the signal alone (multiprocessing skips a reaped one)."""
    pid = process.pid
    if pid is None:
        return
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        with contextlib.suppress(ValueError, ProcessLookupError):
            if sig == signal.SIGKILL:
                process.kill()
            else:
                process.terminate()
    except PermissionError:
        log.warning("cannot signal the process group of worker pid %d", pid)


@attrs.frozen(kw_only=True)
class WorkerOutcome:
    """How one worker ended, with the tail of its log for anything but `ok`."""

    name: str
    status: str = attrs.field(validator=attrs.validators.in_(STATUSES))
    value: JsonData = None  # what the worker returned (plain data)
    error: str | None = None
    traceback: str | None = None
    log_tail: str | None = None
    started_ns: int | None = (
        None  # cluster runs: when the node released its LoadGen test (its clock)
    )
    cpu_per_s: float | None = None  # CPU-seconds per second the worker used once released

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@attrs.frozen(kw_only=True)
class Timeouts:
    """Deadlines of one round: until every worker is at the barrier, then until all are done."""

    ready_s: float = 900.0
    run_s: float = 1800.0


def worker_context() -> WorkerContext:
    """The multiprocessing context workers are started with: the fork server, running with
    `PRELOAD` imported ('spawn' where the platform has no fork server)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    with _server_lock:
        context.set_forkserver_preload(list(PRELOAD))
        # The server is started here, under its own environment, rather than by the first
        # Process.start(); a server that is running already (an earlier round, or one this process
        # started for itself) is kept as it is.
        from multiprocessing import forkserver

        server_env = {**_SERVER_ENV, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        saved = {key: os.environ.get(key) for key in server_env}
        os.environ.update(server_env)
        try:
            with main_module_hidden_if_unimportable():
                forkserver.ensure_running()
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
    return context


_main_lock = threading.Lock()


@contextlib.contextmanager
def main_module_hidden_if_unimportable() -> Iterator[None]:
    """While workers start: hide the caller's main module from multiprocessing when it has no
    file to re-run (a script on standard input, '<stdin>'; an embedded interpreter's).

    multiprocessing tells each new process to re-run the main module from its `__file__` (as
    'spawn' does); without that file every worker died with FileNotFoundError before its entry
    ran. Workers never need the main module (their entry is an import path, worker.py), so
    such a `__file__` is taken away for the moment a worker starts and put back after.
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    by_name = getattr(
        getattr(main, "__spec__", None), "name", None
    )  # `python -m`: re-imported by name
    if main is None or path is None or by_name is not None or os.path.isfile(_from_start(path)):
        yield
        return
    with _main_lock:
        del main.__file__
        try:
            yield
        finally:
            main.__file__ = path


def _from_start(path: str) -> str:
    """A main module's `__file__` as multiprocessing finds it: from the directory the program
    started in, where it is relative."""
    from multiprocessing import process

    if os.path.isabs(path):
        return path
    start = process.ORIGINAL_DIR  # type: ignore[attr-defined]  # set by CPython at import; typeshed omits it
    return os.path.join(start or "", path)


def _started_pid(process: BaseProcess) -> int:
    """The pid of a worker whose start() returned (multiprocessing sets it there)."""
    if process.pid is None:
        raise RuntimeError(f"worker process {process.name} has no pid after start()")
    return process.pid


def runner_state() -> RunnerState:
    """What a worker takes from the runner at the start of a round: its environment and CPU
    affinity now (a spawned worker would have inherited them; a forked one must be given them)."""
    return RunnerState(env=dict(os.environ), cpus=tuple(sorted(os.sched_getaffinity(0))))


def read_log_tail(path: str | Path, chars: int = _LOG_TAIL_CHARS) -> str:
    """The last `chars` characters of a log file ('' when it does not exist)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - chars))
            return handle.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""


def describe_exit(exit_code: int | None) -> str:
    """'killed by signal SIGKILL' or 'exit code 3' for a process that died without reporting."""
    if exit_code is None:
        return "still running"
    if exit_code < 0:
        try:
            return f"killed by signal {signal.Signals(-exit_code).name}"
        except ValueError:
            return f"killed by signal {-exit_code}"
    return f"exited with code {exit_code} without reporting a result"


class _Worker:
    """Book-keeping of one started worker in the parent."""

    def __init__(self, job: WorkerJob, process: BaseProcess, conn: Connection) -> None:
        self.job = job
        self.process = process
        self.conn: Connection | None = conn
        self.ready = False
        self.outcome: WorkerOutcome | None = None
        self.reported: tuple[Any, ...] | None = None
        self.cpu_per_s: float | None = None

    def finish(self, status: str, **fields: Any) -> bool:
        """Record how the worker ended; False when it had ended already."""
        if self.outcome is not None:
            return False
        tail = None if status == "ok" else read_log_tail(self.job.log_path)
        self.outcome = WorkerOutcome(
            name=self.job.name,
            status=status,
            log_tail=tail,
            **fields,
        )
        return True


class Supervisor:
    """Runs one round of worker jobs to completion; `interrupted` is set after Ctrl-C."""

    def __init__(
        self,
        *,
        timeouts: Timeouts | None = None,
        on_progress: ProgressCallback | None = None,
        on_event: EventCallback | None = None,
        on_tick: Callable[[], None] | None = None,
        on_finish: Callable[[WorkerOutcome], None] | None = None,
        tick_s: float = 1.0,
    ) -> None:
        self.timeouts = timeouts or Timeouts()
        self._on_finish = on_finish
        self._lead: str | None = None
        self._on_tick = on_tick
        self._tick_s = tick_s
        self.interrupted = False
        self._on_progress = on_progress
        self._on_event = on_event
        self._context = worker_context()

    @property
    def context(self) -> WorkerContext:
        """The multiprocessing context the workers are started with (for their pipes)."""
        return self._context

    def run(
        self,
        jobs: Sequence[WorkerJob],
        *,
        after_start: Callable[[], None] | None = None,
        lead: str | None = None,
    ) -> list[WorkerOutcome]:
        """Start every job, release them together at the barrier, and return one outcome each.

        `after_start` runs once every process has started (the parent closes its copies of the
        pipes it handed to the workers there, so that a dead worker's peer sees EOF). Once the
        job named `lead` has ended (unified mode's LoadGen coordinator), the others have a few
        seconds to end too; one that does not is hung and killed.
        """
        self._lead = lead
        # The start barrier is a pipe that nobody writes: the workers wait for its end of file,
        # and closing the runner's end releases them all at once. A multiprocessing Event would
        # do it with a Condition whose set() waits for every sleeper to wake: a worker killed at
        # the barrier (the kernel's out-of-memory killer did it) hung the runner there for good.
        barrier, release = self._context.Pipe(duplex=False)
        state = runner_state()
        workers: list[_Worker] = []
        try:
            for job in jobs:
                workers.append(self._start(job, barrier, state))
            barrier.close()  # each worker has its own copy now
            if after_start is not None:
                after_start()
            self._supervise(workers, release)
        except KeyboardInterrupt:
            self.interrupted = True
            log.warning("interrupted: stopping %d workers", len(workers))
            self._stop_all(workers)
        finally:
            self._reap(workers)
            barrier.close()
            release.close()
        return [w.outcome for w in workers if w.outcome is not None]

    def _start(self, job: WorkerJob, barrier: Connection, state: RunnerState) -> _Worker:
        Path(job.log_path).parent.mkdir(parents=True, exist_ok=True)
        receiver, sender = self._context.Pipe(duplex=False)
        process = self._context.Process(
            target=worker_main,
            args=(sender, barrier, job, self.timeouts.ready_s, state),
            name=f"mlperf-mig:{job.name}",
            daemon=True,
        )
        with main_module_hidden_if_unimportable():
            process.start()
        sender.close()
        pid = _started_pid(process)
        for observer in list(_observers):
            observer.worker_started(job.name, pid)
        log.info("started worker %s (pid %d)", job.name, pid)
        self._event(job.name, "started")
        return _Worker(job, process, receiver)

    def _supervise(self, workers: list[_Worker], release: Connection) -> None:
        clock = RoundClock(self.timeouts, lead=self._lead)
        while any(w.outcome is None for w in workers):
            if not clock.released and all(
                w.ready or w.outcome is not None or not w.job.wait_at_barrier for w in workers
            ):
                release.close()  # never blocks, whoever died at the barrier
                clock.release()
                log.info("start barrier released")
            if any(w.job.name == self._lead and w.outcome is not None for w in workers):
                clock.lead_ended()
            remaining = clock.remaining()
            if remaining <= 0:
                self._kill_hung(workers, clock.overdue())
                continue
            live = [w for w in workers if w.outcome is None]
            waitables: list[Any] = [w.conn for w in live if w.conn is not None]
            waitables += [w.process.sentinel for w in live]
            if self._on_tick is not None:
                remaining = min(remaining, self._tick_s)
            for ready in wait(waitables, timeout=remaining):
                self._handle(live, ready)
            if self._on_tick is not None:
                self._on_tick()

    def _handle(self, live: list[_Worker], ready: object) -> None:
        for worker in live:
            if ready is worker.conn:
                self._receive(worker)
            elif ready == worker.process.sentinel:
                self._exited(worker)

    def _receive(self, worker: _Worker) -> None:
        assert worker.conn is not None
        try:
            message = worker.conn.recv()
        except (EOFError, OSError):
            worker.conn.close()
            worker.conn = None
            return
        kind = message[0]
        if kind == "ready":
            worker.ready = True
            self._event(worker.job.name, "ready")
        elif kind == "progress" and self._on_progress is not None:
            self._on_progress(worker.job.name, message[1])
        elif kind == "usage":
            worker.cpu_per_s = float(message[1])
        elif kind in ("done", "error"):
            worker.reported = message

    def _exited(self, worker: _Worker) -> None:
        while worker.conn is not None:  # the last messages may still be in the pipe
            if not worker.conn.poll():
                break
            self._receive(worker)
        kill_group(worker.process)  # what the worker started dies with it (before the reap)
        worker.process.join()
        message = worker.reported
        if message is not None and message[0] == "done":
            if worker.process.exitcode != 0:
                log.warning(
                    "worker %s reported its result, then %s",
                    worker.job.name,
                    describe_exit(worker.process.exitcode),
                )
            self._finish(worker, "ok", value=message[1], cpu_per_s=worker.cpu_per_s)
        elif message is not None and message[0] == "error":
            _, kind, text, trace = message
            self._finish(worker, "raised", error=f"{kind}: {text}", traceback=trace)
        else:
            self._finish(worker, "crashed", error=describe_exit(worker.process.exitcode))

    def _finish(self, worker: _Worker, status: str, **fields: Any) -> None:
        """Record the worker's outcome once, tell the display, and hand it to `on_finish` (the
        runner writes it to disk at once)."""
        if not worker.finish(status, **fields):
            return
        for observer in list(_observers):
            observer.worker_ended(worker.job.name)
        self._event(worker.job.name, status)
        if self._on_finish is not None and worker.outcome is not None:
            self._on_finish(worker.outcome)

    def _kill_hung(self, workers: list[_Worker], error: str) -> None:
        for worker in workers:
            if worker.outcome is None:
                kill_group(worker.process)
                worker.process.join(_TERMINATE_GRACE_S)
                self._finish(worker, "hung", error=error)

    def _stop_all(self, workers: list[_Worker]) -> None:
        """Ask every worker's group to stop (SIGTERM); kill what is left after the grace period,
        or at once when a second signal hurries the shutdown."""
        running = [w for w in workers if w.outcome is None]
        for worker in running:
            kill_group(worker.process, signal.SIGTERM)
        deadline = time.monotonic() + _TERMINATE_GRACE_S
        while time.monotonic() < deadline and not _hurry():
            if not any(w.process.is_alive() for w in running):
                break
            time.sleep(0.05)
        error = interrupted_error(_stop_reason())
        for worker in running:
            kill_group(worker.process)
            worker.process.join(_TERMINATE_GRACE_S)
            self._finish(worker, "interrupted", error=error)

    def _reap(self, workers: list[_Worker]) -> None:
        for worker in workers:
            if worker.outcome is None or worker.outcome.status != "interrupted":
                kill_group(worker.process)
            worker.process.join(_TERMINATE_GRACE_S)
            remove_worker_cgroup(worker.process.pid)  # its CPU quota, if it made one
            if worker.conn is not None:
                worker.conn.close()
                worker.conn = None
            worker.process.close()

    def _event(self, name: str, what: str) -> None:
        if self._on_event is not None:
            self._on_event(name, what)
