"""The CLI shell: argument errors and library errors end in exit code 2 with one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mlperf_mig import cli
from mlperf_mig.errors import UnknownBenchmarkError
from mlperf_mig.workloads import get_workload


def test_unknown_command_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown sub-command is a usage error with exit code 2."""
    with pytest.raises(SystemExit) as excinfo:
        cli.main(["no-such-command"])
    assert excinfo.value.code == 2


def test_unknown_benchmark_names_the_known_ones() -> None:
    """An unknown benchmark name raises a lookup error that lists resnet50 and bert."""
    with pytest.raises(UnknownBenchmarkError, match="resnet50, bert"):
        get_workload("gpt-j")


def test_bert_99_resolves_to_bert() -> None:
    """Submission folder names of BERT resolve to the bert benchmark."""
    assert get_workload("BERT-99.9").name == "bert"


def test_argument_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """A bad option value of a sub-command is one line on stderr naming the help, exit code 2."""
    with pytest.raises(SystemExit) as excinfo:
        cli.main(["mig-setup", "A100-80GB", "7g.80gb", "--format", "xml"])
    assert excinfo.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "invalid choice: 'xml'" in err and "mlperf-mig mig-setup --help" in err


def _cli(*argv: str) -> list[str]:
    return [sys.executable, "-m", "mlperf_mig", *argv]


def test_closed_pipe_ends_quietly() -> None:
    """`layouts --json | head -c 10` ends with exit 0 and nothing on stderr, as Unix tools do."""
    producer = subprocess.Popen(
        _cli("layouts", "A100-80GB", "--json"), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert producer.stdout is not None
    assert len(producer.stdout.read(10)) == 10
    producer.stdout.close()
    _, err = producer.communicate(timeout=60)
    assert producer.returncode == 0
    assert err == b""


def test_full_device_is_one_line() -> None:
    """`gpus > /dev/full` ends with one line on stderr and exit 2, not a traceback."""
    with open("/dev/full", "w") as full:
        done = subprocess.run(_cli("gpus"), stdout=full, stderr=subprocess.PIPE, timeout=60)
    lines = done.stderr.decode().strip().splitlines()
    assert done.returncode == 2
    assert len(lines) == 1 and "No space left" in lines[0]


def test_gpu_index_beyond_nvml(capsys: pytest.CaptureFixture[str]) -> None:
    """mig-setup --gpu-index 10**23 is one line naming NVML's range, exit 2."""
    assert cli.main(["mig-setup", "A100-80GB", "7g.80gb", "--gpu-index", str(10**23)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--gpu-index" in err


@pytest.fixture(name="bad_datasets")
def fixture_bad_datasets(tmp_path: Path) -> Path:
    """Dataset files that used to end in tracebacks: a huge label, Latin-1 val_map and vocab, a
    SQuAD json nested 100,000 deep."""
    for name, text in [
        ("big-label", b"a.npy 100000000000000000000\n"),
        ("latin1", b"a\xff.npy 1\n"),
    ]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "val_map.txt").write_bytes(text)
    squad = {
        "data": [
            {
                "paragraphs": [
                    {
                        "context": "a b",
                        "qas": [{"id": "1", "question": "a?", "answers": [{"text": "a"}]}],
                    }
                ]
            }
        ]
    }
    (tmp_path / "vocab-latin1").mkdir()
    (tmp_path / "vocab-latin1" / "dev.json").write_text(json.dumps(squad))
    (tmp_path / "vocab-latin1" / "vocab.txt").write_bytes(b"[CLS]\n[SEP]\n[UNK]\n\xff\n")
    (tmp_path / "deep").mkdir()
    (tmp_path / "deep" / "dev.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "deep" / "vocab.txt").write_text("[CLS]\n[SEP]\n[UNK]\na\n")
    return tmp_path


@pytest.mark.parametrize(
    ("benchmark", "extra", "fragment"),
    [
        ("resnet50", ["--dataset", "big-label"], "not an ImageNet class"),
        ("resnet50", ["--dataset", "latin1"], "not UTF-8"),
        ("bert", ["--dataset", "vocab-latin1/dev.json"], "not UTF-8"),
        ("bert", ["--dataset", "deep/dev.json"], "nested too deeply"),
        ("resnet50", ["--sample-count", "99999999999999999999"], "64-bit"),
        ("resnet50", ["--threads", "100000"], "CPUs"),
    ],
)
def test_harness_input_is_one_line(
    capsys: pytest.CaptureFixture[str],
    bad_datasets: Path,
    benchmark: str,
    extra: list[str],
    fragment: str,
) -> None:
    """Harness inputs that used to end in a traceback (or grow memory without output) are one
    line and exit 2 before LoadGen starts."""
    if extra[0] == "--dataset":
        extra = [extra[0], str(bad_datasets / extra[1])]
    backend = "onnxruntime" if extra[0] == "--threads" else "null"
    argv = [
        "harness",
        "--benchmark",
        benchmark,
        "--loadgen-scenario",
        "Offline",
        "--backend",
        backend,
        "--outdir",
        str(bad_datasets / "out"),
        *extra,
    ]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and fragment in err
