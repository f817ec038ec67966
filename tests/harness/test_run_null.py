"""One LoadGen test per spawned process with the null backend, in all four LoadGen scenarios."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import attrs
import pytest

from mlperf_mig.harness import InstanceResult, InstanceTask, SettingsSpec, run_instance
from mlperf_mig.harness.logs import ACCURACY_LOG, DETAIL_LOG, SUMMARY_LOG

SHORT = {"min_duration": 500}


def _task(tmp_path: Path, benchmark: str, scenario: str, **overrides: float) -> InstanceTask:
    return InstanceTask(
        benchmark=benchmark,
        loadgen_scenario=scenario,
        outdir=tmp_path / "instance",
        settings=SettingsSpec(overrides={**SHORT, **overrides}),
        sample_count=256,
    )


def test_task_pickles(tmp_path: Path) -> None:
    """Tasks are plain records that cross to spawned workers."""
    task = _task(tmp_path, "resnet50", "Offline")
    assert pickle.loads(pickle.dumps(task)) == task


@pytest.mark.parametrize(
    ("benchmark", "scenario", "unit"),
    [
        ("resnet50", "Offline", "samples/s"),
        ("bert", "Server", "scheduled samples/s"),
        ("resnet50", "SingleStream", "samples/s (1 / p90 latency)"),
        ("bert", "MultiStream", "samples/s (8 / p99 query latency)"),
    ],
)
def test_null_backend_run_is_parsed(
    in_child, tmp_path: Path, benchmark: str, scenario: str, unit: str
) -> None:
    """A short run writes the MLPerf logs and the result carries the parsed fields."""
    result: InstanceResult = in_child(run_instance, _task(tmp_path, benchmark, scenario))
    log_dir = tmp_path / "instance" / "performance"
    for name in (DETAIL_LOG, SUMMARY_LOG, ACCURACY_LOG):
        assert (log_dir / name).is_file()
    assert not (log_dir / "mlperf_log_trace.json").stat().st_size  # trace off
    assert result.validity in ("VALID", "INVALID")  # parsed from the log
    assert result.valid == (result.validity == "VALID")  # no backend error: LoadGen decides
    assert result.throughput > 0 and result.throughput_unit == unit
    assert result.latency_ns["99.00"] >= result.latency_ns["50.00"] > 0
    assert result.effective_settings["min_duration_ms"] == 500
    assert result.effective_settings["scenario"] == scenario
    assert result.device.backend == "null"
    assert result.samples_completed > 0 and result.error is None
    assert result.target_source == "calibration"
    assert Path(result.user_conf).read_text().startswith(f"{benchmark}.{scenario}.")


def test_offline_target_from_override_is_used(in_child, tmp_path: Path) -> None:
    """An explicit target beats calibration and is what LoadGen ran with."""
    task = _task(tmp_path, "bert", "Offline", target_qps=20000)
    result = in_child(run_instance, task)
    assert result.target_source == "override"
    assert result.effective_settings["target_qps"] == 20000


def test_null_accuracy_run_says_not_meaningful(in_child, tmp_path: Path) -> None:
    """An AccuracyOnly run on synthetic data reports that accuracy is not meaningful."""
    result = in_child(run_instance, _accuracy_task(tmp_path))
    assert result.mode == "accuracy" and result.valid
    assert result.accuracy.meaningful is False and result.accuracy.passed is None
    assert "synthetic data" in result.accuracy.note
    assert (tmp_path / "instance" / "accuracy" / ACCURACY_LOG).stat().st_size > 100


def test_failed_accuracy_run_is_not_scored(in_child, tmp_path: Path, imagenet_dir: Path) -> None:
    """An accuracy run whose samples could not be loaded has no accuracy value, only the reason."""
    dataset = tmp_path / "imagenet"
    shutil.copytree(imagenet_dir, dataset)
    for image in dataset.glob("ILSVRC*"):
        image.write_bytes(b"not an image")
    task = attrs.evolve(_accuracy_task(tmp_path), dataset=dataset, sample_count=None)
    result = in_child(run_instance, task)
    assert result.failed and "cannot decode image" in result.error
    assert result.failed_samples == result.samples_completed > 0  # none ran on unfilled rows
    report = result.accuracy
    assert report.value is None and report.passed is None and report.meaningful is False
    assert report.note.startswith("not scored: the run failed (") and "cannot decode" in report.note


def _accuracy_task(tmp_path: Path) -> InstanceTask:
    return InstanceTask(
        benchmark="resnet50",
        loadgen_scenario="Offline",
        mode="accuracy",
        outdir=tmp_path / "instance",
        settings=SettingsSpec(overrides=SHORT),
        sample_count=32,
    )


def _run_with_failing_backend(task: InstanceTask) -> InstanceResult:
    from mlperf_mig.engines.backends.null import NullBackend

    def fail(self, feeds):
        raise RuntimeError("device lost")

    NullBackend.run = fail
    return run_instance(task)


def test_backend_failure_completes_the_run_and_fails_it(in_child, tmp_path: Path) -> None:
    """A backend that raises still lets LoadGen finish; the result is failed with the error."""
    task = _task(tmp_path, "resnet50", "Server", target_qps=200)
    result: InstanceResult = in_child(_run_with_failing_backend, task)
    assert result.failed and not result.valid
    assert result.error == "RuntimeError: device lost"
    assert result.failed_samples == result.samples_completed > 0
    assert result.invalid_reasons[0].startswith("run failed (")


def test_unwritable_outdir_raises(tmp_path: Path) -> None:
    """An output folder under a regular file cannot be created: OutputDirError, before LoadGen."""
    from mlperf_mig.errors import OutputDirError

    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(OutputDirError, match="cannot be written"):
        run_instance(_task(blocker / "sub", "resnet50", "Offline"))


def test_stray_audit_config_is_refused(tmp_path: Path) -> None:
    """An audit.config in the log folder would change LoadGen's settings silently: refused."""
    from mlperf_mig.errors import SettingsError

    log_dir = tmp_path / "instance" / "performance"
    log_dir.mkdir(parents=True)
    (log_dir / "audit.config").write_text("")
    with pytest.raises(SettingsError, match=r"audit\.config"):
        run_instance(_task(tmp_path, "resnet50", "Offline"))


