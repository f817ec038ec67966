"""task_result: the InstanceResult of a finished test, built from its detail log."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from mlperf_mig.engines.backend import DeviceReport
from mlperf_mig.errors import SettingsError
from mlperf_mig.harness import InstanceTask, SettingsSpec
from mlperf_mig.harness.loadgen_test import task_result
from mlperf_mig.harness.logs import DETAIL_LOG
from mlperf_mig.harness.result import LOADGEN_OFFLINE_ADVICE, MIN_DURATION_REASON
from mlperf_mig.harness.settings import resolve_settings
from mlperf_mig.workloads.resnet50 import RESNET50
from mlperf_mig.workloads.samples import SyntheticSource

SHORT_OFFLINE = {
    "result_validity": "INVALID",
    "result_min_duration_met": False,
    "result_invalid_reason": LOADGEN_OFFLINE_ADVICE,
    "result_samples_per_second": 100.0,
}


def _write_detail_log(folder: Path, records: dict[str, object]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    lines = [
        ":::MLLOG " + json.dumps({"key": k, "value": v, "metadata": {}}) for k, v in records.items()
    ]
    (folder / DETAIL_LOG).write_text("\n".join(lines) + "\n")


def _result(tmp_path: Path, *, preset: str, error: str | None = None, calibrated: float | None):
    task = InstanceTask(
        benchmark="resnet50",
        loadgen_scenario="Offline",
        outdir=tmp_path,
        settings=SettingsSpec(preset=preset),
    )
    _write_detail_log(task.log_dir, SHORT_OFFLINE)
    resolved = resolve_settings(task.settings, RESNET50, "Offline", calibrated_target=calibrated)
    return task_result(
        task,
        benchmark=RESNET50,
        source=SyntheticSource(benchmark=RESNET50, total_count=8, performance_count=8),
        resolved=resolved,
        conf_path=tmp_path / "user.conf",
        counts=SimpleNamespace(completed=8, failed_samples=0 if error is None else 8, error=error),
        device=DeviceReport(backend="null", provider="none", device="cpu"),
        weights_synthetic=True,
        wall_s=1.0,
    )


def test_quick_offline_is_invalid_by_design(tmp_path: Path) -> None:
    """A short quick-preset Offline run is INVALID by design, explained in one reason."""
    result = _result(tmp_path, preset="quick", calibrated=100.0)
    assert not result.valid and result.invalid_by_design
    assert len(result.invalid_reasons) == 1
    assert "by design of the quick preset" in result.invalid_reasons[0]


def test_loadgen_advice_is_dropped_for_quick_offline(tmp_path: Path) -> None:
    """LoadGen's advice to raise the expected QPS would mislead for a short-by-design run."""
    result = _result(tmp_path, preset="quick", calibrated=100.0)
    assert LOADGEN_OFFLINE_ADVICE not in result.invalid_reasons


def test_submission_preset_short_run_is_a_plain_invalid(tmp_path: Path) -> None:
    """Under the submission preset a missed min duration is not by design."""
    result = _result(tmp_path, preset="submission", calibrated=None)
    assert not result.invalid_by_design
    assert result.invalid_reasons[0] == MIN_DURATION_REASON


def test_failed_samples_are_not_by_design(tmp_path: Path) -> None:
    """A backend error makes the run failed, whatever the preset."""
    result = _result(tmp_path, preset="quick", calibrated=100.0, error="RuntimeError: lost")
    assert not result.invalid_by_design
    assert result.invalid_reasons[0].startswith("run failed (8 samples without data)")


@pytest.mark.parametrize("field", ["sample_count", "batch_size", "threads"])
def test_counts_below_one_are_refused(tmp_path: Path, field: str) -> None:
    """0 would quietly mean the default further down: refused with SettingsError."""
    with pytest.raises(SettingsError, match=field):
        InstanceTask(
            benchmark="resnet50", loadgen_scenario="Offline", outdir=tmp_path, **{field: 0}
        )


def test_unknown_mode_is_a_settings_error(tmp_path: Path) -> None:
    """A mode other than performance/accuracy is bad input (exit 2), not a ValueError traceback."""
    with pytest.raises(SettingsError, match="performance, accuracy"):
        InstanceTask(benchmark="resnet50", loadgen_scenario="Offline", outdir=tmp_path, mode="perf")


def test_harness_summary_says_by_design(tmp_path: Path) -> None:
    """`mlperf-mig harness` prints a quick Offline INVALID as by design, not as a failure."""
    from mlperf_mig.harness.cli import summary

    text = summary(_result(tmp_path, preset="quick", calibrated=100.0))
    assert "INVALID (by design of the quick preset, not a failure" in text
