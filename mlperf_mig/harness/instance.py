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
from typing import Any, Protocol

import attrs

from mlperf_mig._io import atomic_write_text, ensure_writable_dir
from mlperf_mig.benchmark import Benchmark, get_benchmark
from mlperf_mig.engines.backend import Backend, DeviceReport
from mlperf_mig.engines.spec import EngineSpec
from mlperf_mig.errors import SettingsError
from mlperf_mig.harness import accuracy, datasets
from mlperf_mig.harness.calibration import calibrated_target, timed_target
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


def check_positive(name: str, value: int | None) -> None:
    """Refuse a count below 1: 0 would otherwise quietly mean "the default" somewhere below."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise SettingsError(f"{name} must be a whole number of at least 1 (or None), got {value!r}")


def _mode(instance: object, attribute: attrs.Attribute, value: str) -> None:
    if value not in MODES:
        raise SettingsError(f"mode {value!r} is not one of {', '.join(MODES)}")


def _positive(instance: object, attribute: attrs.Attribute, value: int | None) -> None:
    check_positive(attribute.name, value)


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
    mode: str = attrs.field(default="performance", validator=_mode)
    engine: EngineSpec | None = None
    cache_dir: str | None = attrs.field(
        default=None, converter=attrs.converters.optional(os.fspath)
    )
    threads: int | None = attrs.field(default=None, validator=_positive)
    settings: SettingsSpec = attrs.field(factory=SettingsSpec)
    dataset: str | None = attrs.field(default=None, converter=attrs.converters.optional(os.fspath))
    vocab: str | None = attrs.field(default=None, converter=attrs.converters.optional(os.fspath))
    sample_count: int | None = attrs.field(default=None, validator=_positive)
    batch_size: int | None = attrs.field(default=None, validator=_positive)
    batch_window_ms: float | None = None
    seed: int = 0

    @property
    def log_dir(self) -> Path:
        return Path(self.outdir) / self.mode


def open_task_backend(task: InstanceTask, benchmark: Benchmark) -> Backend:
    """Open the task's backend in this process (the null backend when there is no engine)."""
    if task.engine is None:
        from mlperf_mig.engines.backends.null import NullBackend

        return NullBackend(benchmark)
    from mlperf_mig.engines import open_backend

    return open_backend(task.engine, cache_dir=task.cache_dir, threads=task.threads)


def weights_are_synthetic(task: InstanceTask) -> bool:
    """True unless the engine was built from a model file the user passed."""
    if task.engine is None:
        return True
    from mlperf_mig.engines import backend_class

    return not backend_class(task.engine.backend).runs_model or task.engine.model_path is None


