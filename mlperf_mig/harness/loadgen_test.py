"""One LoadGen test in this process, from its task to its result: the part every way of running a
test shares.

`LoadGenTest` (a context manager) prepares the task's folders, opens its samples and reads its
settings once; `run` resolves the settings with the measured target, writes the user.conf, and
owns LoadGen's QSL/SUT lifetime (construct, StartTest, destroy) and the start barrier; `result`
parses the logs into an InstanceResult. The caller brings what differs, as callbacks: how samples
are issued and loaded, and what must run while the test runs. The worker entry point
(instance.py: `run_instance`) issues samples to its own backend; the runner's unified coordinator
(runner/unified.py: `coordinate`) dispatches them to the instance workers.

LoadGen is process-global (traps 1 and 2): one LoadGenTest per process.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from mlperf_mig._io import atomic_write_text, ensure_writable_dir
from mlperf_mig.engines.backend import DeviceReport
from mlperf_mig.harness import accuracy, datasets
from mlperf_mig.harness.compliance import (
    AUDIT_CONFIG,
    audit_config_text,
    clear_leftover_audit_config,
)
from mlperf_mig.harness.logs import parse_detail_log
from mlperf_mig.harness.result import (
    LOADGEN_OFFLINE_ADVICE,
    MIN_DURATION_REASON,
    QUICK_OFFLINE_REASON,
    InstanceResult,
    effective_settings,
    invalid_reasons,
    latencies,
    throughput,
    token_latencies,
)
from mlperf_mig.harness.settings import (
    CALIBRATED,
    LoadGenModule,
    LoadGenTestSettings,
    MergedSettings,
    ResolvedSettings,
    load_test_settings,
    merge_settings,
)
from mlperf_mig.harness.task import InstanceTask
from mlperf_mig.workloads import Workload
from mlperf_mig.workloads.samples import SampleSource

logger = logging.getLogger(__name__)

LoadGenLogSettings = Any  # an lg.LogSettings (mlperf_loadgen ships no type information)


class CompletionCounts(Protocol):
    """What completed the samples of a test: the harness's BatchRunner, the runner's dispatcher
    or a token completer (read-only members: any of them may compute them)."""

    @property
    def completed(self) -> int: ...
    @property
    def failed_samples(self) -> int: ...
    @property
    def error(self) -> str | None: ...


class LoadGenTest:
    """One LoadGen test of `task` in this process; use as a context manager.

    Entering creates the task's folders, opens its samples (`source`) and reads its settings
    (`settings`: preset, user.conf and overrides, once). `run` then runs the test and `result`
    gives its InstanceResult.
    """

    def __init__(self, task: InstanceTask) -> None:
        self.task = task
        self.benchmark: Workload = task.benchmark
        self._started = 0.0
        self._audit_path: Path | None = None
        self._opened: tuple[SampleSource, MergedSettings] | None = None
        self._resolved: ResolvedSettings | None = None
        self._conf_path: Path | None = None

    def __enter__(self) -> LoadGenTest:
        self._started = time.monotonic()
        self._audit_path = prepare_folders(self.task)
        source = datasets.open_source(self.task)
        settings = merge_settings(
            self.task.settings,
            self.benchmark,
            self.task.loadgen_scenario,
            whole_dataset=self.task.dataset is not None,
        )
        self._opened = (source, settings)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._opened = None

    # --- what the caller needs before the test -------------------------------------------------
    def _entered(self) -> tuple[SampleSource, MergedSettings]:
        if self._opened is None:
            raise RuntimeError("LoadGenTest is used outside its `with` block")
        return self._opened

    @property
    def source(self) -> SampleSource:
        """The task's samples."""
        return self._entered()[0]

    @property
    def settings(self) -> MergedSettings:
        """The task's settings, read once; the target is chosen when the test runs."""
        return self._entered()[1]

    @property
    def calibrates(self) -> bool:
        """Whether the test's target is measured (see `calibrates`)."""
        return calibration_applies(self.task, self.settings)

    @property
    def samples_per_query(self) -> int:
        return int(self.settings.values.get("samples_per_query", 8))

    @property
    def performance_count(self) -> int:
        return performance_count(self.settings, self.source)

    # --- the test ------------------------------------------------------------------------------
    def run(
        self,
        *,
        issue: Callable[[Sequence[int], Sequence[int]], None],
        flush: Callable[[], None],
        load: Callable[[Sequence[int]], None],
        unload: Callable[[Sequence[int]], None],
        abort: Callable[[Exception], None],
        calibrated_target: float | None = None,
        before_start: Callable[[], None] | None = None,
        serving: AbstractContextManager[Any] | None = None,
        performance_count: int | None = None,
        target_cached: bool = False,
    ) -> None:
        """Run the test: LoadGen calls `issue(ids, indices)` and `flush()` (the SUT), and
        `load(indices)` / `unload(indices)` (the QSL); `serving` is entered around StartTest
        (the caller's threads that complete samples). `performance_count`: LoadGen's
        performance sample count when the caller sized its sample memory for it (default: the
        settings' and the source's, `self.performance_count`). `target_cached`:
        `calibrated_target` was measured by an earlier run (harness/reuse.py); the result says so.

        `before_start()` is the start barrier: it is called once, after the first samples are
        loaded, which LoadGen does inside StartTest just before its timed phase. An exception
        from `load` or from the barrier must not unwind through LoadGen (its threads then abort
        the process): it goes to `abort(exc)`, which must make every further sample complete at
        once without data; a barrier's exception is raised again when StartTest has returned.
        """
        import mlperf_loadgen as lg

        test_settings = self._prepare(lg, calibrated_target, target_cached)
        waiting = [before_start] if before_start is not None else []
        barrier_errors: list[Exception] = []

        def load_samples(indices: Sequence[int]) -> None:
            try:
                load(indices)
            except Exception as exc:
                abort(exc)
            if waiting:
                logger.info("loaded %d samples; waiting at the start barrier", len(indices))
                try:
                    waiting.pop()()
                except Exception as exc:
                    barrier_errors.append(exc)
                    abort(exc)

        lg_sut = lg.ConstructFastSUT(issue, flush)
        count = self.performance_count if performance_count is None else performance_count
        lg_qsl = lg.ConstructQSL(self.source.total_count, count, load_samples, unload)
        try:
            with (
                serving if serving is not None else contextlib.nullcontext(),
                audit_config(self.task.audit, self._audit_path),
            ):
                logger.info(
                    "StartTest %s %s %s",
                    self.task.benchmark,
                    self.task.loadgen_scenario,
                    self.task.mode,
                )
                lg.StartTestWithLogSettings(
                    lg_sut,
                    lg_qsl,
                    test_settings,
                    log_settings(lg, self.task.log_dir),
                    str(self._audit_path),
                )
        finally:
            lg.DestroyQSL(lg_qsl)
            lg.DestroyFastSUT(lg_sut)
        if barrier_errors:
            raise barrier_errors[0]

    def _prepare(
        self, lg: LoadGenModule, calibrated_target: float | None, cached: bool
    ) -> LoadGenTestSettings:
        """Resolve the settings, write `<outdir>/user.conf` and load LoadGen's TestSettings from
        it in the task's mode."""
        self._resolved = self.settings.resolve(calibrated_target, cached=cached)
        # an audit keeps its user.conf with its logs: <outdir>/user.conf is the performance run's
        folder = self.task.log_dir if self.task.audit else Path(self.task.outdir)
        self._conf_path = atomic_write_text(folder / "user.conf", self._resolved.conf_text())
        test_settings = load_test_settings(self._conf_path, self._resolved, lg)
        test_settings.mode = (
            lg.TestMode.AccuracyOnly
            if self.task.mode == "accuracy"
            else lg.TestMode.PerformanceOnly
        )
        return test_settings

    def result(
        self, counts: CompletionCounts, *, device: DeviceReport, weights_synthetic: bool
    ) -> InstanceResult:
        """The InstanceResult of the finished test, parsed from its detail log."""
        if self._resolved is None or self._conf_path is None:
            raise RuntimeError("LoadGenTest.result() before run()")
        wall_s = time.monotonic() - self._started
        return task_result(
            self.task,
            self.benchmark,
            self.source,
            self._resolved,
            self._conf_path,
            counts,
            device=device,
            weights_synthetic=weights_synthetic,
            wall_s=wall_s,
        )


