"""Names read back from results.json are drawn as written: matplotlib mathtext (`$x^$`) in a
profile, GPU or layout is no traceback in the chart or the HTML report."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any

import attrs
import pytest

from mlperf_mig import cli
from mlperf_mig.runner.results import RunResult
from mlperf_mig.study.chart import chart_bar, save_chart
from mlperf_mig.study.report_html import report_html

from .conftest import QUICK_NULL

pytestmark = pytest.mark.slow  # starts the runner's workers

MATH = "$x^$"  # mathtext that does not parse: a ParseSyntaxException when taken as math


@pytest.fixture(scope="module", name="run")
def fixture_run(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    """One finished run of study layout 5 on the null backend."""
    import mlperf_mig

    return mlperf_mig.run(5, outdir=tmp_path_factory.mktemp("labels") / "run", **QUICK_NULL)


def _with_math(run: RunResult, label: str = MATH) -> RunResult:
    """The run with `label` as its GPU, layout and every instance's profile."""
    instances = tuple(attrs.evolve(i, profile=label) for i in run.instances)
    return attrs.evolve(run, gpu=f"{label} GPU", layout=label, instances=instances)


def test_the_chart_draws_mathtext_labels_literally(run: RunResult, tmp_path: Path) -> None:
    """save_chart with '$x^$' labels writes both files, the SVG holding the text as written."""
    odd = _with_math(run)
    bar = chart_bar(odd)
    assert bar is not None
    png, svg = save_chart([bar], odd, tmp_path)
    assert png.read_bytes().startswith(b"\x89PNG")
    assert f"<!-- {MATH} -->" in svg.read_text(encoding="utf-8")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["throughput.png", "throughput.svg"]


def test_valid_mathtext_is_not_rendered_as_math(run: RunResult, tmp_path: Path) -> None:
    """A label that is valid mathtext ('$x$') is not set in math italics: no oblique glyph is drawn."""
    odd = _with_math(run, "$x$")
    bar = chart_bar(odd)
    assert bar is not None
    _, svg = save_chart([bar], odd, tmp_path)
    assert "Oblique" not in svg.read_text(encoding="utf-8")


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600)])
def test_chart_files_follow_the_umask(
    run: RunResult, tmp_path: Path, umask: int, mode: int
) -> None:
    """throughput.png and .svg are shareable outputs: their mode is what the umask gives a file."""
    bar = chart_bar(run)
    assert bar is not None
    old = os.umask(umask)
    try:
        paths = save_chart([bar], run, tmp_path)
    finally:
        os.umask(old)
    assert [stat.S_IMODE(p.stat().st_mode) for p in paths] == [mode, mode]


def test_the_html_report_draws_mathtext_labels_literally(run: RunResult) -> None:
    """report_html of a run whose names hold '$x^$' has its figure, with the text as written."""
    text = report_html(_with_math(run))
    assert "Figure 1" in text and f"<!-- {MATH} -->" in text
    assert "<script" not in text.lower()


def test_report_html_cli_of_an_edited_results_json(
    run: RunResult, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`report DIR --html` of a run folder whose results.json names the profile '$x^$' exits 0 with the figure."""
    folder = tmp_path / "run"
    shutil.copytree(run.outdir, folder)
    data: dict[str, Any] = json.loads((folder / "results.json").read_text(encoding="utf-8"))
    data["instances"][0]["profile"] = MATH
    data["layout"] = MATH
    data["outdir"] = str(folder)
    (folder / "results.json").write_text(json.dumps(data, indent=2), encoding="utf-8")
    out = tmp_path / "r.html"
    code = cli.main(["report", str(folder), "--html", str(out)])
    assert code == 0, capsys.readouterr().err
    assert f"<!-- {MATH} -->" in out.read_text(encoding="utf-8")