def _run_with_barrier(task: InstanceTask) -> tuple[int, int]:
    """Run with a before_start that records how many samples were loaded when it ran."""
    import mlperf_mig.harness.samples as samples

    seen: list[int] = []
    loaded: list[int] = []
    original = samples.SampleLibrary.place

    def place(self, indices):
        unique = original(self, indices)
        loaded.append(self.loaded_count)
        return unique

    samples.SampleLibrary.place = place
    run_instance(task, before_start=lambda: seen.append(loaded[-1] if loaded else 0))
    return len(seen), seen[0]


def test_before_start_runs_once_after_the_samples_are_loaded(in_child, tmp_path: Path) -> None:
    """The runner's barrier runs once, with the performance sample set already loaded."""
    task = _task(tmp_path, "bert", "Offline", target_qps=1000, performance_sample_count_override=16)
    assert in_child(_run_with_barrier, task) == (1, 16)


def _run_with_failing_barrier(task: InstanceTask) -> str:
    def broken() -> None:
        raise TimeoutError("barrier not released")

    try:
        run_instance(task, before_start=broken)
    except TimeoutError as exc:
        return str(exc)
    return "no exception"


def test_failed_barrier_ends_the_run_and_is_raised(in_child, tmp_path: Path) -> None:
    """A before_start that raises is raised from run_instance once LoadGen has ended."""
    task = _task(tmp_path, "bert", "Server", target_qps=100)
    assert in_child(_run_with_failing_barrier, task) == "barrier not released"


def test_undecodable_image_fails_the_run(in_child, tmp_path: Path, imagenet_dir: Path) -> None:
    """An image that cannot be decoded while LoadGen loads samples fails the run, not the process."""
    folder = tmp_path / "broken"
    folder.mkdir()
    for item in imagenet_dir.iterdir():
        (folder / item.name).write_bytes(item.read_bytes())
    (folder / "ILSVRC2012_val_00000001.JPEG").write_bytes(b"not a jpeg")
    task = InstanceTask(
        benchmark="resnet50",
        loadgen_scenario="Offline",
        outdir=tmp_path / "instance",
        dataset=folder,
        settings=SettingsSpec(overrides={**SHORT, "target_qps": 100}),
    )
    result: InstanceResult = in_child(run_instance, task)
    assert result.failed and not result.valid and "cannot decode image" in result.error


def _run_with_progress(task: InstanceTask) -> tuple[InstanceResult, list[int]]:
    calls: list[int] = []
    return run_instance(task, progress=calls.append), calls


def test_progress_reports_completed_samples(in_child, tmp_path: Path) -> None:
    """progress() gets growing sample counts, the last one being every completed sample."""
    task = _task(tmp_path, "bert", "SingleStream", target_latency=0.01)
    result, calls = in_child(_run_with_progress, task)
    assert calls and calls == sorted(calls) and calls[-1] == result.samples_completed
