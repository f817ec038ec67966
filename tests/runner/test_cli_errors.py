"""Bad input to `mlperf-mig run`: one line on stderr and exit code 2, before any worker starts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mlperf_mig import cli

from .conftest import NVML_STATES


def _one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code = cli.main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.startswith("mlperf-mig: error:") and "\n" not in err
    return err


def test_scenario_outside_1_to_8(capsys: pytest.CaptureFixture[str]) -> None:
    """--scenario 9 names the range of the study's layouts."""
    err = _one_line_error(capsys, ["run", "--scenario", "9", "--backend", "null"])
    assert "1-8" in err and "--loadgen-scenario" in err


def test_layout_invalid_on_the_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    """Two 4g instances do not fit an A100."""
    _one_line_error(capsys, ["run", "--scenario", "4g.40gb+4g.40gb", "--backend", "null"])


def test_unknown_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    """--gpu H900 is not in the catalog."""
    err = _one_line_error(capsys, ["run", "--gpu", "H900", "--backend", "null"])
    assert "H900" in err


def test_live_layout_differs(capsys: pytest.CaptureFixture[str]) -> None:
    """A live MIG layout other than the requested one is refused with the MIG setup steps."""
    state = NVML_STATES / "a100-80gb-scenario7.json"
    err = _one_line_error(
        capsys, ["run", "--scenario", "1", "--backend", "null", "--nvml-state", str(state)]
    )
    assert "7g.80gb" in err and "nvidia-smi" in err


def test_output_folder_not_writable(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """An output folder below a regular file cannot be created."""
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    err = _one_line_error(capsys, ["run", "--backend", "null", "--outdir", str(blocker / "run")])
    assert "a-file" in err


def test_bad_setting_override(capsys: pytest.CaptureFixture[str]) -> None:
    """--set without '=' is refused."""
    _one_line_error(capsys, ["run", "--backend", "null", "--set", "min_duration"])


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--set", "min_durration=5000"], "unknown LoadGen setting"),
        (["--set", "min_duration=-5"], "must not be negative"),
        (["--user-conf", "/nonexistent/user.conf"], "cannot read user.conf"),
        (["--timeout", "-1"], "timeout_s"),
        (["--timeout", "0"], "timeout_s"),
        (["--dataset", "/nonexistent"], "val_map.txt"),
        (["--benchmark", "bert", "--dataset", "/nonexistent"], "SQuAD file"),
        (["--precision", "int3"], "unknown precision"),
        (["--model", "/nonexistent.onnx"], "does not exist"),
        (["--precision", "fp16"], "null backend runs no model"),
        (["--set", "min_duration=1e26"], "64-bit"),
        (["--outdir", ""], "empty"),
        (["--outdir", "x" * 300], "255"),
        (["--outdir", "/tmp/\udcff\udcfe"], "UTF-8"),
    ],
)
def test_input_refused_before_workers(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], fragment: str
) -> None:
    """What a worker or engine build would refuse is refused by the plan: one line, exit 2, and
    no run folder."""
    outdir = tmp_path / "run"
    err = _one_line_error(capsys, ["run", "--backend", "null", "--outdir", str(outdir), *argv])
    assert fragment in err
    assert not outdir.exists()


def test_plan_refuses_zero_sample_count() -> None:
    """sample_count=0 through the API is refused, not read as the official count."""
    import mlperf_mig
    from mlperf_mig.errors import SettingsError

    with pytest.raises(SettingsError, match="sample_count"):
        mlperf_mig.plan(7, backend="null", sample_count=0)


def test_outdir_holding_a_run_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """--outdir of an earlier run is refused before anything runs, and its results.json is kept."""
    outdir = tmp_path / "run"
    outdir.mkdir()
    (outdir / "results.json").write_text("{}")
    err = _one_line_error(capsys, ["run", "--backend", "null", "--outdir", str(outdir)])
    assert "already holds a run" in err
    assert (outdir / "results.json").read_text() == "{}"
    assert sorted(p.name for p in outdir.iterdir()) == ["results.json"]


