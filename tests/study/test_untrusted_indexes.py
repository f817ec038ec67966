"""Study and sweep folders are untrusted input: relative indexes, copies and moves, hostile
fields and links, and runs into a study's or a sweep's folder."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import mlperf_mig
from mlperf_mig import cli
from mlperf_mig.study.repeats import REPEATS_FILE, RepeatedRun
from mlperf_mig.study.sweep import SWEEP_FILE

from .conftest import QUICK_NULL

pytestmark = pytest.mark.slow  # starts the runner's workers

RUN_FLAGS = [
    "--backend",
    "null",
    "--no-accuracy",
    "--set",
    "min_duration=300",
    "--set",
    "target_qps=2000",
]


def _tree(folder: Path) -> dict[str, Any]:
    """Every entry below `folder`: a file's bytes, a link's target, a folder's marker."""
    tree: dict[str, Any] = {}
    for root, dirs, files in os.walk(folder, followlinks=False):
        for name in dirs + files:
            path = Path(root) / name
            key = str(path.relative_to(folder))
            if path.is_symlink():
                tree[key] = ("link", os.readlink(path))
            elif path.is_dir():
                tree[key] = "dir"
            else:
                tree[key] = path.read_bytes()
    return tree


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mlperf-mig: error:") and "\n" not in err
    return err


@pytest.fixture(scope="module", name="pristine_study")
def fixture_pristine_study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Study layout 5 (one 1g.10gb), two repeats, on the null backend."""
    folder = tmp_path_factory.mktemp("pristine") / "study"
    mlperf_mig.run(5, outdir=folder, repeats=2, **QUICK_NULL)
    return folder


@pytest.fixture(scope="module", name="pristine_sweep")
def fixture_pristine_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sweep of layout 5 on the null backend, no chart."""
    folder = tmp_path_factory.mktemp("pristine") / "sweep"
    mlperf_mig.sweep([5], outdir=folder, chart=False, **QUICK_NULL)
    return folder


@pytest.fixture(name="study")
def fixture_study(pristine_study: Path, tmp_path: Path) -> Path:
    """A copy of the pristine study for one test to spoil."""
    return Path(shutil.copytree(pristine_study, tmp_path / "study", symlinks=True))


@pytest.fixture(name="swept")
def fixture_swept(pristine_sweep: Path, tmp_path: Path) -> Path:
    """A copy of the pristine sweep for one test to spoil."""
    return Path(shutil.copytree(pristine_sweep, tmp_path / "sweep", symlinks=True))


def _edit(index: Path, field: str, value: Any) -> None:
    data = json.loads(index.read_text())
    data[field] = value
    index.write_text(json.dumps(data))


# --- copied and moved folders -----------------------------------------------------------------
def test_copied_study_reports_and_resumes_inside_the_copy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A study copied elsewhere, its original deleted, reports and resumes from the copy alone;
    its repeats.json names no path of the original."""
    original, copy = tmp_path / "original", tmp_path / "copy"
    mlperf_mig.run(5, outdir=original, repeats=2, **QUICK_NULL)
    shutil.copytree(original, copy)
    shutil.rmtree(original)
    assert cli.main(["report", str(copy)]) == 0
    capsys.readouterr()
    again = mlperf_mig.run(5, outdir=copy, repeats=2, **QUICK_NULL)
    assert again.resumed == ("repeat-1", "repeat-2")
    assert [r.outdir for r in again.runs] == [str(copy / "repeat-1"), str(copy / "repeat-2")]
    text = (copy / REPEATS_FILE).read_text()
    assert str(original) not in text and json.loads(text)["runs"] == ["repeat-1", "repeat-2"]
    assert os.listdir(tmp_path) == ["copy"]  # nothing written back where the original was
    assert cli.main(["report", str(copy)]) == 0


def test_moved_sweep_reports_and_resumes_inside_the_move(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A repeated sweep moved elsewhere reports and resumes there; sweep.json and the layout's
    repeats.json name no path of its old place."""
    original, moved = tmp_path / "original", tmp_path / "moved"
    mlperf_mig.sweep([5], outdir=original, repeats=2, chart=False, **QUICK_NULL)
    os.rename(original, moved)
    assert cli.main(["report", str(moved)]) == 0
    capsys.readouterr()
    again = mlperf_mig.sweep([5], outdir=moved, repeats=2, chart=False, **QUICK_NULL)
    assert again.resumed == ("scenario-5/repeat-1", "scenario-5/repeat-2")
    data = json.loads((moved / SWEEP_FILE).read_text())
    assert data["runs"] == ["scenario-5/repeat-1", "scenario-5/repeat-2"] and data["studies"] == [
        "scenario-5"
    ]
    for index in (moved / SWEEP_FILE, moved / "scenario-5" / REPEATS_FILE):
        assert str(original) not in index.read_text()
    assert os.listdir(tmp_path) == ["moved"]
    assert cli.main(["report", str(moved)]) == 0


