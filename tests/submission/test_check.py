"""check_submission: a good tree passes; each way of breaking it is reported."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from mlperf_mig.errors import SubmissionError
from mlperf_mig.harness import logs
from mlperf_mig.submission import check_submission

pytestmark = [
    pytest.mark.usefixtures("fixed_host"),
    pytest.mark.slow,  # its trees are written from runs of the runner's workers
]

SYSTEM = "A100-SXM4-80GB-MIG_2g.20gb_1g.10gb_ORT_emulated"


@pytest.fixture(name="tree")
def fixture_tree(good_tree: Path, tmp_path: Path) -> Path:
    """A private copy of the good tree to break."""
    return shutil.copytree(good_tree, tmp_path / "tree")


def _result(tree: Path) -> Path:
    return tree / "open" / "Acme" / "results" / SYSTEM / "resnet50" / "Offline"


def _system_file(tree: Path) -> Path:
    return tree / "open" / "Acme" / "systems" / f"{SYSTEM}.json"


def _edit_json(path: Path, change: Callable[[dict], None]) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _messages(tree: Path, **options: str) -> list[str]:
    return [str(p) for p in check_submission(tree, **options)]


def _reported(tree: Path, fragment: str, **options: str) -> bool:
    return any(fragment in m for m in _messages(tree, **options))


def test_good_tree_has_no_problem(good_tree: Path) -> None:
    """The tree the writer produced passes every rule."""
    assert check_submission(good_tree) == ()


def test_missing_system_field(tree: Path) -> None:
    """A system description without a required field is reported."""
    _edit_json(_system_file(tree), lambda d: d.pop("cooling"))
    assert _reported(tree, "field 'cooling' is missing")


def test_empty_meaningful_field(tree: Path) -> None:
    """A required-meaningful field left empty is reported."""
    _edit_json(_system_file(tree), lambda d: d.update(host_networking=""))
    assert _reported(tree, "field 'host_networking' needs a meaningful (non-empty) value")


def test_bad_status_value(tree: Path) -> None:
    """A status outside available/preview/rdi is reported."""
    _edit_json(_system_file(tree), lambda d: d.update(status="released"))
    assert _reported(tree, "status 'released' is not one of available, preview, rdi")


def test_submitter_differs_from_folder(tree: Path) -> None:
    """A submitter field that differs from the folder name is reported."""
    _edit_json(_system_file(tree), lambda d: d.update(submitter="Other"))
    assert _reported(tree, "submitter is 'Other' but the folder says 'Acme'")


def test_wrong_benchmark_folder_name(tree: Path) -> None:
    """A benchmark folder the checker does not know (plain 'bert', 'resnet-50') is reported."""
    result = _result(tree)
    result.parent.rename(result.parent.with_name("resnet-50"))
    assert _reported(tree, "unknown benchmark folder 'resnet-50'")


def test_wrong_scenario_folder_name(tree: Path) -> None:
    """A scenario folder in the wrong case is reported."""
    _result(tree).rename(_result(tree).with_name("offline"))
    assert _reported(tree, "unknown scenario folder 'offline'")


def test_missing_run_1(tree: Path) -> None:
    """Performance logs outside performance/run_1 are reported."""
    (_result(tree) / "performance" / "run_1").rename(_result(tree) / "performance" / "run_2")
    assert _reported(tree, "run_1: missing; the performance logs go in performance/run_1")


def test_untruncated_accuracy_log(tree: Path, real_run: Path) -> None:
    """A full accuracy log above 10 KiB is reported as not truncated."""
    full = real_run / "layout" / "accuracy" / "mlperf_log_accuracy.json"
    shutil.copyfile(full, _result(tree) / "accuracy" / "mlperf_log_accuracy.json")
    assert _reported(tree, "mlperf_log_accuracy.json: not truncated")


def test_hash_mismatch(tree: Path) -> None:
    """A small (untruncated) accuracy log whose SHA-256 differs from the hash line is reported."""
    (_result(tree) / "accuracy" / "mlperf_log_accuracy.json").write_text("[\n]\n")
    assert _reported(tree, "hash does not match mlperf_log_accuracy.json")


def test_missing_hash_line(tree: Path) -> None:
    """accuracy.txt without a hash line is reported."""
    (_result(tree) / "accuracy" / "accuracy.txt").write_text("accuracy=1.000%, good=1, total=100\n")
    assert _reported(tree, "no hash=<sha256 of the full accuracy log> line")


def test_seeds_of_another_checker_version(tree: Path) -> None:
    """Logs of LoadGen 6.0.x checked against v6.0 have the wrong seeds."""
    assert _reported(
        tree, "qsl_rng_seed is 2085463073848966840, checker v6.0 expects", version="v6.0"
    )


def test_seeds_changed_in_the_log(tree: Path) -> None:
    """A log whose seeds are not LoadGen's official ones is reported."""
    detail = _result(tree) / "performance" / "run_1" / "mlperf_log_detail.txt"
    detail.write_text(detail.read_text().replace("2747215439041700203", "1"))
    assert _reported(tree, "sample_index_rng_seed is 1, checker v6.1 expects 2747215439041700203")


