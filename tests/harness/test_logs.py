"""Reading LoadGen's detail log and the InstanceResult record."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest

from mlperf_mig.engines.backend import DeviceReport
from mlperf_mig.errors import DatasetError
from mlperf_mig.harness import InstanceResult, logs, parse_detail_log
from mlperf_mig.harness.result import AccuracyReport, invalid_reasons, latencies, throughput


def _record(key: str, value: object, *, error: bool = False) -> str:
    body = {"key": key, "value": value, "metadata": {"is_error": error, "is_warning": False}}
    return ":::MLLOG " + json.dumps(body)


@pytest.fixture(name="detail_log")
def fixture_detail_log(tmp_path: Path) -> Path:
    """A detail log of an INVALID Server run."""
    lines = [
        "garbage line that is not a record",
        _record("result_validity", "INVALID"),
        _record("result_scheduled_samples_per_sec", 1234.5),
        _record("result_99.00_percentile_latency_ns", 20_000_000),
        _record("result_mean_latency_ns", 5_000_000),
        _record("result_min_duration_met", True),
        _record("result_invalid_reason", "Reduce target QPS to improve latency. "),
        _record("effective_target_qps", 1234),
        _record("error_runtime", "something broke", error=True),
        ':::MLLOG {"key": "cut short',
    ]
    path = tmp_path / "mlperf_log_detail.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_parse_detail_log_reads_records(detail_log: Path) -> None:
    """Records become {key: value}; errors are also collected in order."""
    records = parse_detail_log(detail_log.parent)
    assert records["result_scheduled_samples_per_sec"] == 1234.5
    assert records["errors"] == ["error_runtime: something broke"]


def test_server_fields_from_records(detail_log: Path) -> None:
    """Server throughput is the scheduled rate; reasons carry LoadGen's words and errors."""
    records = parse_detail_log(detail_log)
    assert throughput(records, "Server") == (1234.5, "scheduled samples/s")
    assert latencies(records, "Server") == {"99.00": 20_000_000, "mean": 5_000_000}
    assert invalid_reasons(records) == [
        "Reduce target QPS to improve latency.",
        "error_runtime: something broke",
    ]


def test_an_error_logged_for_every_sample_is_one_reason_with_its_count() -> None:
    """The same error logged many times (one per empty completion) is one reason saying how
    many times; different errors keep their order."""
    records = {"errors": ["error_runtime: a", "error_runtime: b", "error_runtime: a"] * 2}
    assert invalid_reasons(records) == ["error_runtime: a (4 times)", "error_runtime: b (2 times)"]
    assert invalid_reasons({"errors": ["error_runtime: c"]}) == ["error_runtime: c"]


def test_missing_detail_log_raises(tmp_path: Path) -> None:
    """A folder without a detail log is reported, not parsed as empty."""
    with pytest.raises(DatasetError, match="cannot read LoadGen detail log"):
        parse_detail_log(tmp_path)


def test_a_detail_log_reached_through_a_link_is_refused(detail_log: Path, tmp_path: Path) -> None:
    """A detail log that is a symbolic link is not followed (nothing read back is)."""
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "mlperf_log_detail.txt").symlink_to(detail_log)
    with pytest.raises(DatasetError, match="it is a symbolic link"):
        parse_detail_log(folder)


def test_a_detail_log_larger_than_the_limit_is_refused_unread(
    detail_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A detail log over DETAIL_LOG_LIMIT is refused before it is read; a FIFO is refused
    without waiting on it."""
    monkeypatch.setattr(logs, "DETAIL_LOG_LIMIT", detail_log.stat().st_size - 1)
    with pytest.raises(DatasetError, match=r"more than the \d+ a LoadGen detail log may hold"):
        parse_detail_log(detail_log)
    fifo = detail_log.parent / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(DatasetError, match="it is not a regular file"):
        parse_detail_log(fifo)


def test_records_that_loadgen_does_not_write_are_skipped(tmp_path: Path) -> None:
    """JSON that is not an object, a record without a text key, a key that would replace the
    lists of errors and warnings, or metadata that is not an object: skipped or ignored, the
    other records read."""
    lines = [
        ":::MLLOG 5",
        ':::MLLOG ["key", "value"]',
        ':::MLLOG {"value": 1}',
        ':::MLLOG {"key": 7, "value": 1}',
        ':::MLLOG {"key": "errors", "value": 1}',
        ':::MLLOG {"key": "result_validity", "value": "VALID", "metadata": 3}',
        _record("error_runtime", "kept", error=True),
    ]
    (tmp_path / "mlperf_log_detail.txt").write_text("\n".join(lines) + "\n")
    records = parse_detail_log(tmp_path)
    assert records["result_validity"] == "VALID"
    assert records["errors"] == ["error_runtime: kept"] and records["warnings"] == []
    assert set(records) == {"errors", "warnings", "result_validity", "error_runtime"}


def _result() -> InstanceResult:
    return InstanceResult(
        benchmark="bert",
        loadgen_scenario="Offline",
        mode="accuracy",
        valid=True,
        validity="",
        invalid_reasons=(),
        throughput=None,
        throughput_unit="samples/s",
        latency_ns={},
        effective_settings={"min_duration_ms": 1000},
        device=DeviceReport(backend="null", provider="null", device="cpu"),
        log_dir="/tmp/x/accuracy",
        user_conf="/tmp/x/user.conf",
        target_source="calibration",
        samples_completed=10,
        failed_samples=0,
        error=None,
        synthetic_data=False,
        accuracy=AccuracyReport(
            metric="f1", value=91.0, target=89.9, meaningful=True, passed=True, sample_count=10
        ),
        wall_s=1.5,
    )


def test_result_round_trips_through_json() -> None:
    """to_dict -> JSON -> from_dict gives back an equal result."""
    result = _result()
    assert InstanceResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result


def test_result_pickles() -> None:
    """Results cross process boundaries by pickle."""
    result = _result()
    assert pickle.loads(pickle.dumps(result)) == result


def test_an_accuracy_log_that_is_a_link_or_a_fifo_is_one_line(tmp_path):
    """The accuracy log is read back with the bounded reader: a link or a FIFO is refused in one
    line naming the file, without following or waiting on it (issue 33 item 1)."""
    import os

    import pytest

    from mlperf_mig.errors import DatasetError
    from mlperf_mig.harness.logs import read_accuracy_log, read_token_log

    target = tmp_path / "elsewhere.json"
    target.write_text("[]")
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "mlperf_log_accuracy.json").symlink_to(target)
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "mlperf_log_accuracy.json")
    for folder, what in ((linked, "symbolic link"), (fifo, "not a regular file")):
        for reader in (read_accuracy_log, read_token_log):
            with pytest.raises(DatasetError, match=what):
                reader(folder)
