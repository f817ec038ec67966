"""The one range check of LoadGen settings: every source, refused before any worker starts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mlperf_mig import cli
from mlperf_mig.errors import SettingsError
from mlperf_mig.harness import settings
from mlperf_mig.harness.settings import SettingsSpec, queued_samples, resolve_settings
from mlperf_mig.workloads.resnet50 import RESNET50


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mlperf-mig: error:") and "\n" not in err
    return err


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("0", "must be positive"),
        ("1e-9", "fewer than one per min_duration"),
        ("1e12", "half of this machine's"),
    ],
)
def test_server_target_refused_before_workers(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, value: str, fragment: str, live_children
) -> None:
    """`run --set target_qps=0 / 1e-9 / 1e12` on Server: one line naming the setting and the bound,
    exit 2, no run folder, no process left."""
    outdir = tmp_path / "run"
    before = live_children()  # a fork server an earlier test started may be there already
    err = _refused(
        capsys,
        [
            "run",
            "--backend",
            "null",
            "--loadgen-scenario",
            "Server",
            "--set",
            f"target_qps={value}",
            "--outdir",
            str(outdir),
        ],
    )
    assert "setting target_qps (--set / settings=)" in err and fragment in err
    assert not outdir.exists() and os.listdir(tmp_path) == []
    assert live_children() <= before


def test_user_conf_target_of_zero_names_the_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A user.conf's Server target of 0 is refused naming that user.conf, and the file is kept."""
    conf = tmp_path / "user.conf"
    conf.write_text("resnet50.Server.target_qps = 0\n")
    outdir = tmp_path / "run"
    err = _refused(
        capsys,
        [
            "run",
            "--backend",
            "null",
            "--loadgen-scenario",
            "Server",
            "--user-conf",
            str(conf),
            "--outdir",
            str(outdir),
        ],
    )
    assert f"user.conf {str(conf)!r}" in err and "target_qps = 0" in err
    assert not outdir.exists() and conf.read_text() == "resnet50.Server.target_qps = 0\n"


def test_huge_min_query_count_names_that_setting() -> None:
    """A min_query_count that would fill the memory is refused naming min_query_count."""
    spec = SettingsSpec(overrides={"target_qps": 10, "min_query_count": 1e13})
    with pytest.raises(
        SettingsError, match=r"min_query_count = .* makes LoadGen build 1e\+13 samples"
    ):
        resolve_settings(spec, RESNET50, "Server")


def test_tiny_single_stream_latency_is_refused() -> None:
    """A SingleStream latency of 1e-9 ms would make LoadGen generate 4e12 queries: refused."""
    with pytest.raises(SettingsError, match=r"target_latency = 1e-09 .*raise target_latency"):
        resolve_settings(SettingsSpec(overrides={"target_latency": 1e-9}), RESNET50, "SingleStream")


def test_zero_latency_is_refused() -> None:
    """A target_latency of 0 is refused as not positive."""
    with pytest.raises(SettingsError, match=r"target_latency = 0 .*must be positive"):
        resolve_settings(SettingsSpec(overrides={"target_latency": 0}), RESNET50, "MultiStream")


def test_percentile_of_100_is_refused() -> None:
    """LoadGen indexes its sorted latencies with the percentile: 100 would read past the end."""
    with pytest.raises(SettingsError, match="strictly between 0 and 100"):
        resolve_settings(
            SettingsSpec(overrides={"target_latency_percentile": 100}), RESNET50, "Server"
        )


def test_small_offline_target_is_accepted() -> None:
    """An Offline target of 0.1 QPS over 600 s (a short run the checker accepts) is no hazard."""
    spec = SettingsSpec(overrides={"target_qps": 0.1, "min_duration": 600000})
    assert resolve_settings(spec, RESNET50, "Offline").values["target_qps"] == 0.1


def test_calibrated_target_is_checked_and_named() -> None:
    """A measured Server target too small to schedule a query is refused naming calibration."""
    with pytest.raises(SettingsError, match="the target measured by calibration"):
        resolve_settings(SettingsSpec(preset="quick"), RESNET50, "Server", calibrated_target=1e-9)


def test_short_calibrating_run_still_plans() -> None:
    """A calibrating Server run of 300 ms (its target measured later) is not refused by the check."""
    import mlperf_mig

    the_plan = mlperf_mig.plan(
        2, backend="null", loadgen_scenario="Server", settings={"min_duration": 300}
    )
    assert dict(the_plan.overrides) == {"min_duration": 300}


def test_bound_follows_this_machines_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """The queue bound is half the machine's memory: 1 GiB refuses what 64 GiB accepts."""
    spec = SettingsSpec(overrides={"target_qps": 1e6})  # 2e6 samples over the quick 2 s
    monkeypatch.setattr(settings, "machine_memory_bytes", lambda: 64 * 2**30)
    assert queued_samples(resolve_settings(spec, RESNET50, "Server").values, "Server") == (
        2e6,
        "target",
    )
    monkeypatch.setattr(settings, "machine_memory_bytes", lambda: 2**30)
    with pytest.raises(SettingsError, match=r"half of this machine's 1\.0 GiB"):
        resolve_settings(spec, RESNET50, "Server")


def test_layout_queues_are_bounded_together(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seven independent LoadGens that each fit alone are refused when together they exceed the
    bound; one unified LoadGen with the same target is not."""
    import mlperf_mig

    monkeypatch.setattr(settings, "machine_memory_bytes", lambda: 2**30)  # holds 1.28e6 samples
    target = {"target_qps": 2e5}  # 4e5 samples each over the quick 2 s, 2.8e6 for seven
    with pytest.raises(SettingsError, match="the 7 instances' LoadGen tests run at once"):
        mlperf_mig.plan(scenario=8, loadgen_scenario="Server", backend="null", settings=target)
    mlperf_mig.plan(
        scenario=8, loadgen_scenario="Server", backend="null", settings=target, mode="unified"
    )
    mlperf_mig.plan(scenario=1, loadgen_scenario="Server", backend="null", settings=target)
