"""Run folders and submission trees are untrusted: nothing read from them writes, reads, chmods or
deletes outside the run folder or the tree (issue 20, case 1)."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest

from mlperf_mig import cli
from mlperf_mig.errors import SubmissionError
from mlperf_mig.submission import check, write_submission

pytestmark = pytest.mark.usefixtures("fixed_host")

SECRET = "root:x:0:0:secret line that must not reach the tree\n"


@pytest.fixture(name="unified_run")
def fixture_unified_run(made_runs: dict[str, Path]) -> Path:
    """A unified run folder with genuine LoadGen logs that the open-division writer accepts."""
    return made_runs["unified"]


@pytest.fixture(name="independent_run")
def fixture_independent_run(made_runs: dict[str, Path]) -> Path:
    """An independent run folder (one folder per instance) the open-division writer accepts."""
    return made_runs["independent"]


def _copy(run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run, tmp_path / "work" / "run"))


def _edit_results(run: Path, change: Any) -> None:
    path = run / "results.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _snapshot(folder: Path, skip: Path | None = None) -> dict[str, tuple[int, bytes | str]]:
    """Every entry below `folder` (not following links): its mode and its content or link target."""
    entries: dict[str, tuple[int, bytes | str]] = {}
    for root, dirs, files in os.walk(folder, followlinks=False):
        if skip is not None and Path(root) == skip.parent:
            dirs[:] = [d for d in dirs if Path(root) / d != skip]
        for name in dirs + files:
            path = Path(root) / name
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                content: bytes | str = os.readlink(path)
            elif stat.S_ISREG(info.st_mode):
                content = path.read_bytes()
            else:
                content = ""
            entries[str(path.relative_to(folder))] = (info.st_mode, content)
    return entries


def _write_fails(
    argv_runs: list[Path], tree: Path, capsys: pytest.CaptureFixture[str], *fragments: str
) -> str:
    argv = ["submission", "--division", "open", "--submitter", "Acme", "--outdir", str(tree)]
    code = cli.main([*argv, *map(str, argv_runs)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("mlperf-mig: error: ")
    for fragment in fragments:
        assert fragment in err
    return err


def _tree_text(tree: Path) -> str:
    return "".join(
        p.read_text(errors="replace") for p in tree.rglob("*") if p.is_file() and not p.is_symlink()
    )


# --- values of results.json that become path components ------------------------------------


def test_scenario_that_climbs_out_is_refused(
    unified_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A LoadGen scenario of '../../..' in results.json and the detail logs is refused; the folder
    it names outside the tree is neither written nor deleted."""
    run = _copy(unified_run, tmp_path)
    hostile = "../" * 6 + "victim"
    _edit_results(run, lambda d: d.update(loadgen_scenario=hostile))
    for detail in run.glob("layout/*/mlperf_log_detail.txt"):
        detail.write_text(
            detail.read_text().replace('"value": "Offline"', json.dumps({"value": hostile})[1:-1])
        )
    existing = (
        tmp_path
        / "tree"
        / "open"
        / "Acme"
        / "results"
        / "A100-SXM4-80GB-MIG_2g.20gb_1g.10gb_ORT_emulated"
    )
    (existing / "resnet50").mkdir(parents=True)  # an existing tree: the '..' resolve from here
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("kept")
    before = _snapshot(tmp_path, skip=tmp_path / "tree")
    _write_fails([run], tmp_path / "tree", capsys, f"loadgen_scenario {hostile!r} is not one of")
    assert _snapshot(tmp_path, skip=tmp_path / "tree") == before
    assert list((tmp_path / "tree" / "open" / "Acme").rglob("*")) == [
        existing.parent,
        existing,
        existing / "resnet50",
    ]