@contextlib.contextmanager
def running(start: Callable[[], None], stop: Callable[[], None]) -> Iterator[None]:
    """A `serving` context from a start and a stop function: stop runs however the test ends."""
    start()
    try:
        yield
    finally:
        stop()


@contextlib.contextmanager
def audit_config(audit: str | None, path: Path | None) -> Iterator[None]:
    """Write the audit's audit.config where LoadGen reads it for the test, and remove it however
    the test ends, so that no later test is silently altered (trap 6)."""
    if audit is None:
        yield
        return
    assert path is not None
    atomic_write_text(path, audit_config_text(audit))
    try:
        yield
    finally:
        path.unlink(missing_ok=True)


def prepare_folders(task: InstanceTask) -> Path:
    """Create the task's folder and log folder; return the path LoadGen reads an audit.config
    from (passed to StartTest for every test, so the working directory's is never read), which
    must not hold a file (it would silently change the settings): the audit.config a killed
    test of the same audit left there is removed, anything else refused."""
    ensure_writable_dir(task.outdir)
    audit_path = ensure_writable_dir(task.log_dir) / AUDIT_CONFIG
    clear_leftover_audit_config(audit_path, task.audit)
    return audit_path


def calibrates(task: InstanceTask, benchmark: Workload) -> bool:
    """Whether a calibrating preset measures this task's target: always for performance runs;
    for accuracy runs only in Server, where LoadGen paces even an AccuracyOnly run by the
    target (64 samples at the CPU row's 0.3 QPS would take 3.5 minutes)."""
    return calibration_applies(
        task, merge_settings(task.settings, benchmark, task.loadgen_scenario)
    )