def test_index_pointing_at_the_original_is_refused_and_rewritten_by_resume(
    study: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """repeats.json naming '../original/repeat-k' (what a copy used to get) is refused in one
    line, the original is never read; resuming in place writes the index anew."""
    other = Path(shutil.copytree(study, tmp_path / "original"))  # it would load if followed
    _edit(study / REPEATS_FILE, "runs", ["../original/repeat-1", "../original/repeat-2"])
    before = _tree(tmp_path)
    err = _refused(capsys, ["report", str(study)])
    assert (
        f"runs in {str(study / REPEATS_FILE)!r}" in err
        and "is outside" in err
        and "--outdir" in err
    )
    assert _tree(tmp_path) == before
    mlperf_mig.run(5, outdir=study, repeats=2, **QUICK_NULL)
    assert json.loads((study / REPEATS_FILE).read_text())["runs"] == ["repeat-1", "repeat-2"]
    assert other.is_dir()  # the original is untouched:
    assert {k: v for k, v in _tree(tmp_path).items() if k.startswith("original")} == {
        k: v for k, v in before.items() if k.startswith("original")
    }


def test_absolute_run_inside_the_folder_is_read_as_relative(study: Path) -> None:
    """An absolute path that already lies inside the study (the hand-written form) is accepted."""
    _edit(study / REPEATS_FILE, "runs", [str(study / "repeat-1"), str(study / "repeat-2")])
    loaded = RepeatedRun.load(study)
    assert [r.outdir for r in loaded.runs] == [str(study / "repeat-1"), str(study / "repeat-2")]


# --- corrupt fields ---------------------------------------------------------------------------
REPEATS_FIELDS = [
    ("runs", [], "runs is [], expected at least one folder"),
    ("runs", "repeat-1", "runs is 'repeat-1', expected a list of folders"),
    ("runs", [5], "runs is 5, expected a folder name"),
    ("runs", ["/etc"], "'/etc' is outside"),
    ("runs", ["repeat-1/../../x"], "is outside"),
    (
        "alone",
        {"1g.10gb": "repeat-1"},
        "alone['1g.10gb'] is 'repeat-1', expected a list of folders",
    ),
    ("alone", {"../x": ["repeat-1"]}, "the profile of an alone run '../x' is not a plain name"),
    ("alone", ["repeat-1"], "alone is ['repeat-1'], expected an object"),
    ("baseline_totals", "abc", "baseline_totals is 'abc', expected a list of finite numbers"),
    ("resumed", 5, "resumed is 5, expected a list of strings"),
    ("isolation", "no", "isolation is 'no', expected true or false"),
    ("baseline_source", 7, "baseline_source is 7, expected a string or null"),
]


@pytest.mark.parametrize(("field", "value", "fragment"), REPEATS_FIELDS)
def test_corrupt_repeats_field_is_one_line(
    live_children: Callable[[], set[int]],
    study: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    field: str,
    value: Any,
    fragment: str,
) -> None:
    """A wrong field of repeats.json: one line naming the file and the field, exit 2, nothing
    rewritten, no process left."""
    _edit(study / REPEATS_FILE, field, value)
    before, children = _tree(tmp_path), live_children()
    err = _refused(capsys, ["report", str(study)])
    assert str(study / REPEATS_FILE) in err and fragment in err
    assert _tree(tmp_path) == before and live_children() <= children


SWEEP_FIELDS = [
    ("runs", [], "runs is [], expected at least one folder"),
    ("runs", "scenario-5", "runs is 'scenario-5', expected a list of folders"),
    ("runs", [5], "runs is 5, expected a folder name"),
    ("studies", ["/tmp"], "'/tmp' is outside"),
    ("capacities", 5, "capacities is 5, expected an object"),
    (
        "capacities",
        {"1g.10gb": "a"},
        "capacities['1g.10gb'] is 'a', expected a finite positive number",
    ),
    (
        "capacities",
        {"1g.10gb": -3},
        "capacities['1g.10gb'] is -3, expected a finite positive number",
    ),
    ("capacities", {"../1g": 3}, "the profile of a capacity '../1g' is not a plain name"),
    ("resumed", 5, "resumed is 5, expected a list of strings"),
    ("chart_png", 5, "chart_png is 5, expected a string or null"),
    ("chart_png", "../throughput.png", "chart_png in"),
]


@pytest.mark.parametrize(("field", "value", "fragment"), SWEEP_FIELDS)
def test_corrupt_sweep_field_is_one_line(
    live_children: Callable[[], set[int]],
    swept: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    field: str,
    value: Any,
    fragment: str,
) -> None:
    """A wrong field of sweep.json: one line naming the file and the field, exit 2, nothing
    rewritten, no process left."""
    _edit(swept / SWEEP_FILE, field, value)
    before, children = _tree(tmp_path), live_children()
    err = _refused(capsys, ["report", str(swept)])
    assert str(swept / SWEEP_FILE) in err and fragment in err
    assert _tree(tmp_path) == before and live_children() <= children


def test_index_that_is_not_an_object_is_one_line(
    study: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """repeats.json holding a JSON list is refused in one line naming the file."""
    (study / REPEATS_FILE).write_text("[]")
    err = _refused(capsys, ["report", str(study)])
    assert str(study / REPEATS_FILE) in err and "not an object" in err


# --- symlinks ---------------------------------------------------------------------------------
def _link_repeat_out(study: Path, tmp_path: Path) -> Path:
    """Replace repeat-2 by a link to a copy of it outside the study; return the copy."""
    outside = Path(shutil.copytree(study / "repeat-2", tmp_path / "outside-repeat"))
    shutil.rmtree(study / "repeat-2")
    (study / "repeat-2").symlink_to(outside, target_is_directory=True)
    return outside


def test_symlinked_repeat_is_refused_by_report(
    study: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A repeat folder that is a symlink out of the study: report refuses it naming the link."""
    _link_repeat_out(study, tmp_path)
    before = _tree(tmp_path)
    err = _refused(capsys, ["report", str(study)])
    assert f"{str(study / 'repeat-2')!r}" in err and "symbolic link" in err
    assert _tree(tmp_path) == before


def test_symlinked_repeat_is_refused_before_resume_runs(
    live_children: Callable[[], set[int]],
    study: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Resuming a study with a symlinked repeat is refused before any run: nothing is written
    through the link or into the study, no process is left."""
    outside = _link_repeat_out(study, tmp_path)
    (outside / "results.json").unlink()  # so that a resume would run it again, through the link
    before, children = _tree(tmp_path), live_children()
    monkeypatch.setattr("mlperf_mig.runner.execute.execute", _no_run)
    monkeypatch.setattr("mlperf_mig.study.sweep.execute", _no_run)
    err = _refused(
        capsys, ["run", "--scenario", "5", *RUN_FLAGS, "--repeats", "2", "--outdir", str(study)]
    )
    assert "repeat-2" in err and "symbolic link" in err
    assert _tree(tmp_path) == before and live_children() <= children


@pytest.mark.parametrize("kind", ["study", "sweep"])
def test_symlinked_index_is_refused(
    study: Path, swept: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """repeats.json or sweep.json that is a symlink (to a valid index elsewhere) is refused."""
    folder, name = (study, REPEATS_FILE) if kind == "study" else (swept, SWEEP_FILE)
    outside = tmp_path / f"elsewhere-{name}"
    os.replace(folder / name, outside)
    (folder / name).symlink_to(outside)
    err = _refused(capsys, ["report", str(folder)])
    assert str(folder / name) in err and "symbolic link" in err


def test_symlinked_results_in_a_repeat_is_refused(
    study: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A repeat's results.json that is a symlink is refused, naming it."""
    outside = tmp_path / "elsewhere.json"
    os.replace(study / "repeat-1" / "results.json", outside)
    (study / "repeat-1" / "results.json").symlink_to(outside)
    err = _refused(capsys, ["report", str(study)])
    assert str(study / "repeat-1" / "results.json") in err and "symbolic link" in err


def test_symlinked_lock_is_refused_and_its_target_kept(
    study: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A study whose lock file is a symlink is refused on resume; the file it points to is kept."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    (study / ".mlperf-mig.lock").unlink()
    (study / ".mlperf-mig.lock").symlink_to(victim)
    err = _refused(
        capsys, ["run", "--scenario", "5", *RUN_FLAGS, "--repeats", "2", "--outdir", str(study)]
    )
    assert ".mlperf-mig.lock" in err and "symbolic link" in err
    assert victim.read_text() == "keep me\n"


# --- a run into a study's or a sweep's folder ---------------------------------------------------
def _no_run(*args: Any, **kwargs: Any) -> None:
    raise AssertionError("a run started")


@pytest.mark.parametrize(
    ("folder", "argv", "holds"),
    [
        (
            "study",
            ["run", "--scenario", "5"],
            "a study (run --repeats or --isolation) (repeats.json)",
        ),
        ("sweep", ["run", "--scenario", "5"], "a sweep (sweep.json)"),
        ("study", ["sweep", "--scenarios", "5"], "a study"),
        ("sweep", ["run", "--scenario", "5", "--repeats", "2"], "a sweep (sweep.json)"),
    ],
)
def test_run_into_a_study_or_sweep_is_refused(
    live_children: Callable[[], set[int]],
    study: Path,
    swept: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    folder: str,
    argv: list[str],
    holds: str,
) -> None:
    """`run --outdir` (or another kind of run) into a study's or a sweep's folder is refused in
    one line before any worker starts; the folder is unchanged and no process is left."""
    target = {"study": study, "sweep": swept}[folder]
    before, children = _tree(tmp_path), live_children()
    monkeypatch.setattr("mlperf_mig.runner.execute.execute", _no_run)
    monkeypatch.setattr("mlperf_mig.study.sweep.execute", _no_run)
    err = _refused(capsys, [*argv, *RUN_FLAGS, "--outdir", str(target)])
    assert str(target) in err and holds in err and "new output folder" in err
    assert _tree(tmp_path) == before and live_children() <= children


def test_folder_holding_a_run_and_a_study_is_not_reported_as_either(
    study: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder with results.json beside repeats.json (an older version's run into a study) is
    refused in one line instead of hiding the study."""
    shutil.copy(study / "repeat-1" / "results.json", study / "results.json")
    err = _refused(capsys, ["report", str(study)])
    assert "a single run (results.json) and a study" in err and "cannot be told" in err


# --- labels -----------------------------------------------------------------------------------
def test_a_wide_change_reads_as_a_ratio_above_zero_and_the_table_says_why(
    pristine_study: Path,
) -> None:
    """A baseline spread from 1% to 199% of the mean: the change is a ratio whose interval stays
    above x0 (never below -100%); with 2 repeats the table shows its range and says why."""
    import attrs

    from mlperf_mig.runner.stats import CHANGE_NOTE, FEW_REPEATS_NOTE

    study = RepeatedRun.load(pristine_study)
    mean = study.total.mean
    spread = attrs.evolve(study, baseline_totals=[mean * 0.01, mean * 1.99], baseline_source="wide")
    change = spread.change
    assert change is not None and change.low > -1.0 and not change.shows_interval
    table = spread.table()
    assert change.text() in table and "(range x" in change.text()
    assert FEW_REPEATS_NOTE in table and CHANGE_NOTE in table
    assert CHANGE_NOTE not in study.table()
