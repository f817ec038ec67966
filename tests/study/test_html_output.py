"""`report DIR --html FILE` writes only where nothing is lost: never onto what the report reads,
never onto a link, device, FIFO or folder, never into a missing folder unless asked."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlperf_mig import cli
from mlperf_mig.errors import OutputDirError
from mlperf_mig.study.report_html import check_html_target
from mlperf_mig.study.sweep import load_report

from .conftest import QUICK_NULL

pytestmark = pytest.mark.slow  # starts the runner's workers


@pytest.fixture(scope="module", name="run_dir")
def fixture_run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One finished run of study layout 5 (one 1g.10gb) on the null backend."""
    import mlperf_mig

    folder = tmp_path_factory.mktemp("html") / "run"
    mlperf_mig.run(5, outdir=folder, **QUICK_NULL)
    return folder


def _snapshot(folder: Path) -> dict[str, bytes | str]:
    """Every entry below `folder`: a file's bytes, or what kind of entry it is."""
    found: dict[str, bytes | str] = {}
    for path in sorted(folder.rglob("*")):
        mode = path.lstat().st_mode
        found[str(path.relative_to(folder))] = (
            path.read_bytes() if stat.S_ISREG(mode) else stat.filemode(mode)
        )
    return found


@pytest.fixture(name="unchanged")
def fixture_unchanged(run_dir: Path) -> Iterator[None]:
    """The run folder holds after the test exactly what it held before it, byte for byte."""
    before = _snapshot(run_dir)
    yield
    assert _snapshot(run_dir) == before


def _refused(capsys: pytest.CaptureFixture[str], run_dir: Path, target: str, *extra: str) -> str:
    code = cli.main(["report", str(run_dir), "--html", target, *extra])
    captured = capsys.readouterr()
    assert code == 2, captured.err
    err = captured.err.strip()
    assert err.startswith("mlperf-mig: error:") and "\n" not in err
    assert captured.out == ""  # refused before the table is printed
    return err


@pytest.mark.usefixtures("unchanged")
@pytest.mark.parametrize("name", ["results.json", "plan.json"])
def test_html_onto_a_file_of_the_run_is_refused(
    capsys: pytest.CaptureFixture[str], run_dir: Path, name: str
) -> None:
    """--html DIR/results.json (or the plan beside it) is one line; the run folder is byte for byte as before."""
    err = _refused(capsys, run_dir, str(run_dir / name))
    assert name in err and "reads" in err


@pytest.mark.usefixtures("unchanged")
def test_html_onto_a_hard_link_of_results_is_refused(
    capsys: pytest.CaptureFixture[str], run_dir: Path, tmp_path: Path
) -> None:
    """A hard link of results.json outside the run is the same file: refused, both names unchanged."""
    link = tmp_path / "copy.json"
    os.link(run_dir / "results.json", link)
    before = link.read_bytes()
    _refused(capsys, run_dir, str(link))
    assert link.read_bytes() == before and link.stat().st_nlink == 2


def test_html_onto_a_sweep_index_or_a_repeat_is_refused(
    capsys: pytest.CaptureFixture[str], studied: Any, study_dir: Path
) -> None:
    """sweep.json, a study's repeats.json and a repeat's results.json deep inside are refused; the sweep is unchanged."""
    before = _snapshot(study_dir)
    repeats = next(study_dir.rglob("repeats.json"))
    repeat = next(repeats.parent.rglob("results.json"))
    for target in (study_dir / "sweep.json", repeats, repeat):
        err = _refused(capsys, study_dir, str(target))
        assert target.name in err
    assert _snapshot(study_dir) == before


def test_the_api_refuses_html_onto_the_index_it_reads(studied: Any, study_dir: Path) -> None:
    """SweepResult.to_html(sweep.json) raises OutputDirError and sweep.json is unchanged."""
    before = (study_dir / "sweep.json").read_bytes()
    with pytest.raises(OutputDirError, match=r"sweep\.json"):
        studied.to_html(study_dir / "sweep.json")
    assert (study_dir / "sweep.json").read_bytes() == before


@pytest.mark.usefixtures("unchanged")
def test_html_onto_a_symlink_is_refused(
    capsys: pytest.CaptureFixture[str], run_dir: Path, tmp_path: Path
) -> None:
    """A link (as /dev/stdout is) is refused: it is still a link, and the file behind it is unchanged."""
    behind = tmp_path / "behind.txt"
    behind.write_text("keep me\n")
    link = tmp_path / "out.html"
    link.symlink_to(behind)
    err = _refused(capsys, run_dir, str(link))
    assert "symbolic link" in err
    assert (
        link.is_symlink() and os.readlink(link) == str(behind) and behind.read_text() == "keep me\n"
    )


