"""The LoadGen test object: settings read once, and its use outside its lifetime refused.

Its runs (QSL/SUT lifetime, barrier, result) are tested through run_instance (test_run_null.py)
and the unified coordinator (tests/runner/test_unified.py), in child processes: LoadGen is
process-global.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mlperf_mig.harness import InstanceTask, SettingsSpec, settings
from mlperf_mig.harness.loadgen_test import LoadGenTest


@pytest.fixture(name="task")
def fixture_task(tmp_path: Path) -> InstanceTask:
    """A synthetic ResNet50 Offline task with a user.conf that sets the sample count."""
    conf = tmp_path / "my.conf"
    conf.write_text("resnet50.Offline.performance_sample_count_override = 128\n")
    return InstanceTask(
        benchmark="resnet50",
        loadgen_scenario="Offline",
        outdir=tmp_path / "instance",
        settings=SettingsSpec(user_conf=str(conf)),
        sample_count=256,
    )


def test_settings_are_read_once(task: InstanceTask, monkeypatch: pytest.MonkeyPatch) -> None:
    """Entering reads the user.conf once; the count, the target choice and the query size reuse it."""
    reads = []
    read = settings.read_user_conf
    monkeypatch.setattr(settings, "read_user_conf", lambda *a: reads.append(a) or read(*a))
    with LoadGenTest(task) as test:
        assert test.performance_count == 128
        assert test.calibrates and test.samples_per_query == 8
        assert test.settings.resolve(40.0).target_source == "calibration"
    assert len(reads) == 1


def test_use_outside_the_with_block_is_refused(task: InstanceTask) -> None:
    """Asking for the samples before entering says the object is used outside its block."""
    with pytest.raises(RuntimeError, match="outside its `with` block"):
        LoadGenTest(task).source  # noqa: B018 - the property is the behaviour under test


def test_result_before_run_is_refused(task: InstanceTask) -> None:
    """A result asked for before the test ran is refused instead of parsing stale logs."""
    with LoadGenTest(task) as test, pytest.raises(RuntimeError, match=r"before run\(\)"):
        test.result(object(), device=None, weights_synthetic=True)  # type: ignore[arg-type]
