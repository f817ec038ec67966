"""Settings: presets, precedence, the user.conf parser traps, and LoadGen's read-back."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlperf_mig.errors import SettingsError
from mlperf_mig.harness.settings import (
    SettingsSpec,
    expected_test_seconds,
    needs_calibration,
    normalize_loadgen_scenario,
    profile_key,
    read_user_conf,
    resolve_settings,
)
from mlperf_mig.workloads.bert import BERT
from mlperf_mig.workloads.resnet50 import RESNET50


@pytest.fixture(name="conf")
def fixture_conf(tmp_path: Path):
    """Write a user.conf with the given text and return its path."""

    def write(text: str) -> Path:
        path = tmp_path / "user.conf"
        path.write_text(text)
        return path

    return write


def test_quick_preset_is_short() -> None:
    """The quick preset shrinks duration and sample counts for the time-driven LoadGen scenarios."""
    for scenario in ("Server", "SingleStream", "MultiStream"):
        values = resolve_settings(SettingsSpec(preset="quick"), RESNET50, scenario).values
        assert values["min_duration"] <= 5000
        assert values["performance_sample_count_override"] <= 256


def test_quick_accuracy_run_on_synthetic_samples_is_64_samples() -> None:
    """On synthetic samples the quick preset's accuracy run scores 64 samples."""
    values = resolve_settings(SettingsSpec(preset="quick"), BERT, "Offline").values
    assert values["accuracy_sample_count_override"] == 64


def test_quick_accuracy_run_on_a_dataset_scores_all_of_it() -> None:
    """With a real dataset the preset's accuracy sample count is dropped: every sample counts."""
    values = resolve_settings(
        SettingsSpec(preset="quick"), RESNET50, "Offline", whole_dataset=True
    ).values
    assert "accuracy_sample_count_override" not in values


def test_an_explicit_accuracy_count_still_applies_to_a_dataset() -> None:
    """An accuracy sample count the user sets applies to a dataset too."""
    spec = SettingsSpec(preset="quick", overrides={"accuracy_sample_count_override": 500})
    values = resolve_settings(spec, RESNET50, "Server", whole_dataset=True).values
    assert values["accuracy_sample_count_override"] == 500


def test_quick_offline_keeps_the_official_rules_in_the_log() -> None:
    """Quick Offline keeps the 600 s minimum and the official sample count a submission needs."""
    values = resolve_settings(
        SettingsSpec(preset="quick"), RESNET50, "Offline", calibrated_target=100.0
    ).values
    assert values["min_duration"] == 600_000
    assert "performance_sample_count_override" not in values


def test_quick_offline_query_holds_a_few_seconds_of_work() -> None:
    """The calibrated Offline target is scaled so the one query lasts offline_query_s, not 600 s."""
    rate = 100.0
    values = resolve_settings(
        SettingsSpec(preset="quick"), RESNET50, "Offline", calibrated_target=rate
    ).values
    query_seconds = values["target_qps"] * values["min_duration"] / 1000 / rate
    assert 1.0 <= query_seconds <= 5.0


def test_quick_offline_with_a_short_min_duration_is_not_scaled() -> None:
    """A user who shortens min_duration gets the calibrated target as it is: a VALID short run."""
    values = resolve_settings(
        SettingsSpec(preset="quick", overrides={"min_duration": 1000}),
        RESNET50,
        "Offline",
        calibrated_target=100.0,
    ).values
    assert values["target_qps"] == 100.0


def test_expected_test_seconds_follow_the_offline_query() -> None:
    """The progress display expects the query's few seconds, not the 600 s in the log."""
    assert expected_test_seconds(RESNET50, "Offline", "quick", {}) < 10
    assert expected_test_seconds(RESNET50, "Offline", "submission", {}) == 600


def test_submission_preset_only_sets_the_profile_target() -> None:
    """The submission preset leaves the rules to mlperf.conf and adds the per-profile target."""
    resolved = resolve_settings(
        SettingsSpec(preset="submission", profile="2g.20gb"), RESNET50, "Offline"
    )
    assert resolved.values == {"target_qps": 10600.0}
    assert resolved.target_source == "profile 2g"


def test_conf_text_has_spaces_and_no_comments() -> None:
    """Generated lines are `model.Scenario.key = value`, the only form LoadGen reads."""
    text = resolve_settings(
        SettingsSpec(overrides={"target_qps": 12.5}), BERT, "Server"
    ).conf_text()
    for line in text.splitlines():
        key, equals, _ = line.split()
        assert equals == "=" and key.startswith("bert.Server.") and "#" not in line
    assert "bert.Server.target_qps = 12.5" in text


def test_override_beats_user_conf_beats_preset(conf) -> None:
    """Keyword overrides win over the user.conf, which wins over the preset."""
    path = conf("resnet50.Offline.min_duration = 3000\n*.Offline.min_query_count = 7\n")
    spec = SettingsSpec(overrides={"min_duration": 1000}, user_conf=path)
    values = resolve_settings(spec, RESNET50, "Offline").values
    assert values["min_duration"] == 1000
    assert values["min_query_count"] == 7


def test_exact_user_conf_line_beats_wildcard(conf) -> None:
    """As in LoadGen, `resnet50.Offline.key` beats `*.*.key` whatever the line order."""
    path = conf("resnet50.Offline.min_duration = 3000\n*.*.min_duration = 9000\n")
    assert read_user_conf(path, "resnet50", "Offline") == {"min_duration": 3000}


