"""The advisor reads measurements from folders people copy and edit: a rate or latency that is
NaN, infinite, negative or absurd (1e308) is one line naming the file and field, never a ranking
nor a traceback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mlperf_mig import cli
from mlperf_mig.study.report_html import report_html
from mlperf_mig.study.sweep import load_report

from .conftest import QUICK_NULL

pytestmark = pytest.mark.slow  # starts the runner's workers

THROUGHPUT = "instances[0].performance.throughput"
P99 = "instances[0].performance.latency_ns.99.00"


@pytest.fixture(scope="module", name="run_dir")
def fixture_run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One finished run of study layout 5 (one 1g.10gb alone: enough for the advisor)."""
    import mlperf_mig

    folder = tmp_path_factory.mktemp("advise") / "run"
    mlperf_mig.run(5, outdir=folder, **QUICK_NULL)
    return folder


def _edited(run_dir: Path, tmp_path: Path, field: str, literal: str) -> Path:
    """A copy of the run whose results.json holds `literal` (JSON text, e.g. NaN) at `field`."""
    folder = tmp_path / "run"
    shutil.copytree(run_dir, folder)
    data = json.loads((folder / "results.json").read_text(encoding="utf-8"))
    performance = data["instances"][0]["performance"]
    if field == THROUGHPUT:
        performance["throughput"] = "@VALUE@"
    else:
        performance["latency_ns"]["99.00"] = "@VALUE@"
    text = json.dumps(data, indent=2).replace('"@VALUE@"', literal)
    (folder / "results.json").write_text(text, encoding="utf-8")
    return folder


@pytest.mark.parametrize("literal", ["1e308", "Infinity", "NaN", "-5", "1e999"])
def test_advise_refuses_an_absurd_throughput(
    capsys: pytest.CaptureFixture[str], run_dir: Path, tmp_path: Path, literal: str
) -> None:
    """A throughput of 1e308, inf, NaN or -5 is one line naming results.json and the field; the folder is unchanged."""
    folder = _edited(run_dir, tmp_path, THROUGHPUT, literal)
    before = (folder / "results.json").read_bytes()
    assert cli.main(["advise", "--from", str(folder)]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("mlperf-mig: error:") and "\n" not in err
    assert str(folder / "results.json") in err and THROUGHPUT in err
    assert captured.out == ""  # no ranking printed
    assert (folder / "results.json").read_bytes() == before


@pytest.mark.parametrize("literal", ["1e308", "-1"])
def test_advise_refuses_an_absurd_p99(
    capsys: pytest.CaptureFixture[str], run_dir: Path, tmp_path: Path, literal: str
) -> None:
    """A p99 latency of 1e308 ns or -1 ns is one line naming its field, not a ranking by it."""
    folder = _edited(run_dir, tmp_path, P99, literal)
    assert cli.main(["advise", "--from", str(folder), "--objective", "p99"]) == 2
    err = capsys.readouterr().err.strip()
    assert P99 in err and "\n" not in err


def test_the_html_report_says_why_there_is_no_advice(run_dir: Path, tmp_path: Path) -> None:
    """The HTML report of a run with a NaN throughput has no ranking; its advisor section names the field."""
    report = load_report(_edited(run_dir, tmp_path, THROUGHPUT, "NaN"))
    text = report_html(report)
    assert "No advice from these runs" in text and THROUGHPUT in text
    assert "Advisor: every valid layout, ranked" not in text


def test_a_sound_run_is_still_advised(capsys: pytest.CaptureFixture[str], run_dir: Path) -> None:
    """The unedited run is ranked: 7x1g.10gb first (the one profile measured, seven fit)."""
    assert cli.main(["advise", "--from", str(run_dir)]) == 0
    assert "7x1g.10gb" in capsys.readouterr().out.splitlines()[3]
