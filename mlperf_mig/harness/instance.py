"""The worker entry point: one LoadGen test in this process, from an InstanceTask to its result.

LoadGen is process-global (traps 1 and 2): call run_instance once per process. The runner spawns
one worker process per MIG instance and calls it there; the CLI calls it for one instance.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from mlperf_mig._io import atomic_write_text, ensure_writable_dir
from mlperf_mig.benchmark import Benchmark, get_benchmark
from mlperf_mig.engines.backend import Backend
from mlperf_mig.engines.spec import EngineSpec
from mlperf_mig.errors import SettingsError
from mlperf_mig.harness import accuracy, datasets
from mlperf_mig.harness.calibration import calibrated_target
from mlperf_mig.harness.logs import parse_detail_log
from mlperf_mig.harness.result import (
    InstanceResult,
    effective_settings,
    invalid_reasons,
    latencies,
    throughput,
)
from mlperf_mig.harness.samples import SampleLibrary, SampleSource, input_layouts
from mlperf_mig.harness.settings import (
    ResolvedSettings,
    SettingsSpec,
    load_test_settings,
    needs_calibration,
    normalize_loadgen_scenario,
    resolve_settings,
)
from mlperf_mig.harness.sut import (
    OFFLINE_COMPLETION_SAMPLES,
    BatchingSUT,
    BatchRunner,
    InlineSUT,
)

logger = logging.getLogger(__name__)

MODES = ("performance", "accuracy")
DEFAULT_BATCH = {"Offline": 64, "Server": 8, "SingleStream": 1, "MultiStream": 8}
WINDOW_FRACTION = 1 / 15  # Server batching window against the latency bound: 1 ms for ResNet50


def _benchmark_name(value: str) -> str:
    return get_benchmark(value).name


@attrs.frozen(kw_only=True)
class InstanceTask:
    """Everything one worker needs to run one LoadGen test; plain, picklable data.

    `engine` is the engines pillar's EngineSpec (opened in the worker with open_backend), or None
    for the null backend. `dataset` is an ImageNet validation folder (with val_map.txt) for
    ResNet50 or a SQuAD v1.1 dev json (or its folder) for BERT; None means synthetic samples.
    `outdir` is the instance's folder: the logs go to `<outdir>/<mode>/`, the user.conf to
    `<outdir>/user.conf`.
    """

    benchmark: str = attrs.field(converter=_benchmark_name)
    loadgen_scenario: str = attrs.field(converter=normalize_loadgen_scenario)
    outdir: str = attrs.field(converter=os.fspath)
    mode: str = attrs.field(default="performance", validator=attrs.validators.in_(MODES))
    engine: EngineSpec | None = None
    cache_dir: str | None = attrs.field(
        default=None, converter=attrs.converters.optional(os.fspath)
    )
    threads: int | None = None
    settings: SettingsSpec = attrs.field(factory=SettingsSpec)
    dataset: str | None = attrs.field(default=None, converter=attrs.converters.optional(os.fspath))
    vocab: str | None = attrs.field(default=None, converter=attrs.converters.optional(os.fspath))
    sample_count: int | None = None
    batch_size: int | None = None
    batch_window_ms: float | None = None
    seed: int = 0

    @property
    def log_dir(self) -> Path:
        return Path(self.outdir) / self.mode


def open_task_backend(task: InstanceTask, benchmark: Benchmark) -> Backend:
    """Open the task's backend in this process (the null backend when there is no engine)."""
    if task.engine is None:
        from mlperf_mig.engines.null import NullBackend

        return NullBackend(benchmark)
    from mlperf_mig.engines import open_backend

    return open_backend(task.engine, cache_dir=task.cache_dir, threads=task.threads)


def weights_are_synthetic(task: InstanceTask) -> bool:
    """True unless the engine was built from a model file the user passed."""
    if task.engine is None or task.engine.backend == "null":
        return True
    return task.engine.model_path is None