@pytest.fixture(name="bad_files")
def fixture_bad_files(tmp_path: Path) -> Path:
    """A user.conf that is not UTF-8 and ImageNet folders whose val_map.txt is malformed."""
    (tmp_path / "latin1.conf").write_bytes(b"\xff\xfe resnet50.Offline.min_duration = 5\n")
    (tmp_path / "huge.conf").write_text(f"resnet50.Offline.min_duration = {10**26}\n")
    for name, text in [
        ("no-label", b"a.npy\n"),
        ("big-label", b"a.npy 100000000000000000000\n"),
        ("latin1", b"a\xff.npy 1\n"),
    ]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "val_map.txt").write_bytes(text)
    return tmp_path


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--user-conf", "latin1.conf"], "not UTF-8"),
        (["--user-conf", "huge.conf"], "64-bit"),
        (["--dataset", "no-label"], "expected '<image file> <label>'"),
        (["--dataset", "big-label"], "not an ImageNet class"),
        (["--dataset", "latin1"], "not UTF-8"),
    ],
)
def test_bad_files_refused_before_workers(
    capsys: pytest.CaptureFixture[str], bad_files: Path, argv: list[str], fragment: str
) -> None:
    """A user.conf or val_map.txt that every worker would fail on is one line, exit 2, and no
    run folder."""
    outdir = bad_files / "run"
    argv = [argv[0], str(bad_files / argv[1])]
    err = _one_line_error(capsys, ["run", "--backend", "null", "--outdir", str(outdir), *argv])
    assert fragment in err
    assert not outdir.exists()


@pytest.mark.parametrize(
    ("scenarios", "fragment"),
    [
        (["1-99999999999999999999"], "1-8"),
        (["1-99"], "1-8"),
        (["1", "1"], "twice"),
        (["1", "7g.80gb"], "twice"),
    ],
)
def test_sweep_lists_refused_before_any_layout(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, scenarios: list[str], fragment: str
) -> None:
    """A range beyond the study's layouts or a repeated layout is refused before any runs."""
    outdir = tmp_path / "sweep"
    err = _one_line_error(
        capsys, ["sweep", "--scenarios", *scenarios, "--backend", "null", "--outdir", str(outdir)]
    )
    assert fragment in err
    assert not outdir.exists()


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["throughput is a string", "no instances"])
def test_report_refuses_a_damaged_results_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, good_run: Any, damage: str
) -> None:
    """report on a results.json with a string throughput or no instances is one line, exit 2,
    not a traceback or 'ok, valid'."""
    data = json.loads((Path(good_run.outdir) / "results.json").read_text())
    if damage == "no instances":
        data["instances"] = []
    else:
        data["instances"][0]["performance"]["throughput"] = "fast"
    folder = tmp_path / "damaged"
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps(data))
    err = _one_line_error(capsys, ["report", str(folder)])
    assert "results.json" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--repeats", "٣"],
        ["sweep", "--repeats", "²"],
        ["advise", "--top", "٣"],
        ["advise", "--min-instances", "３"],
        ["capacity", "--max-steps", "٣"],
    ],
)
def test_whole_numbers_in_other_digits_are_refused(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
) -> None:
    """--repeats ٣ (int() reads it as 3) is one line naming digits 0-9, exit 2, and no run folder is made."""
    monkeypatch.chdir(tmp_path)  # where a run without --outdir would make its folder
    with pytest.raises(SystemExit) as caught:
        cli.main([*argv, "--backend", "null"])
    err = capsys.readouterr().err.strip()
    assert caught.value.code == 2 and "\n" not in err and "digits 0-9" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--timeout", "٣"],
        ["run", "--timeout", "nan"],
        ["advise", "--max-p99-ms", "inf"],
        ["capacity", "--tolerance", "０.1"],
        ["capacity", "--low-qps", "1e999x"],
        ["harness", "--threads", "²"],
        ["harness", "--sample-count", "٣"],
        ["build", "--seed", "٣"],
        ["mig-setup", "A100-SXM4-80GB", "7g.80gb", "--gpu-index", "١"],
    ],
)
def test_numbers_in_other_digits_or_not_finite_are_refused(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
) -> None:
    """float() and int() read '٣' as 3 and 'nan' as a number: every numeric option takes ASCII
    digits and finite values only, in one line, exit 2, with nothing made."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as caught:
        cli.main(argv)
    err = capsys.readouterr().err.strip()
    assert caught.value.code == 2 and "\n" not in err and "digits 0-9" in err
    assert list(tmp_path.iterdir()) == []


def test_batch_size_below_one_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """--batch-size 0 names the option and the range, before any worker starts."""
    err = _one_line_error(
        capsys, ["run", "--scenario", "7", "--backend", "null", "--batch-size", "0"]
    )
    assert "batch_size must be a whole number from 1" in err and "got int 0" in err


def test_batch_size_flag_reaches_the_plan(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`plan --batch-size 3` plans a batch of 3 for every instance (the recipe's otherwise)."""
    import mlperf_mig.api

    real_plan = mlperf_mig.api.plan
    planned = []
    monkeypatch.setattr(
        mlperf_mig.api, "plan", lambda **kw: planned.append(real_plan(**kw)) or planned[-1]
    )
    assert cli.main(["plan", "--scenario", "7", "--backend", "null", "--batch-size", "3"]) == 0
    assert planned[0].batch_size == 3
    assert cli.main(["plan", "--scenario", "7", "--backend", "null"]) == 0
    assert planned[1].batch_size is None
