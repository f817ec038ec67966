"""Repeats and isolation: folders, resume per repeat, tables with intervals, the HTML report."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

import mlperf_mig
import mlperf_mig.errors
from mlperf_mig import cli
from mlperf_mig.study.chart import chart_bar
from mlperf_mig.study.overall import OverallProgress
from mlperf_mig.study.repeats import REPEATS_FILE, RepeatedRun

from .conftest import QUICK_NULL

MIXED = "layout-2g.20gb-1g.10gb"


@pytest.mark.slow
def test_each_repeat_is_a_complete_run_in_its_folder(studied: Any, study_dir: Path) -> None:
    """repeat-1 and repeat-2 each hold results.json and plan.json; repeats.json lists them."""
    for k in (1, 2):
        assert (study_dir / MIXED / f"repeat-{k}" / "results.json").is_file()
        assert (study_dir / MIXED / f"repeat-{k}" / "plan.json").is_file()
    data = json.loads((study_dir / MIXED / REPEATS_FILE).read_text())
    assert data["runs"] == ["repeat-1", "repeat-2"]


@pytest.mark.slow
def test_isolation_runs_each_profile_alone_on_its_device(studied: Any, study_dir: Path) -> None:
    """Each distinct profile ran alone, on the device it had inside the layout."""
    study = studied.studies[1]
    assert sorted(study.alone) == ["1g.10gb", "2g.20gb"]
    alone = study.alone["1g.10gb"][0]
    inside = next(i for i in study.runs[0].instances if i.profile == "1g.10gb")
    assert [i.device for i in alone.instances] == [inside.device]
    assert alone.layout == "1g.10gb" and len(alone.instances) == 1


@pytest.mark.slow
def test_tables_show_the_range_of_two_repeats_and_say_why(studied: Any) -> None:
    """With 2 repeats the sweep table shows totals as mean (range min-max), no ± interval, and
    the note says why."""
    from mlperf_mig.runner.stats import FEW_REPEATS_NOTE

    table = studied.table()
    assert " ± " not in table and FEW_REPEATS_NOTE in table
    row = studied.rows()[1]
    assert row["repeats"] == 2 and "(range " in row["total"]


@pytest.mark.slow
def test_isolation_columns_and_emulated_label(studied: Any) -> None:
    """Each instance has its change against alone; emulated isolation says it measures the CPU."""
    table = studied.studies[1].table()
    assert "vs alone: throughput" in table and "vs alone: p99" in table
    assert "isolation on emulated CPU partitions" in table
    assert studied.studies[1].interference(0, "throughput") is not None


@pytest.mark.slow
def test_repeated_layout_bar_has_an_error_bar(studied: Any) -> None:
    """A layout of 2 repeats carries the min-max range of its totals as its error bar."""
    total = studied.studies[1].total
    bar = chart_bar(studied.studies[1])
    assert bar is not None and bar.total == total.mean and not bar.interval
    assert bar.error == (
        pytest.approx(total.mean - total.min),
        pytest.approx(total.max - total.mean),
    )


@pytest.mark.slow
def test_study_loads_back_from_disk(studied: Any, study_dir: Path) -> None:
    """repeats.json and the runs' results.json give back the same statistics."""
    loaded = RepeatedRun.load(study_dir / MIXED)
    assert loaded.totals == studied.studies[1].totals and sorted(loaded.alone) == [
        "1g.10gb",
        "2g.20gb",
    ]


@pytest.mark.slow
def test_resume_reruns_only_the_missing_repeat(studied: Any, study_dir: Path) -> None:
    """With repeat-2's results.json gone, only repeat-2 runs again; the rest is reused."""
    (study_dir / "scenario-5" / "repeat-2" / "results.json").unlink()
    again = mlperf_mig.sweep(
        [5, "2g.20gb+1g.10gb"],
        outdir=study_dir,
        repeats=2,
        isolation=True,
        chart=False,
        **QUICK_NULL,
    )
    assert "scenario-5/repeat-2" not in again.resumed and "scenario-5/repeat-1" in again.resumed
    assert f"{MIXED}/alone-1g.10gb/repeat-2" in again.resumed


@pytest.mark.slow
def test_html_report_is_self_contained(studied: Any, study_dir: Path, tmp_path: Path) -> None:
    """`report DIR --html FILE`: one file with inline SVG figures, the labels and no scripts or links."""
    out = tmp_path / "r.html"
    assert cli.main(["report", str(study_dir), "--html", str(out)]) == 0
    text = out.read_text()
    assert text.count("<svg") >= 1 and "Figure 1" in text
    assert "<script" not in text and "src=" not in text and "<link" not in text
    assert "emulated" in text and "sum of independent LoadGen runs" in text and "Advisor" in text


@pytest.mark.slow
def test_advise_reads_a_sweep_folder(
    studied: Any, study_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`advise --from DIR` ranks layouts and prints the validation and the winner's config."""
    assert cli.main(["advise", "--from", str(study_dir)]) == 0
    out = capsys.readouterr().out
    assert "valid layouts of A100-SXM4-80GB considered" in out and "mig-parted config" in out
    assert "emulated advice" in out


def test_zero_repeats_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """--repeats 0 is refused before anything runs: one line, exit 2."""
    assert cli.main(["run", "--scenario", "5", "--backend", "null", "--repeats", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "repeats must be a whole number from 1" in err


def test_repeats_that_is_not_a_number_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    """--repeats x says what is wrong with it and what to pass: one line, exit 2."""
    with pytest.raises(SystemExit) as exited:
        cli.main(["run", "--scenario", "5", "--backend", "null", "--repeats", "x"])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "'x' is not a whole number" in err and "e.g. 3" in err


@pytest.mark.slow
def test_advise_on_a_folder_without_single_profile_layouts(
    studied: Any, study_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run folder of one multi-instance layout has nothing alone to predict from: one line, exit 2."""
    folder = study_dir / MIXED / "repeat-1"
    assert cli.main(["advise", "--from", str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "no single-profile layout" in err


def test_progress_false_and_non_terminal_streams_show_no_bar() -> None:
    """No bar with progress=False, and none on a stream that is not a terminal."""
    stream = io.StringIO()
    for progress in (False, stream):
        bar = OverallProgress(4, progress=progress, description="sweep")
        assert not bar.shown
        bar.close()
    assert stream.getvalue() == ""


def test_repeats_into_a_single_runs_folder_is_refused(tmp_path: Path) -> None:
    """A folder that holds one finished run (results.json at its top) is not turned into a study."""
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "results.json").write_text("{}")
    with pytest.raises(mlperf_mig.errors.OutputDirError, match=r"results\.json") as caught:
        mlperf_mig.run(5, outdir=folder, repeats=2, **QUICK_NULL)
    assert "\n" not in str(caught.value) and not (folder / "repeat-1").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (["--min-instances", "8"], "no valid layout of A100-SXM4-80GB meets the constraints"),
        (["--profiles-allowed", "5g.50gb"], "5g.50gb"),
    ],
)
def test_advise_constraints_refused_on_the_cli(
    studied: Any,
    study_dir: Path,
    capsys: pytest.CaptureFixture[str],
    arguments: list[str],
    expected: str,
) -> None:
    """Constraints nothing meets, or on a profile the GPU lacks: one line, exit 2."""
    assert cli.main(["advise", "--from", str(study_dir), *arguments]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and expected in err
