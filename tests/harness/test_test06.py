"""TEST06 of a generative workload, as compliance/TEST06/run_verification.py judges the sampled
responses: first token, end tokens, token counts; each failure named."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mlperf_mig.harness.compliance import TEST06_COMPLETE, recorded_pass, verify_test06


def _log(folder: Path, records: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "mlperf_log_accuracy.json").write_text(json.dumps(records))
    return folder


def _record(index: int, tokens: list[int], first: list[int] | None, count: int | None) -> dict:
    record: dict = {"seq_id": index, "qsl_idx": index, "data": _hex(tokens)}
    if first is not None:
        record["token_data"] = _hex(first)
    if count is not None:
        record["token_count"] = count
    return record


def _hex(tokens: list[int]) -> str:
    return np.array(tokens, dtype=np.int32).tobytes().hex().upper()


def test_good_responses_pass_and_write_what_the_checker_reads(tmp_path: Path) -> None:
    folder = _log(tmp_path / "TEST06", [_record(0, [5, 6, 1], [5], 3), _record(1, [7, 8], [7], 2)])
    verdict = verify_test06(folder, "Server", end_ids=(1,), short=True)
    assert verdict.passed and verdict.sampled == 2
    verdict.write_files(folder)
    text = (folder / "verify_accuracy.txt").read_text()
    assert text.splitlines() == [
        "First token check pass: True",
        "EOS check pass: True",
        "Sample length check pass: True",
        TEST06_COMPLETE,
    ]
    assert recorded_pass(folder, "TEST06")


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        (_record(0, [5, 6], [9], 2), "1 of 1 first tokens differ from the output's"),
        (_record(0, [5, 1, 1], [5], 3), "1 outputs end with more than one end token"),
        (_record(0, [5, 6], [5], 3), "1 outputs have a token_count other than their length"),
        (_record(0, [5, 6], None, 2), "1 of 1 first tokens differ"),
    ],
)
def test_each_broken_rule_fails_and_is_named(tmp_path: Path, record: dict, reason: str) -> None:
    folder = _log(tmp_path / "TEST06", [record])
    verdict = verify_test06(folder, "SingleStream", end_ids=(1,), short=True)
    assert not verdict.passed and reason in verdict.reason
    verdict.write_files(folder)
    assert "TEST06 verification failed" in (folder / "verify_accuracy.txt").read_text()
    assert not recorded_pass(folder, "TEST06")


def test_offline_skips_the_first_token_check(tmp_path: Path) -> None:
    folder = _log(tmp_path / "TEST06", [_record(0, [5, 6], None, 2)])
    verdict = verify_test06(folder, "Offline", end_ids=(1,), short=True)
    assert verdict.passed
    assert "First token check pass: Skipped" in verdict.test06_text()


def test_a_log_that_is_not_loadgens_is_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "TEST06"
    folder.mkdir()
    (folder / "mlperf_log_accuracy.json").write_text('{"qsl_idx": "x"}')
    verdict = verify_test06(folder, "Server", end_ids=(1,), short=True)
    assert not verdict.passed
    assert "cannot read the token records of LoadGen accuracy log" in verdict.reason