def batch_size_of(task: InstanceTask) -> int:
    """Explicit batch size, else the engine recipe's largest, else a per-scenario default."""
    if task.batch_size:
        return task.batch_size
    if task.engine is not None:
        return 1 if task.loadgen_scenario == "SingleStream" else task.engine.max_batch_size
    return DEFAULT_BATCH[task.loadgen_scenario]


def run_instance(
    task: InstanceTask,
    *,
    before_start: Callable[[], None] | None = None,
    progress: Callable[[int], None] | None = None,
) -> InstanceResult:
    """Run one LoadGen test in this process and return its result parsed from the logs.

    `before_start()` is called once the model and samples are loaded, just before the timed part
    of the test (from LoadGen's first sample-load callback, inside StartTest). An exception it
    raises makes the SUT complete every sample at once without the backend, so that LoadGen ends
    as soon as its settings allow, and is raised again when StartTest has returned.
    `progress(completed_samples)` now and then from the thread that completes samples.
    """
    started = time.monotonic()
    benchmark = get_benchmark(task.benchmark)
    folder = ensure_writable_dir(task.outdir)
    log_dir = ensure_writable_dir(task.log_dir)
    audit_path = log_dir / "audit.config"
    if audit_path.exists():
        raise SettingsError(
            f"{str(audit_path)!r} exists and would silently change LoadGen's settings; remove it"
        )
    source = datasets.open_source(task, benchmark)
    calibrate = needs_calibration(task.settings, benchmark, task.loadgen_scenario)
    preliminary = resolve_settings(task.settings, benchmark, task.loadgen_scenario)

    import mlperf_loadgen as lg

    with open_task_backend(task, benchmark) as backend:
        batch_size = batch_size_of(task)
        performance_count = _performance_count(preliminary, source)
        library = SampleLibrary.allocate(
            input_layouts(benchmark), capacity=performance_count, total_count=source.total_count
        )
        runner = BatchRunner(
            lg=lg,
            backend=backend,
            library=library,
            batch_size=batch_size,
            progress=progress,
            completion_samples=(
                OFFLINE_COMPLETION_SAMPLES if task.loadgen_scenario == "Offline" else 0
            ),
        )
        resolved = preliminary
        if calibrate:
            target = calibrated_target(
                backend,
                source,
                task.loadgen_scenario,
                batch_size=batch_size,
                samples_per_query=int(preliminary.values.get("samples_per_query", 8)),
            )
            resolved = resolve_settings(
                task.settings, benchmark, task.loadgen_scenario, calibrated_target=target
            )
        conf_path = atomic_write_text(folder / "user.conf", resolved.conf_text())
        test_settings = load_test_settings(conf_path, resolved, lg)
        test_settings.mode = (
            lg.TestMode.AccuracyOnly if task.mode == "accuracy" else lg.TestMode.PerformanceOnly
        )
        sut = _make_sut(task, runner, benchmark)
        _start_test(
            lg,
            sut=sut,
            runner=runner,
            library=library,
            performance_count=performance_count,
            source=source,
            test_settings=test_settings,
            log_dir=log_dir,
            audit_path=audit_path,
            before_start=before_start,
        )
        device = backend.device
    if progress is not None:
        progress(runner.completed)
    return _result(
        task,
        benchmark=benchmark,
        source=source,
        resolved=resolved,
        conf_path=conf_path,
        runner=runner,
        device=device,
        wall_s=time.monotonic() - started,
    )


def _performance_count(resolved: ResolvedSettings, source: SampleSource) -> int:
    """LoadGen's performance sample count: the override, else the source's."""
    override = int(resolved.values.get("performance_sample_count_override", 0))
    return min(override or source.performance_count, source.total_count)


