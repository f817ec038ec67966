"""The worker entry point: one LoadGen test in this process, from an InstanceTask to its result.

LoadGen is process-global (traps 1 and 2): call run_instance once per process. The runner starts
one worker process per MIG instance and calls it there; the CLI calls it for one instance. The
test itself (settings, QSL/SUT lifetime, start barrier, result) is a LoadGenTest
(loadgen_test.py); this module brings the backend, the sample library and the SUT. The runner's
unified workers reuse `open_task_backend` and `measured_target`.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from typing import Any

from mlperf_mig.engines.backend import Backend
from mlperf_mig.harness.calibration import (
    CALIBRATION_CONSTANTS,
    calibrated_target,
    timed_target,
    warm_up,
    warm_up_path,
)
from mlperf_mig.harness.loadgen_test import LoadGenTest, calibration_applies, running
from mlperf_mig.harness.result import InstanceResult
from mlperf_mig.harness.reuse import WorkCache, machine_identity
from mlperf_mig.harness.samples import SampleLibrary, input_layouts
from mlperf_mig.harness.settings import MergedSettings, merge_settings, preset_calibrates
from mlperf_mig.harness.sut import (
    OFFLINE_COMPLETION_SAMPLES,
    BatchingSUT,
    BatchRunner,
    InlineSUT,
)
from mlperf_mig.harness.task import InstanceTask
from mlperf_mig.harness.token_sut import (
    TokenCompleter,
    TokenStreamSUT,
    first_prompts,
    generation_target,
)
from mlperf_mig.workloads import Workload
from mlperf_mig.workloads.generation import ModelFreeGenerator, TokenGenerator
from mlperf_mig.workloads.samples import SampleSource

logger = logging.getLogger(__name__)

DEFAULT_BATCH = {"Offline": 64, "Server": 8, "SingleStream": 1, "MultiStream": 8}
WINDOW_FRACTION = 1 / 15  # Server batching window against the latency bound: 1 ms for ResNet50


def open_task_backend(task: InstanceTask, benchmark: Workload) -> Backend:
    """Open the task's backend in this process (the null backend when there is no engine), under
    the duty cycle of an emulated instance's CPU budget when it has one."""
    from mlperf_mig.emulation.cpu_budget import budgeted

    if task.engine is None:
        from mlperf_mig.engines.backends.null import NullBackend

        return budgeted(NullBackend(benchmark))
    from mlperf_mig.engines import open_backend

    return budgeted(open_backend(task.engine, cache_dir=task.cache_dir, threads=task.threads))


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
    import mlperf_loadgen as lg

    with LoadGenTest(task) as test, open_task_backend(task, test.benchmark) as backend:
        if test.benchmark.generates_tokens:
            return _run_token_test(task, test, backend, before_start, progress)
        source = test.source
        batch_size = batch_size_of(task)
        library = SampleLibrary.allocate(
            input_layouts(test.benchmark),
            capacity=test.performance_count,
            total_count=source.total_count,
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
        work = WorkCache.for_cache_dir(task.cache_dir)
        target, cached, inputs = reused_or_measured_target(
            task, test.benchmark, backend, source, batch_size=batch_size, settings=test.settings,
            path="library", work=work,
        )  # fmt: skip
        if task.audit is not None and preset_calibrates(test.settings.data, task.settings.preset):
            # The performance run the audit is compared with timed the backend before its test
            # (the first calls of a backend are slow); the audit, which keeps that run's target,
            # times it the same way so that both start warm.
            calibrated_target(
                backend, source, task.loadgen_scenario, batch_size=batch_size,
                samples_per_query=test.samples_per_query,
            )  # fmt: skip
        sut = _make_sut(task, runner, test.benchmark)
        test.run(
            issue=sut.issue,
            flush=sut.flush,
            load=lambda indices: work.load_samples(library, indices, source),
            unload=library.unload,
            abort=runner.abort,
            calibrated_target=target,
            before_start=before_start,
            serving=running(sut.start, sut.stop),
            target_cached=cached,
        )
        if progress is not None:
            progress(runner.completed)
        result = test.result(
            runner, device=backend.device, weights_synthetic=weights_are_synthetic(task)
        )
        if cached and inputs is not None and target_was_wrong(result):
            # a cached Server or stream target that LoadGen found too high: measure it again
            work.forget_target(inputs, f"the test was INVALID: {'; '.join(result.invalid_reasons)}")
        return result


def open_generator(
    task: InstanceTask, benchmark: Workload, backend: Backend, *, max_new_tokens: int
) -> TokenGenerator:
    """What generates the task's tokens: the backend's own generator (vLLM), the model-free one
    of the null backend, or the workload's KV-cache loop over the backend's decoder graph."""
    from mlperf_mig.engines import backend_class

    max_batch = batch_size_of(task)
    generator = getattr(backend, "token_generator", None)
    if callable(generator):
        made: TokenGenerator = generator(max_new_tokens=max_new_tokens, max_batch=max_batch)
        return made
    if task.engine is None or not backend_class(task.engine.backend).runs_model:
        return ModelFreeGenerator(max_new_tokens=max_new_tokens)
    return benchmark.token_generator(
        backend.run, variant=task.engine.variant, max_new_tokens=max_new_tokens,
        max_batch=max_batch,
    )  # fmt: skip


def _run_token_test(
    task: InstanceTask,
    test: LoadGenTest,
    backend: Backend,
    before_start: Callable[[], None] | None,
    progress: Callable[[int], None] | None,
) -> InstanceResult:
    """`run_instance` of a generative workload: a TokenStreamSUT in every scenario."""
    import mlperf_loadgen as lg

    benchmark, source = test.benchmark, test.source
    layouts = input_layouts(benchmark)
    library = SampleLibrary.allocate(
        layouts, capacity=test.performance_count, total_count=source.total_count
    )
    generator = open_generator(task, benchmark, backend, max_new_tokens=test.settings.new_tokens)
    try:
        target = None
        if test.calibrates:
            warm = first_prompts(source, layouts, batch_size_of(task))
            target = generation_target(
                generator, warm, task.loadgen_scenario, batch_size=batch_size_of(task)
            )
            logger.info("calibrated %s target: %.4g", task.loadgen_scenario, target)
        completer = TokenCompleter(
            lg, needs_first_token=task.loadgen_scenario != "Offline", progress=progress
        )
        sut = TokenStreamSUT(
            completer=completer, generator=generator, library=library,
            name=f"the {backend.device.backend} generator",
        )  # fmt: skip
        test.run(
            issue=sut.issue,
            flush=sut.flush,
            load=lambda indices: library.load(indices, source),
            unload=library.unload,
            abort=sut.abort,
            calibrated_target=target,
            before_start=before_start,
            serving=running(sut.start, sut.stop),
        )
        if progress is not None:
            progress(completer.completed)
        return test.result(
            sut, device=backend.device, weights_synthetic=weights_are_synthetic(task)
        )
    finally:
        generator.close()


def calibration_inputs(
    task: InstanceTask, batch_size: int, samples_per_query: int, *, path: str
) -> dict[str, Any] | None:
    """What a measured target depends on (harness/reuse.py), or None when it is not kept: the
    null backend (no engine: its calibration costs microseconds)."""
    if task.engine is None:
        return None
    model_stamp = None
    if task.engine.model_path is not None:
        with contextlib.suppress(OSError):
            status = os.stat(task.engine.model_path)
            model_stamp = [status.st_size, status.st_mtime_ns]
    return {
        "kind": "calibrated target",
        "engine": task.engine.to_dict(),
        "model_stamp": model_stamp,
        "benchmark": task.benchmark.name,
        "loadgen_scenario": task.loadgen_scenario,
        "preset": task.settings.preset,
        "batch_size": batch_size,
        "samples_per_query": samples_per_query,
        "samples": {"dataset": task.dataset, "sample_count": task.sample_count, "seed": task.seed},
        "path": path,
        "calibration": CALIBRATION_CONSTANTS,
        "machine": machine_identity(task.threads),
    }


def reused_or_measured_target(
    task: InstanceTask,
    benchmark: Workload,
    backend: Backend,
    source: SampleSource | None,
    *,
    batch_size: int,
    path: str,
    work: WorkCache,
    serve_path: tuple[Callable[[Any], Any], int] | None = None,
    settings: MergedSettings | None = None,
) -> tuple[float | None, bool, dict[str, Any] | None]:
    """`measured_target`, or the target an earlier run measured with the same inputs
    (harness/reuse.py; then one untimed batch warms the backend, as calibration's first call
    would have): (target, whether it was reused, the inputs it is kept under or None).
    `path` names the timed path in the key ("library", "shared memory")."""
    if settings is None:
        settings = merge_settings(task.settings, benchmark, task.loadgen_scenario)
    if not calibration_applies(task, settings):
        return None, False, None
    samples_per_query = int(settings.values.get("samples_per_query", 8))
    inputs = calibration_inputs(task, batch_size, samples_per_query, path=path)
    cached = work.target(inputs) if inputs is not None else None
    if cached is not None:
        if serve_path is not None:
            warm_up_path(
                backend, serve_path[0], serve_path[1], task.loadgen_scenario,
                batch_size=batch_size, samples_per_query=samples_per_query,
            )  # fmt: skip
        elif source is not None:
            warm_up(
                backend, source, task.loadgen_scenario, batch_size=batch_size,
                samples_per_query=samples_per_query,
            )  # fmt: skip
        logger.info("calibrated %s target: %.4g (cached: measured by an earlier run)",
                    task.loadgen_scenario, cached)  # fmt: skip
        return cached, True, inputs
    target = measured_target(
        task, benchmark, backend, source, batch_size=batch_size, serve_path=serve_path,
        settings=settings,
    )  # fmt: skip
    if target is not None and inputs is not None:
        work.store_target(inputs, target)
    return target, False, inputs


def target_was_wrong(result: InstanceResult) -> bool:
    """A test LoadGen found INVALID whose target decides its validity (Server and the stream
    scenarios; the quick preset's Offline is INVALID by design)."""
    return (
        result.mode == "performance"
        and result.error is None
        and not result.valid
        and not result.invalid_by_design
        and result.loadgen_scenario != "Offline"
    )


def measured_target(
    task: InstanceTask,
    benchmark: Workload,
    backend: Backend,
    source: SampleSource | None,
    *,
    batch_size: int,
    serve_path: tuple[Callable[[Any], Any], int] | None = None,
    settings: MergedSettings | None = None,
) -> float | None:
    """The target timed on `backend` when the task calibrates (see calibration.py), else None.

    The timing covers the harness's own batch path on the first samples of `source`, or, with
    `serve_path` = (gather(rows) -> feeds, rows available), the path by which the samples reach
    the backend instead (the runner's unified mode copies them out of shared memory).
    `settings`: the task's settings when the caller has read them already.
    """
    if settings is None:
        settings = merge_settings(task.settings, benchmark, task.loadgen_scenario)
    if not calibration_applies(task, settings):
        return None
    samples_per_query = int(settings.values.get("samples_per_query", 8))
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


def _make_sut(
    task: InstanceTask, runner: BatchRunner, benchmark: Workload
) -> InlineSUT | BatchingSUT:
    if task.loadgen_scenario != "Server":
        return InlineSUT(runner, offline=task.loadgen_scenario == "Offline")
    window_ms = task.batch_window_ms
    if window_ms is None:
        window_ms = benchmark.server_latency_bound_ms * WINDOW_FRACTION
    return BatchingSUT(runner, window_s=window_ms / 1e3)
