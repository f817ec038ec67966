"""The CLI shell: argument errors and library errors end in exit code 2 with one line."""

from __future__ import annotations

import pytest

from mlperf_mig import cli
from mlperf_mig.benchmark import get_benchmark
from mlperf_mig.errors import UnknownBenchmarkError


def test_unknown_command_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown sub-command is a usage error with exit code 2."""
    with pytest.raises(SystemExit) as excinfo:
        cli.main(["no-such-command"])
    assert excinfo.value.code == 2


def test_unknown_benchmark_names_the_known_ones() -> None:
    """An unknown benchmark name raises a lookup error that lists resnet50 and bert."""
    with pytest.raises(UnknownBenchmarkError, match="resnet50, bert"):
        get_benchmark("gpt-j")


def test_bert_99_resolves_to_bert() -> None:
    """Submission folder names of BERT resolve to the bert benchmark."""
    assert get_benchmark("BERT-99.9").name == "bert"


def test_argument_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """A bad option value of a sub-command is one line on stderr naming the help, exit code 2."""
    with pytest.raises(SystemExit) as excinfo:
        cli.main(["plan-mig", "A100-80GB", "7g.80gb", "--format", "xml"])
    assert excinfo.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "invalid choice: 'xml'" in err and "mlperf-mig plan-mig --help" in err