def calibration_applies(task: InstanceTask, settings: MergedSettings) -> bool:
    """`calibrates`, with the task's settings already read."""
    if task.mode == "accuracy" and task.loadgen_scenario != "Server":
        return False
    return settings.calibrates


def log_settings(lg: LoadGenModule, log_dir: Path) -> LoadGenLogSettings:
    """LoadGen LogSettings writing into `log_dir`, without stdout copy or trace."""
    settings = lg.LogSettings()
    settings.log_output.outdir = str(log_dir)
    settings.log_output.copy_summary_to_stdout = False
    settings.enable_trace = False  # trap 9: tracing costs Server latency
    return settings


def performance_count(settings: ResolvedSettings | MergedSettings, source: SampleSource) -> int:
    """LoadGen's performance sample count: the override, else the source's."""
    override = int(settings.values.get("performance_sample_count_override", 0))
    return min(override or source.performance_count, source.total_count)


def task_result(
    task: InstanceTask,
    benchmark: Workload,
    source: SampleSource,
    resolved: ResolvedSettings,
    conf_path: Path,
    counts: CompletionCounts,
    *,
    device: DeviceReport,
    weights_synthetic: bool,
    wall_s: float,
) -> InstanceResult:
    """The InstanceResult of a finished test, parsed from the detail log in `task.log_dir`."""
    records = parse_detail_log(task.log_dir)
    reasons, by_design = _explained_reasons(invalid_reasons(records), task, resolved)
    if counts.error is not None:
        reasons.insert(
            0, f"run failed ({counts.failed_samples} samples without data): {counts.error}"
        )
        by_design = False
    performance = task.mode == "performance"
    validity = str(records.get("result_validity", "")) if performance else ""
    valid = counts.error is None and (validity == "VALID" or not performance)
    value, unit = throughput(records, task.loadgen_scenario)
    report = None
    if not performance and counts.error is not None:
        report = accuracy.not_scored(benchmark, counts.error)
    elif not performance:
        report = accuracy.score(
            benchmark, source, task.log_dir, weights_synthetic=weights_synthetic
        )
    return InstanceResult(
        benchmark=benchmark.name,
        # what the run is reported and filed under (Interactive for the interactive variant)
        loadgen_scenario=benchmark.mlperf_scenario(task.loadgen_scenario),
        mode=task.mode,
        valid=valid,
        validity=validity,
        invalid_reasons=tuple(reasons),
        invalid_by_design=by_design and validity == "INVALID",
        throughput=value if performance else None,
        throughput_unit=unit,
        latency_ns=latencies(records, task.loadgen_scenario) if performance else {},
        effective_settings=effective_settings(records),
        device=device,
        log_dir=str(task.log_dir),
        user_conf=str(conf_path),
        target_source=resolved.target_source,
        samples_completed=counts.completed,
        failed_samples=counts.failed_samples,
        error=counts.error,
        synthetic_data=source.synthetic,
        accuracy=report,
        wall_s=round(wall_s, 3),
        tokens=token_latencies(records, task.loadgen_scenario) if performance else None,
    )


def _explained_reasons(
    reasons: list[str], task: InstanceTask, resolved: ResolvedSettings
) -> tuple[list[str], bool]:
    """LoadGen's reasons, and whether the run is INVALID only by the quick preset's design.

    The quick preset sizes its Offline query to a few seconds under mlperf.conf's 600 s minimum:
    "min duration not met" is then the design, and LoadGen's advice to raise the expected QPS
    would mislead.
    """
    by_design = (
        task.loadgen_scenario == "Offline"
        and task.settings.preset == "quick"
        and resolved.target_source in CALIBRATED
        and MIN_DURATION_REASON in reasons
    )
    if not by_design:
        return list(reasons), False
    others = [r for r in reasons if r not in (MIN_DURATION_REASON, LOADGEN_OFFLINE_ADVICE)]
    return [QUICK_OFFLINE_REASON, *others], not others
