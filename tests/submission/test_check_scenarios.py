"""check_submission's rules in every LoadGen scenario: trees from genuine LoadGen logs of each
scenario pass, and each tree broken in one way is reported for that rule."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from mlperf_mig.submission import check_submission, rules

pytestmark = [
    pytest.mark.usefixtures("fixed_host"),
    pytest.mark.slow,  # genuine LoadGen runs of each LoadGen scenario, and the runner's workers
]

SCENARIOS = ("Offline", "Server", "SingleStream", "MultiStream")


@pytest.fixture(name="trees", scope="module")
def fixture_trees(good_tree: Path, scenario_trees: dict[str, Path]) -> dict[str, Path]:
    """The good tree of every LoadGen scenario (Offline: the runner's unified run)."""
    return {"Offline": good_tree, **scenario_trees}


def _copy(trees: dict[str, Path], scenario: str, tmp_path: Path) -> Path:
    return shutil.copytree(trees[scenario], tmp_path / "tree")


def _result(tree: Path) -> Path:
    (folder,) = (tree / "open" / "Acme" / "results").glob("*/resnet50/*")
    return folder


def _perf_detail(tree: Path) -> Path:
    return _result(tree) / "performance" / "run_1" / "mlperf_log_detail.txt"


def _set_record(detail: Path, key: str, value: object) -> None:
    """Replace the value of every `key` record of a detail log."""
    pattern = re.compile(rf'("key": "{re.escape(key)}", "value": )("[^"]*"|[^,]*)')
    text, count = pattern.subn(lambda m: m.group(1) + json.dumps(value), detail.read_text())
    assert count, f"no {key} record in {detail}"
    detail.write_text(text)


def _messages(tree: Path) -> list[str]:
    return [str(p) for p in check_submission(tree)]


def _reported(tree: Path, fragment: str) -> bool:
    return any(fragment in m for m in _messages(tree))


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_genuine_tree_of_each_scenario_passes(trees: dict[str, Path], scenario: str) -> None:
    """A tree written from a real LoadGen run of the scenario breaks no rule."""
    tree = trees[scenario]
    assert _result(tree).name == scenario
    assert check_submission(tree) == ()


@pytest.mark.parametrize("scenario", ("Server", "SingleStream", "MultiStream"))
def test_early_stopping_not_met(trees: dict[str, Path], tmp_path: Path, scenario: str) -> None:
    """In the early-stopping scenarios a log whose early stopping was not met is reported."""
    tree = _copy(trees, scenario, tmp_path)
    _set_record(_perf_detail(tree), "early_stopping_met", False)
    assert _messages(tree) == [
        f"{_perf_detail(tree).relative_to(tree)}: early stopping condition not met "
        "(too few queries for an estimate)"
    ]


def test_server_target_latency_above_the_bound(trees: dict[str, Path], tmp_path: Path) -> None:
    """A ResNet50 Server run whose target latency is above the 15 ms bound is reported."""
    tree = _copy(trees, "Server", tmp_path)
    _set_record(_perf_detail(tree), "effective_target_latency_ns", 15_000_001)
    assert _reported(tree, "target latency 15000001 ns exceeds the bound 15000000 ns")


def test_server_target_latency_at_the_bound_passes(trees: dict[str, Path], tmp_path: Path) -> None:
    """A target latency equal to the bound is within it (the genuine log's 10 ms is below it)."""
    tree = _copy(trees, "Server", tmp_path)
    _set_record(
        _perf_detail(tree),
        "effective_target_latency_ns",
        rules.checker_model("resnet").server_latency_bound_ns,
    )
    assert check_submission(tree) == ()


def test_offline_min_query_count(trees: dict[str, Path], tmp_path: Path) -> None:
    """Offline, the one scenario without early stopping, needs min_query_count >= 1."""
    tree = _copy(trees, "Offline", tmp_path)
    _set_record(_perf_detail(tree), "effective_min_query_count", 0)
    assert _reported(tree, "min_query_count is 0; the checker needs >= 1")


@pytest.mark.parametrize("scenario", ("Server", "SingleStream", "MultiStream"))
def test_early_stopping_scenarios_ignore_the_min_query_count(
    trees: dict[str, Path], tmp_path: Path, scenario: str
) -> None:
    """With early stopping the checker does not read min_query_count (the genuine logs have 100)."""
    tree = _copy(trees, scenario, tmp_path)
    _set_record(_perf_detail(tree), "effective_min_query_count", 1)
    assert check_submission(tree) == ()


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("seed", sorted(rules.SEEDS[rules.DEFAULT_VERSION]))
def test_every_seed_is_checked(
    trees: dict[str, Path], tmp_path: Path, scenario: str, seed: str
) -> None:
    """Each of the three LoadGen seeds, changed alone, is reported by name."""
    tree = _copy(trees, scenario, tmp_path)
    _set_record(_perf_detail(tree), f"effective_{seed}", 12345)
    expected = rules.SEEDS[rules.DEFAULT_VERSION][seed]
    assert _reported(tree, f"{seed} is 12345, checker v6.1 expects {expected}")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_min_duration_below_600_s(trees: dict[str, Path], tmp_path: Path, scenario: str) -> None:
    """A minimum duration under 600 s is reported in every scenario."""
    tree = _copy(trees, scenario, tmp_path)
    _set_record(_perf_detail(tree), "effective_min_duration_ms", 599_999)
    assert _reported(tree, "min_duration is 599999 ms; the checker needs >= 600000 ms")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_performance_sample_count_below_1024(
    trees: dict[str, Path], tmp_path: Path, scenario: str
) -> None:
    """Fewer than ResNet50's 1024 performance samples is reported in every scenario."""
    tree = _copy(trees, scenario, tmp_path)
    _set_record(_perf_detail(tree), "effective_performance_sample_count", 1023)
    assert _reported(tree, "performance_sample_count is 1023; the checker needs >= 1024")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_accuracy_folder_holding_a_performance_run(
    trees: dict[str, Path], tmp_path: Path, scenario: str
) -> None:
    """accuracy/ with the logs of a performance run is reported."""
    tree = _copy(trees, scenario, tmp_path)
    shutil.copyfile(_perf_detail(tree), _result(tree) / "accuracy" / "mlperf_log_detail.txt")
    assert _reported(tree, "the log is a PerformanceOnly run, not an accuracy run")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_performance_folder_holding_an_accuracy_run(
    trees: dict[str, Path], tmp_path: Path, scenario: str
) -> None:
    """performance/run_1 with the logs of an accuracy run is reported."""
    tree = _copy(trees, scenario, tmp_path)
    shutil.copyfile(_result(tree) / "accuracy" / "mlperf_log_detail.txt", _perf_detail(tree))
    assert _reported(tree, "the log is an accuracy run; performance/run_1 needs a performance run")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_log_of_another_scenario(trees: dict[str, Path], tmp_path: Path, scenario: str) -> None:
    """A performance log of another LoadGen scenario than its folder is reported."""
    tree = _copy(trees, scenario, tmp_path)
    other = "Offline" if scenario != "Offline" else "Server"
    shutil.copyfile(_perf_detail(trees[other]), _perf_detail(tree))
    assert _reported(tree, f"the log is a {other} run but the folder says {scenario}")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_system_without_results(trees: dict[str, Path], tmp_path: Path, scenario: str) -> None:
    """A system description with no results folder is reported."""
    tree = _copy(trees, scenario, tmp_path)
    systems = tree / "open" / "Acme" / "systems"
    (description,) = systems.glob("*.json")
    shutil.copyfile(description, systems / "Spare-system.json")
    assert _messages(tree) == [
        "open/Acme/systems/Spare-system.json: system description without results"
    ]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_result_record_missing(trees: dict[str, Path], tmp_path: Path, scenario: str) -> None:
    """Without the record the checker reads the scenario's result from, the result is reported."""
    tree = _copy(trees, scenario, tmp_path)
    key = rules.RESULT_KEYS[scenario]
    detail = _perf_detail(tree)
    detail.write_text(
        "".join(line for line in detail.read_text().splitlines(True) if f'"{key}"' not in line)
    )
    assert _reported(tree, f"no numeric {key} record")
