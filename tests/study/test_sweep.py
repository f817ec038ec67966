"""Sweeps: the table of several layouts, the stacked chart, and resuming from disk."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import mlperf_mig
from mlperf_mig import cli

from .conftest import QUICK_NULL


@pytest.fixture(scope="module", name="sweep_dir")
def fixture_sweep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sweep") / "sweep"


@pytest.fixture(scope="module", name="swept")
def fixture_swept(sweep_dir: Path) -> Any:
    """Layouts 1 and 7 on the null backend."""
    return mlperf_mig.sweep([1, 7], outdir=sweep_dir, **QUICK_NULL)


@pytest.mark.slow
def test_table_has_every_layout_and_the_change(swept: Any) -> None:
    """One row per layout; scenario 7 shows its change against scenario 1."""
    assert [r.scenario for r in swept.runs] == [1, 7]
    assert swept.runs[1].change_vs_baseline is not None
    table = swept.table()
    assert "3x2g.20gb+1g.10gb" in table and "emulated" in table


@pytest.mark.slow
def test_chart_saved_as_png_and_svg(swept: Any) -> None:
    """The stacked bar chart is written in both formats."""
    pytest.importorskip("matplotlib")
    assert Path(swept.chart_png).stat().st_size > 0
    assert Path(swept.chart_svg).read_text().lstrip().startswith("<?xml")


@pytest.mark.slow
def test_sweep_resumes_unchanged_layouts(swept: Any, sweep_dir: Path) -> None:
    """Running the same sweep again reuses both layouts from disk."""
    again = mlperf_mig.sweep([1, 7], outdir=sweep_dir, chart=False, **QUICK_NULL)
    assert again.resumed == ("scenario-1", "scenario-7")
    assert [r.started_at for r in again.runs] == [r.started_at for r in swept.runs]


@pytest.mark.slow
def test_report_prints_a_sweep(
    swept: Any, sweep_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`mlperf-mig report SWEEPDIR` prints the sweep table."""
    assert cli.main(["report", str(sweep_dir)]) == 0
    assert "vs MIG scenario 1" in capsys.readouterr().out


@pytest.mark.slow
def test_report_json_of_a_sweep_carries_each_layouts_results(
    swept: Any, sweep_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`report SWEEPDIR --json` prints sweep.json with the results of every layout in it."""
    assert cli.main(["report", str(sweep_dir), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["runs"] == ["scenario-1", "scenario-7"]
    assert [r["scenario"] for r in data["results"]] == [1, 7]
    assert all(r["aggregate"]["total_throughput"] > 0 for r in data["results"])


def test_backwards_scenario_range_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """--scenarios 1,3-2 is refused in one line instead of silently dropping the empty range."""
    assert cli.main(["sweep", "--scenarios", "1,3-2", "--backend", "null"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "'3-2' runs backwards" in err and "2-3" in err


@pytest.mark.slow
def test_single_run_changes_say_their_noise_is_not_measured(swept: Any) -> None:
    """A sweep of one run per layout says its change against scenario 1 rests on unmeasured noise."""
    from mlperf_mig.study.sweep import SINGLE_RUN_CHANGE_NOTE

    assert f"note: {SINGLE_RUN_CHANGE_NOTE}" in swept.table()
