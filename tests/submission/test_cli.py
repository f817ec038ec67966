"""`mlperf-mig submission`: success paths, and every error path ends in exit 2 with one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mlperf_mig import cli

pytestmark = pytest.mark.usefixtures("fixed_host")


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _fails_with_one_line(
    argv: list[str], capsys: pytest.CaptureFixture[str], fragment: str
) -> None:
    code, _, err = _run(argv, capsys)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("mlperf-mig: error: ")
    assert fragment in err


@pytest.mark.slow
def test_write_then_check(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The documented commands write a tree (exit 0) that the check accepts (exit 0)."""
    out = tmp_path / "S"
    argv = ["submission", "--division", "open", "--submitter", "Acme", "--outdir", str(out)]
    code, stdout, _ = _run([*argv, str(runs["independent"]), str(runs["unified"])], capsys)
    assert code == 0 and "wrote 3 result(s) of 3 system(s)" in stdout
    code, stdout, _ = _run(["submission", "check", str(out)], capsys)
    assert code == 0 and "no problems found" in stdout


@pytest.mark.slow
def test_check_prints_one_line_per_problem(
    good_tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A broken tree: one line per problem on stdout, a count on stderr, exit 2."""
    tree = shutil.copytree(good_tree, tmp_path / "tree")
    (tree / "stray.txt").write_text("x")
    system = next((tree / "open" / "Acme" / "systems").glob("*.json"))
    data = json.loads(system.read_text())
    data["status"] = "released"
    system.write_text(json.dumps(data))
    code, stdout, err = _run(["submission", "check", str(tree)], capsys)
    assert code == 2
    assert len(stdout.splitlines()) == 2
    assert err == "2 problem(s) found\n"


@pytest.mark.slow
def test_missing_writer_options(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """Writing without --division, --submitter and --outdir names all three."""
    _fails_with_one_line(
        ["submission", str(runs["unified"])], capsys, "needs --division, --submitter, --outdir"
    )


@pytest.mark.slow
def test_unknown_division(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A division other than closed or open is refused."""
    argv = ["submission", "--division", "network", "--submitter", "Acme", "--outdir", str(tmp_path)]
    _fails_with_one_line(
        [*argv, str(runs["unified"])], capsys, "division 'network' is not one of closed, open"
    )


@pytest.mark.slow
def test_bad_submitter_name(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A submitter that is not a plain folder name is refused."""
    argv = ["submission", "--division", "open", "--submitter", "../Acme", "--outdir", str(tmp_path)]
    _fails_with_one_line([*argv, str(runs["unified"])], capsys, "must be a folder name")


def test_not_a_run_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A folder without results.json is refused."""
    argv = [
        "submission",
        "--division",
        "open",
        "--submitter",
        "Acme",
        "--outdir",
        str(tmp_path / "S"),
    ]
    _fails_with_one_line([*argv, str(tmp_path)], capsys, "results.json")


@pytest.mark.slow
def test_closed_refusal_is_one_line(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every problem of a refused closed submission is on one line."""
    argv = [
        "submission",
        "--division",
        "closed",
        "--submitter",
        "Acme",
        "--outdir",
        str(tmp_path / "S"),
    ]
    _fails_with_one_line(
        [*argv, str(runs["independent"])], capsys, "closed division refuses runs with synthetic"
    )


@pytest.mark.slow
def test_malformed_overrides(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An overrides file that is not JSON is refused."""
    overrides = tmp_path / "o.json"
    overrides.write_text("cooling: air")
    argv = [
        "submission",
        "--division",
        "open",
        "--submitter",
        "Acme",
        "--outdir",
        str(tmp_path / "S"),
    ]
    _fails_with_one_line(
        [*argv, "--overrides", str(overrides), str(runs["unified"])],
        capsys,
        "cannot be read as JSON",
    )


@pytest.mark.slow
def test_missing_host_description_path(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A --hosts path that does not exist is refused."""
    argv = [
        "submission",
        "--division",
        "open",
        "--submitter",
        "Acme",
        "--outdir",
        str(tmp_path / "S"),
    ]
    _fails_with_one_line(
        [*argv, "--hosts", str(tmp_path / "nope"), str(runs["unified"])], capsys, "does not exist"
    )


@pytest.mark.slow
def test_empty_host_description_folder(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A --hosts folder without any description is refused rather than silently ignored."""
    empty = tmp_path / "hosts"
    empty.mkdir()
    argv = [
        "submission",
        "--division",
        "open",
        "--submitter",
        "Acme",
        "--outdir",
        str(tmp_path / "S"),
    ]
    _fails_with_one_line(
        [*argv, "--hosts", str(empty), str(runs["unified"])], capsys, "holds no .json files"
    )
    assert not (tmp_path / "S").exists()


@pytest.mark.slow
def test_unknown_bert_folder(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A BERT folder other than bert-99 / bert-99.9 is refused."""
    argv = ["submission", "--division", "open", "--submitter", "Acme", "--outdir", str(tmp_path)]
    _fails_with_one_line(
        [*argv, "--bert-folder", "bert", str(runs["unified"])], capsys, "bert-99, bert-99.9"
    )


@pytest.mark.slow
def test_unwritable_outdir(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An output folder that cannot be created is refused."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    argv = [
        "submission",
        "--division",
        "open",
        "--submitter",
        "Acme",
        "--outdir",
        str(blocker / "S"),
    ]
    _fails_with_one_line([*argv, str(runs["unified"])], capsys, "cannot be written")


def test_check_missing_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Checking a folder that does not exist is refused."""
    _fails_with_one_line(["submission", "check", str(tmp_path / "nope")], capsys, "does not exist")


def test_check_takes_one_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`submission check` with two folders is refused."""
    _fails_with_one_line(
        ["submission", "check", str(tmp_path), str(tmp_path)], capsys, "exactly one folder"
    )


def test_check_refuses_writer_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`submission check` with writer options is refused."""
    _fails_with_one_line(
        ["submission", "check", str(tmp_path), "--division", "open"],
        capsys,
        "does not take --division",
    )


@pytest.mark.slow
def test_check_unknown_version(good_tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown checker version is refused."""
    _fails_with_one_line(
        ["submission", "check", str(good_tree), "--version", "v1.0"],
        capsys,
        "unknown checker version",
    )


@pytest.mark.slow
def test_write_unknown_version(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Writing for an unknown checker version is refused."""
    argv = ["submission", "--division", "open", "--submitter", "Acme", "--outdir", str(tmp_path)]
    _fails_with_one_line(
        [*argv, "--version", "v1.0", str(runs["unified"])], capsys, "unknown checker version"
    )


def test_no_run_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Writing without any run folder is refused."""
    argv = ["submission", "--division", "open", "--submitter", "Acme", "--outdir", str(tmp_path)]
    _fails_with_one_line(argv, capsys, "no run folder given")


@pytest.mark.slow
def test_overrides_not_an_object(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An overrides file holding a JSON list is refused."""
    overrides = tmp_path / "o.json"
    overrides.write_text('["cooling"]')
    argv = [
        "submission",
        "--division",
        "open",
        "--submitter",
        "Acme",
        "--outdir",
        str(tmp_path / "S"),
    ]
    _fails_with_one_line(
        [*argv, "--overrides", str(overrides), str(runs["unified"])],
        capsys,
        "must hold a JSON object",
    )


@pytest.mark.slow
def test_unknown_override_field(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An overrides file with a field the checker does not know is refused, naming the field."""
    overrides = tmp_path / "o.json"
    overrides.write_text('{"colling": "air"}')
    argv = [
        "submission",
        "--division",
        "open",
        "--submitter",
        "Acme",
        "--outdir",
        str(tmp_path / "S"),
    ]
    _fails_with_one_line(
        [*argv, "--overrides", str(overrides), str(runs["unified"])],
        capsys,
        "unknown fields colling",
    )


@pytest.mark.slow
def test_malformed_host_description(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A host description without its match and fields is refused."""
    host = tmp_path / "host.json"
    host.write_text('{"name": "lab"}')
    argv = [
        "submission",
        "--division",
        "open",
        "--submitter",
        "Acme",
        "--outdir",
        str(tmp_path / "S"),
    ]
    _fails_with_one_line(
        [*argv, "--hosts", str(host), str(runs["unified"])],
        capsys,
        "it needs name, match and fields",
    )


@pytest.mark.slow
def test_logs_the_checker_rejects(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run whose logs break the checker's rules (here: other seeds) is refused in one line."""
    run = shutil.copytree(runs["unified"], tmp_path / "run")
    detail = run / "layout" / "performance" / "mlperf_log_detail.txt"
    detail.write_text(detail.read_text().replace("2085463073848966840", "7"))
    argv = [
        "submission",
        "--division",
        "open",
        "--submitter",
        "Acme",
        "--outdir",
        str(tmp_path / "S"),
    ]
    _fails_with_one_line([*argv, str(run)], capsys, "qsl_rng_seed is 7, checker v6.1 expects")