def batch_size_of(task: InstanceTask) -> int:
    """Explicit batch size, else the engine recipe's largest, else a per-scenario default."""
    if task.batch_size is not None:
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
    audit_path = prepare_folders(task)
    source = datasets.open_source(task, benchmark)
    preliminary = resolve_settings(task.settings, benchmark, task.loadgen_scenario)

    import mlperf_loadgen as lg

    with open_task_backend(task, benchmark) as backend:
        batch_size = batch_size_of(task)
        count = performance_count(preliminary, source)
        library = SampleLibrary.allocate(
            input_layouts(benchmark), capacity=count, total_count=source.total_count
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
        target = measured_target(task, benchmark, backend, source, batch_size=batch_size)
        resolved, conf_path, test_settings = prepare_test(task, benchmark, lg, calibrated=target)
        sut = _make_sut(task, runner, benchmark)
        _start_test(
            lg,
            sut=sut,
            runner=runner,
            library=library,
            performance_count=count,
            source=source,
            test_settings=test_settings,
            log_dir=task.log_dir,
            audit_path=audit_path,
            before_start=before_start,
        )
        device = backend.device
    if progress is not None:
        progress(runner.completed)
    return task_result(
        task,
        benchmark=benchmark,
        source=source,
        resolved=resolved,
        conf_path=conf_path,
        counts=runner,
        device=device,
        weights_synthetic=weights_are_synthetic(task),
        wall_s=time.monotonic() - started,
    )


def prepare_folders(task: InstanceTask) -> Path:
    """Create the task's folder and log folder; return the path LoadGen reads an audit.config
    from, which must not exist (it would silently change the settings)."""
    ensure_writable_dir(task.outdir)
    audit_path = ensure_writable_dir(task.log_dir) / "audit.config"
    if audit_path.exists():
        raise SettingsError(
            f"{str(audit_path)!r} exists and would silently change LoadGen's settings; remove it"
        )
    return audit_path


def calibrates(task: InstanceTask, benchmark: Benchmark) -> bool:
    """Whether a calibrating preset measures this task's target: always for performance runs;
    for accuracy runs only in Server, where LoadGen paces even an AccuracyOnly run by the
    target (64 samples at the CPU row's 0.3 QPS would take 3.5 minutes)."""
    if task.mode == "accuracy" and task.loadgen_scenario != "Server":
        return False
    return needs_calibration(task.settings, benchmark, task.loadgen_scenario)


def measured_target(
    task: InstanceTask,
    benchmark: Benchmark,
    backend: Backend,
    source: SampleSource | None,
    *,
    batch_size: int,
    serve_path: tuple[Callable[[Any], Any], int] | None = None,
) -> float | None:
    """The target timed on `backend` when the task calibrates (see calibration.py), else None.

    The timing covers the harness's own batch path on the first samples of `source`, or, with
    `serve_path` = (gather(rows) -> feeds, rows available), the path by which the samples reach
    the backend instead (the runner's unified mode copies them out of shared memory).
    """
    if not calibrates(task, benchmark):
        return None
    preliminary = resolve_settings(task.settings, benchmark, task.loadgen_scenario)
    samples_per_query = int(preliminary.values.get("samples_per_query", 8))
    if serve_path is not None:
        gather, rows_available = serve_path
        return timed_target(
            backend,
            gather,
            rows_available,
            task.loadgen_scenario,
            batch_size=batch_size,
            samples_per_query=samples_per_query,
        )
    if source is None:
        raise ValueError("measured_target needs a sample source or a serve path")
    return calibrated_target(
        backend,
        source,
        task.loadgen_scenario,
        batch_size=batch_size,
        samples_per_query=samples_per_query,
    )


def prepare_test(
    task: InstanceTask, benchmark: Benchmark, lg: Any, *, calibrated: float | None
) -> tuple[ResolvedSettings, Path, Any]:
    """Resolve the settings, write `<outdir>/user.conf` and load LoadGen's TestSettings from it
    in the task's mode; returns (resolved settings, user.conf path, TestSettings)."""
    resolved = resolve_settings(
        task.settings,
        benchmark,
        task.loadgen_scenario,
        calibrated_target=calibrated,
        whole_dataset=task.dataset is not None,
    )
    conf_path = atomic_write_text(Path(task.outdir) / "user.conf", resolved.conf_text())
    test_settings = load_test_settings(conf_path, resolved, lg)
    test_settings.mode = (
        lg.TestMode.AccuracyOnly if task.mode == "accuracy" else lg.TestMode.PerformanceOnly
    )
    return resolved, conf_path, test_settings


def log_settings(lg: Any, log_dir: Path) -> Any:
    """LoadGen LogSettings writing into `log_dir`, without stdout copy or trace."""
    settings = lg.LogSettings()
    settings.log_output.outdir = str(log_dir)
    settings.log_output.copy_summary_to_stdout = False
    settings.enable_trace = False  # trap 9: tracing costs Server latency
    return settings


def performance_count(resolved: ResolvedSettings, source: SampleSource) -> int:
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
    waiting = [before_start] if before_start is not None else []
    barrier_errors: list[Exception] = []

    def load(indices: list[int]) -> None:
        # An exception must not unwind through LoadGen (its threads then abort the process at
        # exit): a sample that cannot be loaded, or a failed barrier, aborts the run, so no
        # sample runs on rows that were never filled.
        try:
            library.load(indices, source)
        except Exception as exc:
            runner.abort(exc)
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
        lg.StartTestWithLogSettings(
            lg_sut, lg_qsl, test_settings, log_settings(lg, log_dir), str(audit_path)
        )
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


class CompletionCounts(Protocol):
    """What completed the samples of a test: the harness's BatchRunner or the runner's dispatcher."""

    completed: int
    failed_samples: int
    error: str | None


def task_result(
    task: InstanceTask,
    *,
    benchmark: Benchmark,
    source: SampleSource,
    resolved: ResolvedSettings,
    conf_path: Path,
    counts: CompletionCounts,
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
        report = accuracy.score(benchmark, source, task.log_dir, weights_synthetic=weights_synthetic)
    return InstanceResult(
        benchmark=benchmark.name,
        loadgen_scenario=task.loadgen_scenario,
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
        and resolved.target_source == "calibration"
        and MIN_DURATION_REASON in reasons
    )
    if not by_design:
        return list(reasons), False
    others = [r for r in reasons if r not in (MIN_DURATION_REASON, LOADGEN_OFFLINE_ADVICE)]
    return [QUICK_OFFLINE_REASON, *others], not others