def test_unknown_benchmark_is_refused(
    unified_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A benchmark name that is not one of the benchmarks is refused on load, with one line."""
    run = _copy(unified_run, tmp_path)
    _edit_results(run, lambda d: d.update(benchmark="../resnet50"))
    _write_fails([run], tmp_path / "tree", capsys, "benchmark '../resnet50'")
    assert not (tmp_path / "tree" / "open").exists()


def test_instance_name_that_climbs_out_is_refused(
    independent_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An instance named '../outside' does not copy the logs of the folder beside the run."""
    run = _copy(independent_run, tmp_path)
    outside = tmp_path / "work" / "outside"
    shutil.move(run / "i0-2g.20gb", outside)
    (outside / "performance" / "mlperf_log_summary.txt").write_text(SECRET)
    _edit_results(run, lambda d: d["instances"][0].update(name="../outside"))
    before = _snapshot(tmp_path, skip=tmp_path / "tree")
    _write_fails([run], tmp_path / "tree", capsys, "instance name '../outside'")
    assert _snapshot(tmp_path, skip=tmp_path / "tree") == before
    assert not (tmp_path / "tree" / "open").exists()


def test_log_dir_that_climbs_out_is_refused(
    unified_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A recorded log_dir of '<run>/../elsewhere' is refused, naming the field; nothing of the
    folder outside the run reaches the tree."""
    run = _copy(unified_run, tmp_path)
    elsewhere = tmp_path / "work" / "elsewhere"
    shutil.move(run / "layout" / "performance", elsewhere)
    (elsewhere / "mlperf_log_summary.txt").write_text(SECRET)
    _edit_results(run, lambda d: d["layout_result"].update(log_dir=f"{run}/../elsewhere"))
    before = _snapshot(tmp_path, skip=tmp_path / "tree")
    _write_fails([run], tmp_path / "tree", capsys, "log_dir", "outside the run folder")
    assert _snapshot(tmp_path, skip=tmp_path / "tree") == before
    assert not (tmp_path / "tree" / "open").exists()


def test_user_conf_outside_the_run_is_refused(
    unified_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A recorded user_conf of /etc/passwd (the run's own user.conf gone) is refused; nothing of
    the file is copied into the tree."""
    run = _copy(unified_run, tmp_path)
    (run / "layout" / "user.conf").unlink()
    _edit_results(run, lambda d: d["layout_result"].update(user_conf="/etc/passwd"))
    before = _snapshot(tmp_path, skip=tmp_path / "tree")
    _write_fails(
        [run], tmp_path / "tree", capsys, "user_conf '/etc/passwd'", "outside the run folder"
    )
    assert _snapshot(tmp_path, skip=tmp_path / "tree") == before
    assert not (tmp_path / "tree" / "open").exists()


@pytest.mark.parametrize(
    "link",
    [
        "layout/performance/mlperf_log_summary.txt",
        "layout/performance",
        "layout",
        "layout/user.conf",
    ],
)
def test_symlink_in_the_run_folder_is_refused(
    unified_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], link: str
) -> None:
    """A symlink inside the run folder (a log, a log folder, the instance folder, user.conf) is
    refused with one line naming it; nothing it points to reaches the tree."""
    run = _copy(unified_run, tmp_path)
    target = tmp_path / "outside" / Path(link).name
    target.parent.mkdir()
    shutil.move(run / link, target)
    for file in [target] if target.is_file() else target.rglob("*.txt"):
        file.write_text(SECRET)
    (run / link).symlink_to(target)
    before = _snapshot(tmp_path, skip=tmp_path / "tree")
    _write_fails([run], tmp_path / "tree", capsys, f"{run / link}", "symbolic link")
    assert _snapshot(tmp_path, skip=tmp_path / "tree") == before
    assert not (tmp_path / "tree" / "open").exists()


def test_system_name_is_a_plain_name(
    unified_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A GPU name that makes the system folder name start with a dot is refused before writing."""
    run = _copy(unified_run, tmp_path)
    _edit_results(run, lambda d: d.update(gpu="."))
    _write_fails([run], tmp_path / "tree", capsys, "system folder name")
    assert not (tmp_path / "tree" / "open").exists()


# --- an existing tree with links inside -----------------------------------------------------


def test_link_in_an_existing_tree_is_refused_and_not_chmod(
    unified_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A symlink inside an existing tree is refused with one line; the private file it points to
    keeps its mode 0600 (the tree is never made readable through a link)."""
    private = tmp_path / "private.txt"
    private.write_text(SECRET)
    private.chmod(0o600)
    systems = tmp_path / "tree" / "open" / "Acme" / "systems"
    systems.mkdir(parents=True)
    (systems / "link.json").symlink_to(private)
    before = _snapshot(tmp_path)
    _write_fails(
        [unified_run], tmp_path / "tree", capsys, str(systems / "link.json"), "symbolic link"
    )
    assert _snapshot(tmp_path) == before
    assert stat.S_IMODE(private.stat().st_mode) == 0o600


def test_symlinked_results_folder_is_refused(
    unified_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A symlinked results/ is refused: nothing is written through it and the result folder
    behind it is not deleted."""
    behind = tmp_path / "behind"
    system = "A100-SXM4-80GB-MIG_2g.20gb_1g.10gb_ORT_emulated"
    (behind / system / "resnet50" / "Offline").mkdir(parents=True)
    (behind / system / "resnet50" / "Offline" / "keep.txt").write_text("kept")
    submitter = tmp_path / "tree" / "open" / "Acme"
    submitter.mkdir(parents=True)
    (submitter / "results").symlink_to(behind, target_is_directory=True)
    before = _snapshot(tmp_path)
    _write_fails(
        [unified_run], tmp_path / "tree", capsys, str(submitter / "results"), "symbolic link"
    )
    assert _snapshot(tmp_path) == before


def test_symlinked_division_folder_is_refused(
    unified_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A symlinked division folder on the way to the submitter folder is refused too."""
    behind = tmp_path / "behind"
    behind.mkdir()
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "open").symlink_to(behind, target_is_directory=True)
    _write_fails([unified_run], tmp_path / "tree", capsys, "symbolic link")
    assert list(behind.iterdir()) == []


def test_rewrite_keeps_a_result_folder_with_foreign_files(
    unified_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rewriting a result whose folder holds a file the writer did not write is refused; the
    earlier result and that file are kept."""
    tree = write_submission(
        [unified_run], division="open", submitter="Acme", outdir=tmp_path / "tree"
    )
    (tree.results[0] / "notes.txt").write_text("mine")
    before = _snapshot(tmp_path)
    _write_fails([unified_run], tmp_path / "tree", capsys, "notes.txt")
    assert _snapshot(tmp_path) == before


def test_rewritten_tree_is_readable(unified_run: Path, tmp_path: Path) -> None:
    """A tree written twice is still shareable: its files are 0644, with no staging folder left."""
    for _ in range(2):
        tree = write_submission(
            [unified_run], division="open", submitter="Acme", outdir=tmp_path / "tree"
        )
    files = [p for p in tree.submitter_dir.rglob("*") if p.is_file()]
    assert files and {stat.S_IMODE(p.stat().st_mode) for p in files} == {0o644}
    assert not [p for p in tree.submitter_dir.rglob(".*")]
    assert check.check_submission(tmp_path / "tree") == ()


# --- names given on the command line ---------------------------------------------------------


def test_submitter_with_a_newline_is_refused(
    unified_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--submitter $'Org\\n' is refused with one line; no folder is made."""
    argv = [
        "submission",
        "--division",
        "open",
        "--submitter",
        "Org\n",
        "--outdir",
        str(tmp_path / "tree"),
    ]
    assert cli.main([*argv, str(unified_run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "submitter 'Org\\n'" in err
    assert not (tmp_path / "tree").exists()


def test_override_with_a_control_character_is_refused(unified_run: Path, tmp_path: Path) -> None:
    """An overrides value with a newline (it goes into the system description) is refused."""
    overrides = tmp_path / "overrides.json"
    overrides.write_text(json.dumps({"cooling": "air\nwater"}))
    with pytest.raises(SubmissionError, match=r"cooling .* control character"):
        write_submission(
            [unified_run],
            division="open",
            submitter="Acme",
            outdir=tmp_path / "tree",
            overrides=overrides,
        )
    assert not (tmp_path / "tree").exists()


# --- the checker ------------------------------------------------------------------------------


@pytest.mark.slow
def test_check_refuses_a_link_out_of_the_tree(
    good_tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`submission check` refuses a symlink inside the tree with one line naming it, reading
    nothing through it."""
    tree = Path(shutil.copytree(good_tree, tmp_path / "tree"))
    measurements = next(tree.glob("*/*/results/*/*/*/measurements.json"))
    outside = tmp_path / "outside.json"
    shutil.move(measurements, outside)
    measurements.symlink_to(outside)
    code = cli.main(["submission", "check", str(tree)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and str(measurements) in err and "symbolic link" in err


@pytest.mark.parametrize("value", ["²", "١٢", "1²"])
def test_whole_number_fields_are_ascii_digits(value: str) -> None:
    """number_of_nodes of superscripts or other scripts' digits is not a whole number."""
    problems = check.system_description_problems(
        {"number_of_nodes": value}, division="open", submitter="Acme"
    )
    assert any("number_of_nodes is" in p and "whole number" in p for p in problems)


def test_failed_rewrite_keeps_the_earlier_result(
    unified_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rewrite that fails half-way (a full disk) leaves the earlier result as it was and no
    folder of its own behind."""
    from mlperf_mig.errors import OutputDirError
    from mlperf_mig.submission import accuracy

    write_submission([unified_run], division="open", submitter="Acme", outdir=tmp_path / "tree")
    before = _snapshot(tmp_path / "tree" / "open" / "Acme" / "results")

    def disk_full(*args: Any) -> str:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(accuracy, "write_accuracy_files", disk_full)
    with pytest.raises(OutputDirError, match="No space left on device"):
        write_submission([unified_run], division="open", submitter="Acme", outdir=tmp_path / "tree")
    assert _snapshot(tmp_path / "tree" / "open" / "Acme" / "results") == before