def test_loadgen_error_in_log(tree: Path) -> None:
    """An error record in the performance log is reported."""
    detail = _result(tree) / "performance" / "run_1" / "mlperf_log_detail.txt"
    record = {"key": "error_invalid_config", "value": "boom", "metadata": {"is_error": True}}
    with detail.open("a") as handle:
        handle.write(":::MLLOG " + json.dumps(record) + "\n")
    assert _reported(tree, "LoadGen logged 1 error(s)")


def test_a_detail_log_larger_than_the_limit_is_reported_unread(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A performance log over the detail log limit is one finding, not read."""
    detail = _result(tree) / "performance" / "run_1" / "mlperf_log_detail.txt"
    monkeypatch.setattr(logs, "DETAIL_LOG_LIMIT", detail.stat().st_size - 1)
    assert _reported(tree, "a LoadGen detail log may hold")


def test_missing_measurements_key(tree: Path) -> None:
    """measurements.json without a required key is reported."""
    _edit_json(_result(tree) / "measurements.json", lambda d: d.pop("weight_data_types"))
    assert _reported(tree, "key 'weight_data_types' is missing")


def test_missing_user_conf(tree: Path) -> None:
    """A result folder without user.conf is reported."""
    (_result(tree) / "user.conf").unlink()
    assert _reported(tree, "user.conf: missing")


def test_extra_file_in_run_1(tree: Path) -> None:
    """A file the checker does not expect in performance/run_1 is reported."""
    (_result(tree) / "performance" / "run_1" / "notes.txt").write_text("x")
    assert _reported(tree, "notes.txt: unexpected entry")


def test_missing_system_description(tree: Path) -> None:
    """Results of a system without systems/<system>.json are reported."""
    _system_file(tree).unlink()
    assert _reported(tree, f"no system description systems/{SYSTEM}.json")


def test_code_folder_of_old_versions(tree: Path) -> None:
    """src/ under its pre-v6.0 name code/ is reported with the hint."""
    (tree / "open" / "Acme" / "src").rename(tree / "open" / "Acme" / "code")
    assert _reported(tree, "code/ is the name before v6.0")


def test_closed_accuracy_below_target(tree: Path) -> None:
    """In the closed division, an accuracy below the target is reported."""
    (tree / "open").rename(tree / "closed")
    _edit_json(
        tree / "closed" / "Acme" / "systems" / f"{SYSTEM}.json",
        lambda d: d.update(division="closed"),
    )
    accuracy_txt = (
        tree
        / "closed"
        / "Acme"
        / "results"
        / SYSTEM
        / "resnet50"
        / "Offline"
        / "accuracy"
        / "accuracy.txt"
    )
    lines = accuracy_txt.read_text().splitlines()
    accuracy_txt.write_text("\n".join(["accuracy=10.000%, good=102, total=1024", *lines]) + "\n")
    assert _reported(tree, "accuracy 10.0 is below the target 75.695")


def test_unknown_version_is_an_error(good_tree: Path) -> None:
    """An unknown checker version raises instead of checking with the wrong seeds."""
    with pytest.raises(SubmissionError, match=r"unknown checker version 'v9\.9'"):
        check_submission(good_tree, version="v9.9")


# Rules the MLCommons checker (tools/submission/submission_checker) enforced that ours had missed.


def _perf_detail(tree: Path) -> Path:
    return _result(tree) / "performance" / "run_1" / "mlperf_log_detail.txt"


def test_unparsable_mllog_line(tree: Path) -> None:
    """A ':::MLLOG' line that is not JSON stops the checker's parser ("Encountered invalid line")."""
    with _perf_detail(tree).open("a") as handle:
        handle.write(':::MLLOG {"key": "cut short\n')
    assert _reported(tree, "start with ':::MLLOG' but are not a JSON record")


def test_missing_result_record(tree: Path) -> None:
    """Without result_samples_per_second the checker cannot read an Offline result."""
    detail = _perf_detail(tree)
    kept = [
        line
        for line in detail.read_text().splitlines()
        if '"result_samples_per_second"' not in line
    ]
    detail.write_text("\n".join(kept) + "\n")
    assert _reported(tree, "no numeric result_samples_per_second record")


def test_first_record_of_a_key_counts(tree: Path) -> None:
    """The checker reads a key's first record: a later correct seed does not hide a wrong one."""
    detail = _perf_detail(tree)
    lines = detail.read_text().splitlines()
    index = next(i for i, line in enumerate(lines) if '"effective_qsl_rng_seed"' in line)
    wrong = lines[index].replace("2085463073848966840", "7")
    detail.write_text("\n".join([*lines[:index], wrong, *lines[index:]]) + "\n")
    assert _reported(tree, "qsl_rng_seed is 7, checker v6.1 expects")


def test_network_flag_must_be_a_string(tree: Path) -> None:
    """is_network as a JSON boolean breaks the checker's .lower(); it must be "true"/"false"."""
    _edit_json(_system_file(tree), lambda d: d.update(is_network=False))
    assert _reported(tree, "is_network is False; the checker reads it as a string")


def test_network_system_needs_network_fields(tree: Path) -> None:
    """A network-mode system description needs the network fields too."""
    _edit_json(_system_file(tree), lambda d: d.update(is_network="true"))
    assert _reported(tree, "field 'network_type' is missing (network-mode systems need it)")


def test_closed_network_system_is_refused(tree: Path) -> None:
    """The closed division refuses a system description in network mode."""
    (tree / "open").rename(tree / "closed")
    system_file = tree / "closed" / "Acme" / "systems" / f"{SYSTEM}.json"
    _edit_json(system_file, lambda d: d.update(division="closed", is_network="true"))
    assert _reported(tree, 'is_network is "true"; a network-mode system belongs in network/')


def test_closed_scenario_outside_the_suite(tree: Path) -> None:
    """Closed division: a scenario folder the system type's suite lacks is reported."""
    (tree / "open").rename(tree / "closed")
    _edit_json(
        tree / "closed" / "Acme" / "systems" / f"{SYSTEM}.json",
        lambda d: d.update(division="closed"),
    )
    offline = tree / "closed" / "Acme" / "results" / SYSTEM / "resnet50" / "Offline"
    shutil.copytree(offline, offline.with_name("Server"))
    assert _reported(
        tree, "Server is not a closed-division scenario of resnet for system_type 'edge'"
    )


def test_accelerator_count_must_be_a_whole_number(tree: Path) -> None:
    """Recent checkers compute int(number_of_nodes) * int(accelerators_per_node) for summary.csv."""
    _edit_json(_system_file(tree), lambda d: d.update(accelerators_per_node="1 (MIG)"))
    assert _reported(tree, "accelerators_per_node is '1 (MIG)'; the checker's summary computes")
