"""Tiny models in ONNX Runtime through the harness: all four LoadGen scenarios and accuracy runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlperf_mig.engines import EngineSpec, resolve_spec
from mlperf_mig.harness import InstanceResult, InstanceTask, SettingsSpec, run_instance

SHORT = {"min_duration": 300, "min_query_count": 8}


@pytest.fixture(name="engine_cache", scope="module")
def fixture_engine_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One model and engine cache for the module."""
    return tmp_path_factory.mktemp("engines")


def _spec(benchmark: str, scenario: str, cache: Path) -> EngineSpec:
    return resolve_spec(
        benchmark, backend="onnxruntime", variant="tiny", loadgen_scenario=scenario, cache_dir=cache
    )


def _task(benchmark: str, scenario: str, cache: Path, outdir: Path, **fields) -> InstanceTask:
    return InstanceTask(
        benchmark=benchmark,
        loadgen_scenario=scenario,
        outdir=outdir,
        engine=_spec(benchmark, scenario, cache),
        cache_dir=cache,
        threads=1,
        settings=SettingsSpec(overrides=SHORT),
        **fields,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("benchmark", "scenario"),
    [
        ("resnet50", "Offline"),
        ("bert", "Server"),
        ("resnet50", "SingleStream"),
        ("resnet50", "MultiStream"),
    ],
)
def test_tiny_model_run_is_parsed(
    in_child, engine_cache: Path, tmp_path: Path, benchmark: str, scenario: str
) -> None:
    """The result names ONNX Runtime on the CPU and carries LoadGen's numbers."""
    task = _task(benchmark, scenario, engine_cache, tmp_path)
    result: InstanceResult = in_child(run_instance, task)
    assert result.error is None and result.samples_completed >= 8
    assert result.device.backend == "onnxruntime"
    assert result.device.provider == "CPUExecutionProvider" and result.device.threads == 1
    assert result.throughput > 0 and result.latency_ns["99.00"] > 0
    assert result.effective_settings["min_duration_ms"] == 300
    assert result.validity in ("VALID", "INVALID")  # parsed from the log
    assert result.valid == (result.validity == "VALID")  # no backend error: LoadGen decides


def test_imagenet_accuracy_run_gives_top1(
    in_child, engine_cache: Path, tmp_path: Path, imagenet_dir: Path
) -> None:
    """An accuracy run over an ImageNet-like folder computes top-1 over every image."""
    task = _task(
        "resnet50", "Offline", engine_cache, tmp_path, mode="accuracy", dataset=imagenet_dir
    )
    result: InstanceResult = in_child(run_instance, task)
    assert result.valid and result.synthetic_data is False
    report = result.accuracy
    assert report.metric == "top1" and report.sample_count == 6
    assert 0.0 <= report.value <= 100.0
    assert report.meaningful is False and "synthetic weights" in report.note


def test_squad_accuracy_run_gives_f1(
    in_child, engine_cache: Path, tmp_path: Path, squad_dir: Path
) -> None:
    """An accuracy run over a SQuAD-like file computes F1 and exact match over every question."""
    task = _task("bert", "Offline", engine_cache, tmp_path, mode="accuracy", dataset=squad_dir)
    result: InstanceResult = in_child(run_instance, task)
    report = result.accuracy
    assert report.metric == "f1" and report.sample_count == 3
    assert 0.0 <= report.value <= 100.0 and "exact_match" in report.extra
    assert report.meaningful is False