@pytest.mark.usefixtures("unchanged")
def test_html_onto_a_fifo_is_refused(
    capsys: pytest.CaptureFixture[str], run_dir: Path, tmp_path: Path
) -> None:
    """A FIFO is refused without being opened (no hang): it is still a FIFO."""
    fifo = tmp_path / "pipe.html"
    os.mkfifo(fifo)
    err = _refused(capsys, run_dir, str(fifo))
    assert "FIFO" in err and stat.S_ISFIFO(fifo.lstat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe.html"]


@pytest.mark.usefixtures("unchanged")
def test_html_onto_a_folder_is_refused(
    capsys: pytest.CaptureFixture[str], run_dir: Path, tmp_path: Path
) -> None:
    """A folder is refused with a file name inside it as the fix; it stays an empty folder."""
    folder = tmp_path / "reports"
    folder.mkdir()
    err = _refused(capsys, run_dir, str(folder))
    assert "is a folder" in err and "report.html" in err
    assert folder.is_dir() and list(folder.iterdir()) == []


def test_html_onto_dev_null_is_refused(run_dir: Path) -> None:
    """/dev/null is a device: the check (which writes nothing, so a regression cannot replace
    the machine's /dev/null) refuses it, and it is still a character device."""
    with pytest.raises(OutputDirError, match="character device"):
        check_html_target(load_report(run_dir), os.devnull)
    assert stat.S_ISCHR(os.lstat(os.devnull).st_mode)


@pytest.mark.usefixtures("unchanged")
def test_html_into_a_missing_folder_is_refused(
    capsys: pytest.CaptureFixture[str], run_dir: Path, tmp_path: Path
) -> None:
    """A missing folder is one line naming it and --html-mkdir; nothing is created."""
    err = _refused(capsys, run_dir, str(tmp_path / "no" / "such" / "r.html"))
    assert "does not exist" in err and "--html-mkdir" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.usefixtures("unchanged")
def test_html_mkdir_creates_the_missing_folder(
    capsys: pytest.CaptureFixture[str], run_dir: Path, tmp_path: Path
) -> None:
    """With --html-mkdir the folders are made and the report written there, nothing else."""
    target = tmp_path / "new" / "r.html"
    assert cli.main(["report", str(run_dir), "--html", str(target), "--html-mkdir"]) == 0
    assert target.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert [p.name for p in target.parent.iterdir()] == ["r.html"]
    assert "replaced" not in capsys.readouterr().err


def test_html_mkdir_without_html_is_one_line(
    capsys: pytest.CaptureFixture[str], run_dir: Path
) -> None:
    """--html-mkdir alone names --html as what it needs."""
    assert cli.main(["report", str(run_dir), "--html-mkdir"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--html FILE" in err and "\n" not in err


@pytest.mark.usefixtures("unchanged")
def test_a_non_html_name_inside_the_run_is_refused(
    capsys: pytest.CaptureFixture[str], run_dir: Path
) -> None:
    """A new file inside the reported folder must be named *.html; notes.txt is refused, not created."""
    err = _refused(capsys, run_dir, str(run_dir / "notes.txt"))
    assert "*.html" in err and not (run_dir / "notes.txt").exists()


def test_an_existing_file_is_replaced_and_said_so(
    capsys: pytest.CaptureFixture[str], run_dir: Path, tmp_path: Path
) -> None:
    """An earlier regular file is replaced atomically (no temporary file left) and stderr says 'replaced FILE'."""
    target = tmp_path / "r.html"
    target.write_text("old\n")
    assert cli.main(["report", str(run_dir), "--html", str(target)]) == 0
    assert f"replaced {target}" in capsys.readouterr().err
    assert target.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]


def test_an_earlier_report_inside_the_run_is_replaced(
    capsys: pytest.CaptureFixture[str], run_dir: Path
) -> None:
    """DIR/report.html from an earlier report is replaced (said so); the run's own files are unchanged."""
    before = _snapshot(run_dir)
    target = run_dir / "report.html"
    try:
        target.write_text("old\n")
        assert cli.main(["report", str(run_dir), "--html", str(target)]) == 0
        assert f"replaced {target}" in capsys.readouterr().err
        assert target.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    finally:
        target.unlink()
    assert _snapshot(run_dir) == before


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600)])
def test_the_report_file_mode_follows_the_umask(
    run_dir: Path, tmp_path: Path, umask: int, mode: int
) -> None:
    """The HTML report is shareable: 0644 under umask 022, 0600 under 077 (not mkstemp's 0600 always)."""
    target = tmp_path / "r.html"
    old = os.umask(umask)
    try:
        assert cli.main(["report", str(run_dir), "--html", str(target)]) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == mode