def test_user_conf_lines_for_other_scenarios_are_skipped(conf) -> None:
    """Lines for another model or LoadGen scenario do not apply."""
    path = conf("bert.Offline.min_duration = 1\nresnet50.Server.target_qps = 5\n")
    assert read_user_conf(path, "resnet50", "Offline") == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("resnet50.Offline.min_duration=3000\n", "spaces"),
        ("resnet50.Offline.min_duration = 3000 # short\n", "trailing comment"),
        ("bert-99.Offline.min_duration = 3000\n", "model 'bert-99'"),
        ("resnet50.Offline.min_durations = 3000\n", "unknown LoadGen setting"),
        ("resnet50.Offline.min_duration = fast\n", "not a number"),
        ("resnet50.Server.target_latency = 0.5\n", "whole number"),
        ("resnet50.offline.min_duration = 3000\n", "scenario 'offline'"),
    ],
)
def test_user_conf_traps_raise(conf, text: str, message: str) -> None:
    """Lines LoadGen would ignore silently or reject raise SettingsError naming the problem."""
    path = conf(text)
    scenario = "Server" if "Server" in text else "Offline"
    with pytest.raises(SettingsError, match=message):
        read_user_conf(path, "resnet50", scenario)


def test_override_for_another_scenario_raises() -> None:
    """An override that does not apply to the LoadGen scenario is an error, not a no-op."""
    with pytest.raises(SettingsError, match="does not apply to the Offline"):
        resolve_settings(SettingsSpec(overrides={"target_latency": 5}), RESNET50, "Offline")


def test_missing_user_conf_raises(tmp_path: Path) -> None:
    """A user.conf path that does not exist is a settings error."""
    with pytest.raises(SettingsError, match=r"cannot read user\.conf"):
        read_user_conf(tmp_path / "nope.conf", "resnet50", "Offline")


def test_quick_preset_calibrates_unless_a_target_is_given(conf) -> None:
    """The quick preset measures the target only when nothing sets it."""
    assert needs_calibration(SettingsSpec(), RESNET50, "Offline")
    assert not needs_calibration(SettingsSpec(overrides={"target_qps": 5}), RESNET50, "Offline")
    path = conf("*.SingleStream.target_latency = 3\n")
    assert not needs_calibration(SettingsSpec(user_conf=path), RESNET50, "SingleStream")
    assert not needs_calibration(SettingsSpec(preset="submission"), RESNET50, "Offline")


def test_loadgen_scenario_names_are_normalised() -> None:
    """LoadGen scenario names are case-insensitive; MIG layout numbers are not accepted here."""
    assert normalize_loadgen_scenario("multistream") == "MultiStream"
    with pytest.raises(SettingsError, match="MIG layout"):
        normalize_loadgen_scenario("7")


def test_profile_keys() -> None:
    """MIG profile names map to their compute-slice key; None means CPU."""
    assert profile_key("3g.40gb") == "3g"
    assert profile_key(None) == "cpu"


def _load_in_child(path: str, *, generated: bool = False) -> str:
    import mlperf_loadgen as lg

    from mlperf_mig.harness.settings import load_test_settings

    resolved = resolve_settings(SettingsSpec(overrides={"min_duration": 1234}), RESNET50, "Offline")
    if generated:
        Path(path).write_text(resolved.conf_text())
    try:
        settings = load_test_settings(path, resolved, lg)
    except SettingsError as exc:
        return f"SettingsError: {exc}"
    return f"ok {settings.min_duration_ms} {settings.performance_sample_count_override}"


def test_loadgen_return_code_is_checked(in_child, conf) -> None:
    """A user.conf that LoadGen itself rejects (FromConfig != 0) raises SettingsError."""
    path = conf("resnet50.Offline.min_duration = 1234 # comment\n")
    assert in_child(_load_in_child, str(path)).startswith("SettingsError: LoadGen rejected")


def test_values_are_read_back_from_loadgen(in_child, conf) -> None:
    """Every generated value reaches TestSettings, checked one by one."""
    path = conf("")
    # quick Offline leaves the performance sample count to mlperf.conf (1024 for resnet50)
    assert in_child(_load_in_child, str(path), generated=True) == "ok 1234 1024"


def test_values_loadgen_ignored_are_caught(in_child, conf) -> None:
    """A value missing from the file LoadGen read is reported instead of silently dropped."""
    path = conf("resnet50.Offline.min_duration=1234\n")
    assert "did not take" in in_child(_load_in_child, str(path))


def _submission_settings_in_child(benchmark: str, scenario: str, path: str) -> dict[str, float]:
    import mlperf_loadgen as lg

    from mlperf_mig.harness.settings import load_test_settings
    from mlperf_mig.workloads import get_workload

    spec = SettingsSpec(preset="submission", profile="1g.10gb")
    resolved = resolve_settings(spec, get_workload(benchmark), scenario)
    Path(path).write_text(resolved.conf_text())
    settings = load_test_settings(path, resolved, lg)
    return {
        "min_duration_ms": settings.min_duration_ms,
        "performance_sample_count_override": settings.performance_sample_count_override,
        "server_target_latency_ns": settings.server_target_latency_ns,
        "server_target_qps": settings.server_target_qps,
    }


@pytest.mark.parametrize(
    ("benchmark", "latency_ms", "samples"), [("resnet50", 15, 1024), ("bert", 130, 10833)]
)
def test_submission_preset_gets_the_official_rules(
    in_child, tmp_path: Path, benchmark: str, latency_ms: int, samples: int
) -> None:
    """The submission preset leaves LoadGen's mlperf.conf rules in force: 600 s, bounds, counts."""
    values = in_child(
        _submission_settings_in_child, benchmark, "Server", str(tmp_path / "user.conf")
    )
    assert values["min_duration_ms"] == 600_000
    assert values["server_target_latency_ns"] == latency_ms * 1_000_000
    assert values["performance_sample_count_override"] == samples
    assert values["server_target_qps"] > 0
