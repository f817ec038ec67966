"""The registry's sub-commands: tables and JSON on success, one line and exit 2 on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlperf_mig.cli import main

FIXTURES = Path(__file__).parent / "fixtures"
SHIPPED = Path(__file__).resolve().parents[2] / "systems" / "gpus"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_gpus_lists_the_catalog(capsys: pytest.CaptureFixture[str]) -> None:
    """`gpus` prints a table with every shipped GPU."""
    code, out, _ = _run(capsys, "gpus")
    assert code == 0
    assert "A100-SXM4-80GB" in out and "H200-SXM5-141GB" in out and "A30" in out


def test_gpus_json_is_machine_readable(capsys: pytest.CaptureFixture[str]) -> None:
    """`gpus --json` prints the GPU records with packed PCI IDs."""
    code, out, _ = _run(capsys, "gpus", "--json")
    gpus = {gpu["name"]: gpu for gpu in json.loads(out)}
    assert code == 0 and gpus["A30"]["pci_device_ids"] == ["0x20B710DE", "0x20B910DE"]


def test_layouts_maximal_json(capsys: pytest.CaptureFixture[str]) -> None:
    """`layouts GPU --maximal --json` lists layouts with their placements."""
    code, out, _ = _run(capsys, "layouts", "A100-80GB", "--maximal", "--json")
    layouts = {entry["layout"]: entry for entry in json.loads(out)}
    assert code == 0
    assert [p["start"] for p in layouts["4g.40gb+3g.40gb"]["placements"]] == [0, 4]


def test_layouts_table_counts_them(capsys: pytest.CaptureFixture[str]) -> None:
    """`layouts A30` ends with the number of valid layouts."""
    code, out, _ = _run(capsys, "layouts", "A30")
    assert code == 0 and out.rstrip().endswith("valid layouts on A30")


def test_scenarios_on_h200(capsys: pytest.CaptureFixture[str]) -> None:
    """`scenarios --gpu H200` shows scenario 7 as 3x 2g.35gb + 1g.18gb."""
    code, out, _ = _run(capsys, "scenarios", "--gpu", "H200", "--json")
    rows = json.loads(out)
    assert code == 0 and rows[6]["layout"] == "3x2g.35gb+1g.18gb"


def test_scenarios_on_a30_explain_what_does_not_fit(capsys: pytest.CaptureFixture[str]) -> None:
    """`scenarios --gpu A30` marks the 7-slice layouts and says why."""
    code, out, _ = _run(capsys, "scenarios", "--gpu", "A30")
    assert code == 0
    assert (
        "scenario 7: study scenario 7 (3x2g.20gb+1g.10gb) uses 7 compute slices but A30 has 4"
        in out
    )


def test_check_valid_layout_prints_placements(capsys: pytest.CaptureFixture[str]) -> None:
    """`check` exits 0 and prints the placements and the system ID."""
    code, out, _ = _run(capsys, "check", "A100-80GB", "3g.40gb+4x1g.10gb")
    assert code == 0
    assert "A100-SXM-80GB_MIG_1x3g.40gb+4x1g.10gb" in out and "4-7" in out


def test_check_accepts_a_system_id(capsys: pytest.CaptureFixture[str]) -> None:
    """`check SYSTEM_ID` validates the layout the ID names."""
    code, out, _ = _run(
        capsys, "check", "A100-SXM-80GB_MIG_1x4g.40gb+1x2g.20gb+1x1g.10gb", "--json"
    )
    assert code == 0 and json.loads(out)["layout"] == "4g.40gb+2g.20gb+1g.10gb"


def test_plan_mig_steps(capsys: pytest.CaptureFixture[str]) -> None:
    """`mig-setup` prints the nvidia-smi steps with explicit placements."""
    code, out, _ = _run(capsys, "mig-setup", "H200", "3x2g.35gb+1g.18gb")
    assert code == 0 and "-cgi 19:6 -C" in out


def test_plan_mig_mig_parted(capsys: pytest.CaptureFixture[str]) -> None:
    """`mig-setup --format mig-parted` prints a v1 config."""
    code, out, _ = _run(
        capsys, "mig-setup", "A100-80GB", "4g.40gb+3g.40gb", "--format", "mig-parted"
    )
    assert code == 0 and out.startswith("version: v1\nmig-configs:\n")


def test_detect_replays_a_recorded_state(capsys: pytest.CaptureFixture[str]) -> None:
    """`detect --replay FILE` prints the GPU and its MIG devices."""
    code, out, _ = _run(capsys, "detect", "--replay", str(FIXTURES / "a100-80gb-scenario7.json"))
    assert (
        code == 0
        and "3x2g.20gb+1g.10gb" in out
        and "MIG-c7384736-a75d-5afc-978f-d2f1294409fd" in out
    )


def test_detect_without_driver_prints_the_message(capsys: pytest.CaptureFixture[str]) -> None:
    """`detect` on a machine without a driver prints why and exits 0."""
    code, out, _ = _run(capsys, "detect", "--replay", str(FIXTURES / "no-driver.json"), "--json")
    assert code == 0 and "NVML could not start" in json.loads(out)["message"]


def test_detect_record_writes_a_replayable_state(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`detect --record FILE` writes a state that `--replay` reads back."""
    record = tmp_path / "state.json"
    main(["detect", "--record", str(record)])
    capsys.readouterr()
    code, _, err = _run(capsys, "detect", "--replay", str(record))
    assert record.is_file() and code == 0 and err == ""


