"""`mlperf-mig harness`: a run prints the result; bad input is one line on stderr and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mlperf_mig import cli


def _main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = cli.main(["harness", *argv])
    return code, capsys.readouterr().err


def _base(outdir: Path, benchmark: str = "resnet50") -> list[str]:
    return [
        "--benchmark", benchmark, "--loadgen-scenario", "Offline", "--backend", "null",
        "--outdir", str(outdir),
    ]  # fmt: skip


def _assert_one_line(code: int, err: str, fragment: str) -> None:
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mlperf-mig: error: ") and fragment in lines[0]


def test_missing_dataset_folder(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A dataset folder that does not exist: one line, exit 2."""
    code, err = _main(capsys, *_base(tmp_path / "out"), "--dataset", str(tmp_path / "nope"))
    _assert_one_line(code, err, "does not exist")


def test_missing_val_map(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """An ImageNet folder without val_map.txt: one line, exit 2."""
    code, err = _main(capsys, *_base(tmp_path / "out"), "--dataset", str(tmp_path))
    _assert_one_line(code, err, "val_map.txt")


@pytest.mark.parametrize("option", ["--precision", "--model", "--threads"])
def test_null_backend_refuses_engine_options(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, option: str
) -> None:
    """--precision, --model or --threads with the null backend, which runs no model, is refused."""
    model = tmp_path / "model.onnx"
    model.write_bytes(b"onnx")
    value = {"--precision": "fp16", "--model": str(model), "--threads": "2"}[option]
    code, err = _main(capsys, *_base(tmp_path / "out"), option, value)
    _assert_one_line(code, err, "--backend null runs no model")
    assert not (tmp_path / "out").exists()


def test_squad_without_vocab(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, squad_dir: Path
) -> None:
    """A SQuAD file without its vocab.txt: one line, exit 2."""
    lone = tmp_path / "dev-v1.1.json"
    lone.write_text((squad_dir / "dev-v1.1.json").read_text())
    code, err = _main(capsys, *_base(tmp_path / "out", "bert"), "--dataset", str(lone))
    _assert_one_line(code, err, "vocabulary")


def test_rejected_user_conf(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A user.conf LoadGen would reject (trailing comment): one line, exit 2."""
    conf = tmp_path / "user.conf"
    conf.write_text("resnet50.Offline.min_duration = 1000 # one second\n")
    code, err = _main(capsys, *_base(tmp_path / "out"), "--user-conf", str(conf))
    _assert_one_line(code, err, "trailing comment")


def test_unwritable_outdir(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """An output folder below a regular file: one line, exit 2."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, err = _main(capsys, *_base(blocker / "out"))
    _assert_one_line(code, err, "cannot be written")


def test_malformed_set(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A --set that is not KEY=NUMBER: one line, exit 2."""
    code, err = _main(capsys, *_base(tmp_path / "out"), "--set", "min_duration")
    _assert_one_line(code, err, "KEY=NUMBER")


@pytest.mark.slow
def test_run_prints_the_result(tmp_path: Path) -> None:
    """A tiny ONNX Runtime run in its own process prints the result as JSON."""
    argv = [
        sys.executable, "-m", "mlperf_mig", "harness", "--benchmark", "bert",
        "--loadgen-scenario", "SingleStream", "--backend", "onnxruntime", "--variant", "tiny",
        "--threads", "1", "--outdir", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache"),
        "--set", "min_duration=300", "--set", "min_query_count=8", "--json",
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["device"]["provider"] == "CPUExecutionProvider"
    assert result["loadgen_scenario"] == "SingleStream" and result["throughput"] > 0
    assert (tmp_path / "out" / "performance" / "mlperf_log_detail.txt").is_file()


def test_unknown_preset(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A preset that does not exist: one line naming the known ones, exit 2."""
    code, err = _main(capsys, *_base(tmp_path / "out"), "--preset", "fast")
    _assert_one_line(code, err, "quick, submission")


def test_zero_sample_count(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """--sample-count 0 is refused rather than read as the official count: one line, exit 2."""
    code, err = _main(capsys, *_base(tmp_path / "out"), "--sample-count", "0")
    _assert_one_line(code, err, "sample_count")


def test_malformed_setting(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """--set without a number: one line, exit 2."""
    code, err = _main(capsys, *_base(tmp_path / "out"), "--set", "min_duration=soon")
    _assert_one_line(code, err, "KEY=NUMBER")