def _start_test(
    lg: Any,
    *,
    sut: InlineSUT | BatchingSUT,
    runner: BatchRunner,
    library: SampleLibrary,
    performance_count: int,
    source: SampleSource,
    test_settings: Any,
    log_dir: Path,
    audit_path: Path,
    before_start: Callable[[], None] | None,
) -> None:
    log_settings = lg.LogSettings()
    log_settings.log_output.outdir = str(log_dir)
    log_settings.log_output.copy_summary_to_stdout = False
    log_settings.enable_trace = False  # trap 9: tracing costs Server latency
    waiting = [before_start] if before_start is not None else []
    barrier_errors: list[Exception] = []

    def load(indices: list[int]) -> None:
        # An exception must not unwind through LoadGen (its threads then abort the process at
        # exit): a sample that cannot be loaded fails the run; a failed barrier aborts it.
        try:
            library.load(indices, source)
        except Exception as exc:
            runner.fail(exc)
        # LoadGen loads the sample set inside StartTest, before its timed phase: the runner's
        # barrier goes here, so that every instance's timed phase starts together.
        if waiting:
            try:
                waiting.pop()()
            except Exception as exc:
                barrier_errors.append(exc)
                runner.abort(exc)

    lg_sut = lg.ConstructFastSUT(sut.issue, sut.flush)
    lg_qsl = lg.ConstructQSL(library.total_count, performance_count, load, library.unload)
    sut.start()
    try:
        lg.StartTestWithLogSettings(lg_sut, lg_qsl, test_settings, log_settings, str(audit_path))
    finally:
        sut.stop()
        lg.DestroyQSL(lg_qsl)
        lg.DestroyFastSUT(lg_sut)
    if barrier_errors:
        raise barrier_errors[0]


def _make_sut(
    task: InstanceTask, runner: BatchRunner, benchmark: Benchmark
) -> InlineSUT | BatchingSUT:
    if task.loadgen_scenario != "Server":
        return InlineSUT(runner, offline=task.loadgen_scenario == "Offline")
    window_ms = task.batch_window_ms
    if window_ms is None:
        window_ms = benchmark.server_latency_bound_ms * WINDOW_FRACTION
    return BatchingSUT(runner, window_s=window_ms / 1e3)


def _result(
    task: InstanceTask,
    *,
    benchmark: Benchmark,
    source: SampleSource,
    resolved: ResolvedSettings,
    conf_path: Path,
    runner: BatchRunner,
    device: Any,
    wall_s: float,
) -> InstanceResult:
    records = parse_detail_log(task.log_dir)
    reasons = [_explain(reason, task, resolved) for reason in invalid_reasons(records)]
    if runner.error is not None:
        reasons.insert(
            0, f"run failed ({runner.failed_samples} samples without data): {runner.error}"
        )
    performance = task.mode == "performance"
    validity = str(records.get("result_validity", "")) if performance else ""
    valid = runner.error is None and (validity == "VALID" or not performance)
    value, unit = throughput(records, task.loadgen_scenario)
    report = None
    if not performance:
        report = accuracy.score(
            benchmark, source, task.log_dir, weights_synthetic=weights_are_synthetic(task)
        )
    return InstanceResult(
        benchmark=benchmark.name,
        loadgen_scenario=task.loadgen_scenario,
        mode=task.mode,
        valid=valid,
        validity=validity,
        invalid_reasons=tuple(reasons),
        throughput=value if performance else None,
        throughput_unit=unit,
        latency_ns=latencies(records, task.loadgen_scenario) if performance else {},
        effective_settings=effective_settings(records),
        device=device,
        log_dir=str(task.log_dir),
        user_conf=str(conf_path),
        target_source=resolved.target_source,
        samples_completed=runner.completed,
        failed_samples=runner.failed_samples,
        error=runner.error,
        synthetic_data=source.synthetic,
        accuracy=report,
        wall_s=round(wall_s, 3),
    )


def _explain(reason: str, task: InstanceTask, resolved: ResolvedSettings) -> str:
    """Say so when a short Offline run is INVALID by the preset's design, not by accident."""
    if reason != "min duration not met" or task.loadgen_scenario != "Offline":
        return reason
    if resolved.target_source != "calibration" or task.settings.preset != "quick":
        return reason
    return (
        "min duration not met: the quick preset sizes the Offline query to a few seconds "
        "(preset='submission' runs the full 600 s)"
    )