def _bad_gpu_file(tmp_path: Path) -> str:
    text = (
        (SHIPPED / "a30.toml")
        .read_text()
        .replace("placement_starts = [0, 2]\n", "placement_starts = [0, 3]\n", 1)
    )
    (tmp_path / "broken.toml").write_text(text)
    return str(tmp_path)


BAD_INPUTS = {
    "unknown GPU": (["check", "RTX-4090", "1g.10gb"], "unknown GPU 'RTX-4090'; known GPUs:"),
    "unknown profile": (
        ["check", "A100-80GB", "5g.50gb"],
        "MIG profile '5g.50gb' does not exist on A100-SXM4-80GB",
    ),
    "another GPU's profile": (
        ["check", "H200", "3g.40gb"],
        "the 3-compute-slice profiles of H200-SXM5-141GB are 3g.71gb",
    ),
    "invalid layout": (["check", "A100-80GB", "4g.40gb+4g.40gb"], "allows at most 1"),
    "no window": (["check", "A100-80GB", "2x3g.40gb+1g.10gb"], "no memory window left for 1g.10gb"),
    "bad vGPU name": (
        ["check", "A100-80GB", "A100DX-2-99C"],
        "vGPU type 'A100DX-2-99C' maps to MIG profile 2g.99gb",
    ),
    "vGPU of another GPU": (
        ["mig-setup", "H200", "A100D-2-20C"],
        "belongs to A100-PCIE-80GB, not H200-SXM5-141GB",
    ),
    "malformed system ID": (
        ["check", "A100-SXM-80GB-1x4g.40gb"],
        "is not a MIG system ID; expected <GPU>_MIG_",
    ),
    "malformed layout string": (
        ["check", "A100-80GB", "2g.20gb++1g.10gb"],
        "has an empty entry at position 2",
    ),
    "unknown GPU in layouts": (["layouts", "V100"], "unknown GPU 'V100'"),
    "layout too big for plan": (["mig-setup", "A30", "3x2g.12gb"], "allows at most 2"),
    "negative GPU index": (
        ["mig-setup", "A100-80GB", "7g.80gb", "--gpu-index=-1"],
        "GPU index -1 is negative",
    ),
    "empty GPU for scenarios": (["scenarios", "--gpu", ""], "unknown GPU ''"),
    "empty systems path": (
        ["gpus", "--systems-path", ""],
        "GPU data path '' (from extra_paths) is empty",
    ),
    "empty replay file": (["detect", "--replay", ""], "not a readable NVML state"),
    "empty record file": (["detect", "--record", ""], "--record needs a file name"),
    "ambiguous shorthand": (
        ["check", "A100-80GB", "1g"],
        "'1g' is ambiguous on A100-SXM4-80GB: it could be 1g.10gb, 1g.20gb",
    ),
    "huge count": (
        ["check", "A100-80GB", "99999999999999999999x1g.10gb"],
        "has only 8 memory slices",
    ),
}


