"""Worker entries for the runner tests, imported by path in the workers.

Each entry behaves like the harness's run_instance for every instance but the one it picks
(by the MLPERF_MIG_INSTANCE variable the runner sets), which crashes, raises or hangs after the
start barrier, that is mid-run. Every worker writes its pid to <run folder>/pids/<instance>.
"""

from __future__ import annotations

import abc
import os
import signal
import time
from pathlib import Path
from typing import Any

from mlperf_mig.harness import run_instance


def _instance() -> str:
    return os.environ["MLPERF_MIG_INSTANCE"]


def _record_pid(task: Any) -> None:
    pids = Path(task.outdir).parent / "pids"
    pids.mkdir(exist_ok=True)
    (pids / _instance()).write_text(str(os.getpid()))


def crash_raise_hang(task: Any, *, before_start: Any, progress: Any) -> Any:
    """i1 is killed with SIGKILL, i2 raises, i3 hangs, all after the barrier; i0 runs normally."""
    _record_pid(task)
    name = _instance()
    if name.startswith(("i1-", "i2-", "i3-")):
        before_start()
        progress(1)
        time.sleep(0.3)
        if name.startswith("i1-"):
            os.kill(os.getpid(), signal.SIGKILL)
        if name.startswith("i2-"):
            raise ValueError("injected failure in the worker")
        time.sleep(3600)
    return run_instance(task, before_start=before_start, progress=progress)


def hang_after_barrier(task: Any, *, before_start: Any, progress: Any) -> Any:
    """Every worker waits at the barrier, then hangs (for the Ctrl-C test)."""
    _record_pid(task)
    before_start()
    time.sleep(3600)


class SleepyBackend:
    """A null backend that serves `rate` samples/s per compute slice of its instance."""

    def __init__(self, benchmark: Any, samples_per_s: float) -> None:
        from mlperf_mig.engines.backends.null import NullBackend

        self._null = NullBackend(benchmark)
        self._seconds_per_sample = 1.0 / samples_per_s
        self.device = self._null.device
        self.benchmark = benchmark

    def run(self, feeds: Any) -> Any:
        batch = len(next(iter(feeds.values())))
        time.sleep(batch * self._seconds_per_sample)
        return self._null.run(feeds)

    def close(self) -> None:
        self._null.close()


RATE_PER_SLICE = 40.0


def sleepy_serve(job: Any, *, before_start: Any, progress: Any) -> Any:
    """Unified-mode instance worker whose speed is proportional to its compute slices."""
    from mlperf_mig.runner.unified import serve_instance
    from mlperf_mig.workloads import get_workload

    slices = int(_instance().split("-")[1].split("g")[0])
    benchmark = get_workload(job.task.benchmark)
    return serve_instance(
        job,
        before_start=before_start,
        progress=progress,
        open_backend=lambda: SleepyBackend(benchmark, RATE_PER_SLICE * slices),
    )


class FailingBackend(SleepyBackend):
    """Serves `batches` batches, then `fail()` inside the next one."""

    def __init__(self, benchmark: Any, samples_per_s: float, batches: int) -> None:
        super().__init__(benchmark, samples_per_s)
        self._left = batches

    @abc.abstractmethod
    def fail(self) -> None:
        """What happens in the batch after the last one served."""

    def run(self, feeds: Any) -> Any:
        self._left -= 1
        if self._left < 0:
            self.fail()
        return super().run(feeds)


class DyingBackend(FailingBackend):
    """Serves a few batches, then the process is killed with SIGKILL mid-run."""

    def fail(self) -> None:
        os.kill(os.getpid(), signal.SIGKILL)


def _serve_with_i1_failing(
    job: Any, failing: type[FailingBackend], before_start: Any, progress: Any
) -> Any:
    """Unified-mode instance worker: i1 serves 5 batches with `failing`, the others keep serving."""
    from mlperf_mig.runner.unified import serve_instance
    from mlperf_mig.workloads import get_workload

    benchmark = get_workload(job.task.benchmark)
    if _instance().startswith("i1-"):
        make = lambda: failing(benchmark, 4 * RATE_PER_SLICE, batches=5)  # noqa: E731
    else:
        make = lambda: SleepyBackend(benchmark, 4 * RATE_PER_SLICE)  # noqa: E731
    return serve_instance(job, before_start=before_start, progress=progress, open_backend=make)


def dying_serve(job: Any, *, before_start: Any, progress: Any) -> Any:
    """Unified-mode instance worker; i1 dies after 5 batches, the others keep serving."""
    return _serve_with_i1_failing(job, DyingBackend, before_start, progress)


def first_finishes_others_hang(task: Any, *, before_start: Any, progress: Any) -> Any:
    """i0 runs normally; the others wait at the barrier, then hang (for the signal tests)."""
    _record_pid(task)
    if _instance().startswith("i0-"):
        return run_instance(task, before_start=before_start, progress=progress)
    before_start()
    time.sleep(3600)


def hang_ignoring_sigterm(task: Any, *, before_start: Any, progress: Any) -> Any:
    """Every worker ignores SIGTERM and hangs after the barrier: only SIGKILL stops it."""
    _record_pid(task)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    before_start()
    time.sleep(3600)


def second_fills_the_disk(task: Any, *, before_start: Any, progress: Any) -> Any:
    """i0 runs normally; i1 waits until the runner has written i0's result, fills the file
    system of the run folder, then raises (the runner must write that outcome on a full disk)."""
    _record_pid(task)
    if _instance().startswith("i0-"):
        return run_instance(task, before_start=before_start, progress=progress)
    before_start()
    results = Path(task.outdir).parent / "results.json"
    deadline = time.monotonic() + 60
    while not results.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    with open(Path(task.outdir).parent / "filler", "wb") as filler:
        try:
            while True:
                filler.write(b"\0" * 65536)
                filler.flush()
        except OSError:
            pass
    raise ValueError("the disk is full")


def starts_a_child_then_hangs(task: Any, *, before_start: Any, progress: Any) -> Any:
    """Every worker starts a child process (recorded in pids/<instance>.child), then hangs."""
    import subprocess

    _record_pid(task)
    child = subprocess.Popen(["sleep", "3600"])
    (Path(task.outdir).parent / "pids" / f"{_instance()}.child").write_text(str(child.pid))
    before_start()
    time.sleep(3600)


class HangingBackend(FailingBackend):
    """Serves a few batches, then hangs inside a batch (stops answering, stays alive)."""

    def fail(self) -> None:
        time.sleep(3600)


def hanging_serve(job: Any, *, before_start: Any, progress: Any) -> Any:
    """Unified-mode instance worker; i1 stops answering after 5 batches, the others keep serving."""
    _record_pid(job.task)
    return _serve_with_i1_failing(job, HangingBackend, before_start, progress)


def fails_on_cached_samples(task: Any, *, before_start: Any, progress: Any) -> Any:
    """Loads BERT samples through the cache folder twice (the second load maps the file the
    first kept), then raises, as a crafted token id would make the model fail."""
    from mlperf_mig.harness.reuse import WorkCache
    from mlperf_mig.harness.samples import SampleLibrary, input_layouts
    from mlperf_mig.workloads import get_workload
    from mlperf_mig.workloads.samples import SyntheticSource

    bench = get_workload("bert")
    work = WorkCache.for_cache_dir(task.cache_dir)
    for _ in range(2):
        source = SyntheticSource(benchmark=bench, total_count=64, performance_count=8, seed=0)
        library = SampleLibrary.allocate(input_layouts(bench), capacity=8, total_count=64)
        work.load_samples(library, list(range(8)), source)
    raise ValueError("token id 2139062143 out of range")