@pytest.mark.parametrize("case", BAD_INPUTS, ids=list(BAD_INPUTS))
def test_bad_input_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], case: str) -> None:
    """Each bad input prints one line naming the problem and the fix, and exits 2."""
    argv, message = BAD_INPUTS[case]
    code, out, err = _run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("mlperf-mig: error: ")
    assert message in err


def test_malformed_data_file_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A broken GPU file on the search path names the file and field, exit 2."""
    code, _, err = _run(capsys, "gpus", "--systems-path", _bad_gpu_file(tmp_path))
    assert code == 2 and err.count("\n") == 1
    assert "broken.toml: field profiles[2] (2g.12gb).placement_starts" in err


def test_missing_replay_file_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A replay file that does not exist is a data-file error, exit 2."""
    code, _, err = _run(capsys, "detect", "--replay", str(tmp_path / "none.json"))
    assert code == 2 and "record it again" in err


def test_record_into_a_folder_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`detect --record` naming a folder asks for a file name, exit 2."""
    code, _, err = _run(capsys, "detect", "--record", str(tmp_path))
    assert code == 2 and err.count("\n") == 1 and "is a folder; pass a file name" in err


def test_record_under_a_file_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`detect --record` under a regular file says the folder cannot be written, exit 2."""
    (tmp_path / "plain").write_text("")
    code, _, err = _run(capsys, "detect", "--record", str(tmp_path / "plain" / "state.json"))
    assert code == 2 and err.count("\n") == 1 and "cannot be written" in err


def test_replay_missing_a_field_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A recorded state with a field removed names the file and the field, exit 2."""
    state = json.loads((FIXTURES / "h200-7x1g.json").read_text())
    del state["gpus"][0]["name"]
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(state))
    code, _, err = _run(capsys, "detect", "--replay", str(path))
    assert code == 2 and err.count("\n") == 1
    assert "edited.json: not a recorded NVML state (gpus[0].name: expected text" in err


def test_detect_shows_a_mig_backed_vgpu(capsys: pytest.CaptureFixture[str]) -> None:
    """`detect` in an A100D-2-20C guest says it is one 2g.20gb instance of an A100 PCIe 80GB."""
    code, out, _ = _run(capsys, "detect", "--replay", str(FIXTURES / "vgpu-a100d-2-20c.json"))
    assert code == 0
    assert "MIG-backed vGPU A100D-2-20C = one 2g.20gb instance of A100-PCIE-80GB" in out


def test_detect_json_carries_the_vgpu(capsys: pytest.CaptureFixture[str]) -> None:
    """`detect --json` in a time-sliced guest carries the vGPU record with time_sliced true."""
    code, out, _ = _run(
        capsys, "detect", "--replay", str(FIXTURES / "vgpu-a100d-20c-time-sliced.json"), "--json"
    )
    vgpu = json.loads(out)["gpus"][0]["vgpu"]
    assert code == 0 and (vgpu["type_name"], vgpu["time_sliced"]) == ("A100D-20C", True)


def test_layouts_a30_maximal_lists_no_two_me_instances(capsys: pytest.CaptureFixture[str]) -> None:
    """`layouts A30 --maximal` no longer lists layouts holding two +me instances."""
    code, out, _ = _run(capsys, "layouts", "A30", "--maximal", "--json")
    layouts = [entry["layout"] for entry in json.loads(out)]
    assert code == 0 and "2g.12gb+me+1g.6gb+1g.6gb+me" not in layouts
    assert all(layout.count("+me") <= 1 for layout in layouts) and "2g.12gb+me+2x1g.6gb" in layouts


def test_detect_prints_each_discovery_note_once(tmp_path: Path) -> None:
    """A discovery note reaches the terminal once: detect prints it, and no log line repeats it
    on stderr."""
    import subprocess
    import sys

    state = json.loads((FIXTURES / "h100-mig-disabled.json").read_text())
    state["gpus"][0]["mig_mode"] = [1, 1]
    replay = tmp_path / "mig-on-not-supported.json"
    replay.write_text(json.dumps(state))
    done = subprocess.run(
        [sys.executable, "-m", "mlperf_mig", "detect", "--replay", str(replay)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    note = "every MIG profile query answered NOT_SUPPORTED with MIG on"
    assert (done.stdout + done.stderr).count(note) == 1
