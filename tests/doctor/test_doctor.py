"""`mlperf-mig doctor`: recorded states reconciled with the catalog, the install checks, the bundle,
and the real CPU path end to end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mlperf_mig.cli import main
from mlperf_mig.doctor import diagnose, write_bundle
from mlperf_mig.doctor.install import (
    INSTALL_COMMANDS,
    install_command,
    wheel_cuda_majors,
    wheel_problems,
)
from mlperf_mig.doctor.reconcile import MATCHES, FieldDifference
from mlperf_mig.doctor.smoke import SmokeDevice, _result, read_child_output, run_child
from mlperf_mig.errors import DataFileError
from mlperf_mig.registry import RecordedNvml, default_catalog, detect

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "registry" / "fixtures"
NO_GPU_WHEELS = {"onnxruntime": "1.32.0"}


def _state(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def _diagnose(state: dict[str, Any]):
    return diagnose(RecordedNvml(state), smoke=False, versions=NO_GPU_WHEELS)


def _profile_entry(state: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in state["gpus"][0]["gi_profiles"] if p["name"] == f"MIG {name}")


# --- recorded states ------------------------------------------------------------------------
def test_a100_carrying_layout_7_matches_the_catalog() -> None:
    """The recorded A100 80GB with study layout 7 agrees with the shipped table."""
    (gpu,) = _diagnose(_state("a100-80gb-scenario7")).gpus
    assert (gpu.differences, gpu.verdict) == ((), MATCHES)


def test_one_changed_field_is_reported_with_both_values() -> None:
    """An A100 80GB whose 2g.20gb reports 30 SMs: the one difference, ours 28 and live 30."""
    state = _state("a100-80gb-scenario7")
    _profile_entry(state, "2g.20gb")["multiprocessorCount"] = 30
    report = _diagnose(state)
    (gpu,) = report.gpus
    assert gpu.differences == (FieldDifference(profile="2g.20gb", field="sms", ours=28, live=30),)
    assert "1 field(s) differ: 2g.20gb sms ours 28 live 30" in report.text()


def test_changed_placements_are_reported() -> None:
    """Live placement starts that differ from the table are one difference with both lists."""
    state = _state("a100-80gb-scenario7")
    _profile_entry(state, "3g.40gb")["placements"] = [[4, 4]]
    (gpu,) = _diagnose(state).gpus
    assert [(d.field, d.ours, d.live) for d in gpu.differences] == [
        ("placement_starts", (0, 4), (4,))
    ]


def test_a_profile_the_driver_lacks_is_a_difference() -> None:
    """A shipped profile the driver does not offer is reported as present in ours only."""
    state = _state("a100-80gb-scenario7")
    state["gpus"][0]["gi_profiles"] = [
        p for p in state["gpus"][0]["gi_profiles"] if p["name"] != "MIG 1g.20gb"
    ]
    (gpu,) = _diagnose(state).gpus
    assert gpu.differences == (
        FieldDifference(profile="1g.20gb", field="profile", ours="present", live=None),
    )


def test_h100_with_mig_off_says_there_is_nothing_to_compare() -> None:
    """An H100 with MIG off on a driver that lists no profiles: MIG off now and pending, no verdict."""
    report = _diagnose(_state("h100-mig-disabled"))
    (gpu,) = report.gpus
    assert (gpu.mig_current, gpu.mig_pending, gpu.live_profiles) == (False, False, 0)
    assert "no live MIG profiles to compare" in gpu.verdict
    assert "MIG off now, off pending" in report.text()


def test_vgpu_guest_is_named_with_its_profile() -> None:
    """In an A100D-2-20C guest doctor says it is a MIG-backed vGPU of one 2g.20gb instance."""
    report = _diagnose(_state("vgpu-a100d-2-20c"))
    assert report.gpus[0].vgpu["profile"] == "2g.20gb"
    assert (
        "inside a VM: vGPU A100D-2-20C, MIG-backed, one 2g.20gb instance of A100-PCIE-80GB"
        in report.text()
    )


def test_no_driver_is_one_line_first() -> None:
    """Without a driver the report starts with the one line saying so and lists no GPU."""
    report = _diagnose(_state("no-driver"))
    assert report.gpus == () and report.text().splitlines()[0].startswith(
        "no NVIDIA GPU is usable here"
    )


def test_versions_of_the_driver_are_reported() -> None:
    """The driver, CUDA and NVML versions come from the recorded state."""
    report = _diagnose(_state("h200-7x1g"))
    assert (report.driver_version, report.cuda_driver_version, report.nvml_version) == (
        "570.133.20",
        "12.8",
        "12.570.133.20",
    )


# --- the install ------------------------------------------------------------------------------
def test_a_cuda_13_wheel_on_a_cuda_12_driver_names_the_fix() -> None:
    """tensorrt-cu13 and cuda-python 13 on a CUDA 12.4 driver: both reported, fix = the CUDA 12 command."""
    problems = wheel_problems((12, 4), {"tensorrt-cu13": "11.4.0.106", "cuda-python": "13.0.0"})
    assert [p.problem.split()[0] for p in problems] == ["cuda-python", "tensorrt-cu13"]
    assert {p.fix for p in problems} == {INSTALL_COMMANDS[12]}


def test_cuda_12_wheels_run_on_a_cuda_13_driver() -> None:
    """Older CUDA majors than the driver's are not a problem."""
    assert wheel_problems((13, 0), {"tensorrt-cu12": "10.13.3.9", "cuda-python": "12.9.0"}) == []


def test_onnxruntime_gpu_cuda_major_follows_its_release() -> None:
    """onnxruntime-gpu is a CUDA 12 build up to 1.26 and a CUDA 13 build from 1.27."""
    assert wheel_cuda_majors({"onnxruntime-gpu": "1.26.0"}) == {"onnxruntime-gpu": 12}
    assert wheel_cuda_majors({"onnxruntime-gpu": "1.27.0"}) == {"onnxruntime-gpu": 13}


def test_both_onnxruntime_packages_are_a_problem() -> None:
    """onnxruntime next to onnxruntime-gpu is reported with the install command."""
    (problem,) = wheel_problems((12, 8), {"onnxruntime": "1.32.0", "onnxruntime-gpu": "1.26.0"})
    assert "both installed" in problem.problem and problem.fix == INSTALL_COMMANDS[12]


def test_the_mismatch_reaches_the_report() -> None:
    """diagnose reports a CUDA 13 TensorRT wheel against the recorded CUDA 12.4 driver."""
    report = diagnose(
        RecordedNvml(_state("a100-80gb-scenario7")),
        smoke=False,
        versions={"tensorrt-cu13": "11.4.0.106"},
    )
    assert (
        f"install problem: tensorrt-cu13 11.4.0.106 is built for CUDA 13, but the driver supports CUDA 12.4; fix: {INSTALL_COMMANDS[12]}"
        in report.text()
    )


@pytest.mark.parametrize(("cuda_major", "command"), [(12, 12), (13, 13), (14, 13), (None, 13)])
def test_install_command_follows_the_driver(cuda_major: int | None, command: int) -> None:
    """A CUDA 12 or 13 driver gets its own command; a newer or unknown one the newest command."""
    assert install_command(cuda_major) == INSTALL_COMMANDS[command]


def test_readme_names_both_install_commands() -> None:
    """The manual's "Running on a real GPU" page carries the commands doctor names, verbatim."""
    page = (ROOT / "docs" / "real-gpu.md").read_text(encoding="utf-8")
    assert all(command in page for command in INSTALL_COMMANDS.values())


# --- the bundle -------------------------------------------------------------------------------
def test_bundle_hides_uuids_and_still_replays(tmp_path: Path) -> None:
    """Without --include-ids no UUID of the state is in the bundle, and the state replays the same layout."""
    state = _state("a100-80gb-scenario7")
    write_bundle(_diagnose(state), tmp_path, include_ids=False)
    text = (tmp_path / "nvml-state.json").read_text() + (tmp_path / "doctor.json").read_text()
    uuids = [state["gpus"][0]["uuid"], *(d["uuid"] for d in state["gpus"][0]["mig_devices"])]
    assert not any(uuid in text for uuid in uuids)
    replayed = detect(
        RecordedNvml.from_file(tmp_path / "nvml-state.json"), catalog=default_catalog()
    )
    assert str(replayed.gpus[0].layout()) == "3x2g.20gb+1g.10gb"


def test_bundle_with_include_ids_keeps_them(tmp_path: Path) -> None:
    """With --include-ids the GPU UUID stays in the recorded state."""
    state = _state("a100-80gb-scenario7")
    write_bundle(_diagnose(state), tmp_path, include_ids=True)
    assert state["gpus"][0]["uuid"] in (tmp_path / "nvml-state.json").read_text()


# --- the smoke test ---------------------------------------------------------------------------
def test_outputs_beyond_tolerance_fail_the_smoke_test() -> None:
    """A device whose outputs differ from the CPU reference by more than the tolerance fails."""
    target = SmokeDevice(
        label="GPU 0 mig 1g.10gb", gpu="A100-SXM4-80GB", profile="1g.10gb", uuid="MIG-x"
    )
    summary = {"samples_per_s": 10.0, "validity": "VALID", "ran_on": "tensorrt MIG-x"}
    reference = np.full((8, 1001), 1 / 1001, dtype=np.float32)
    result = _result(target, "tensorrt", summary, None, (reference + 0.01, reference))
    assert not result.ok and result.outputs_match is False and "DIFFER" in result.line()


def test_a_child_that_fails_is_one_error_line(tmp_path: Path) -> None:
    """A smoke child that cannot run gives its last error line, not an exception."""
    summary, outputs, error = run_child(
        "no-such-backend", SmokeDevice(label="CPU", gpu=None, profile=None, uuid=None), tmp_path
    )
    assert summary is None and outputs is None and "unknown backend 'no-such-backend'" in error


def _child_output(folder: Path, summary: object, outputs: np.ndarray | None) -> Path:
    folder.mkdir(exist_ok=True)
    (folder / "smoke.json").write_text(json.dumps(summary))
    if outputs is not None:
        np.save(folder / "softmax.npy", outputs)
    return folder


GOOD_SUMMARY = {"samples_per_s": 12.5, "validity": "VALID", "ran_on": "CPUExecutionProvider cpu"}
GOOD_OUTPUTS = np.full((8, 1001), 1 / 1001, dtype=np.float32)


def test_a_childs_output_is_read_back_checked(tmp_path: Path) -> None:
    """A well-formed smoke.json and softmax.npy read back; control characters in the child's
    texts are escaped before they reach a terminal."""
    summary = {**GOOD_SUMMARY, "ran_on": "CPU\x1b[2J"}
    read, outputs = read_child_output(_child_output(tmp_path / "c", summary, GOOD_OUTPUTS))
    assert read["samples_per_s"] == 12.5 and "\x1b" not in read["ran_on"]
    assert outputs.shape == (8, 1001)


@pytest.mark.parametrize(
    ("summary", "outputs", "message"),
    [
        ({**GOOD_SUMMARY, "samples_per_s": "fast"}, GOOD_OUTPUTS, "lacks a finite samples_per_s"),
        ({**GOOD_SUMMARY, "ran_on": 3}, GOOD_OUTPUTS, "the texts validity and ran_on"),
        ([1, 2], GOOD_OUTPUTS, "lacks a finite samples_per_s"),
        (GOOD_SUMMARY, None, "softmax.npy' is not a regular file"),
        (GOOD_SUMMARY, np.zeros((3, 4), dtype=np.float64), "not float32 rows of 8 samples"),
        (GOOD_SUMMARY, np.array([{"a": 1}] * 8, dtype=object), "is not a NumPy array"),
    ],
)
def test_a_damaged_child_output_is_one_line(
    tmp_path: Path, summary: object, outputs: np.ndarray | None, message: str
) -> None:
    folder = _child_output(tmp_path / "c", summary, outputs)
    with pytest.raises(DataFileError, match=message) as caught:
        read_child_output(folder)
    assert "\n" not in str(caught.value) and "run doctor again" in str(caught.value)


def test_a_linked_child_output_is_not_followed(tmp_path: Path) -> None:
    """smoke.json as a symbolic link out of the child's folder is refused, not read."""
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps(GOOD_SUMMARY))
    folder = tmp_path / "c"
    folder.mkdir()
    (folder / "smoke.json").symlink_to(outside)
    np.save(folder / "softmax.npy", GOOD_OUTPUTS)
    with pytest.raises(DataFileError, match="symbolic link"):
        read_child_output(folder)


def test_outputs_of_another_shape_fail_without_an_exception() -> None:
    """A device whose outputs have another shape than the reference fails with that reason."""
    target = SmokeDevice(label="GPU 0", gpu="A100-SXM4-80GB", profile=None, uuid="GPU-x")
    result = _result(target, "tensorrt", GOOD_SUMMARY, None, (GOOD_OUTPUTS[:, :1000], GOOD_OUTPUTS))
    assert not result.ok and "shape (8, 1000), the CPU reference's (8, 1001)" in result.line()


# --- the CLI ----------------------------------------------------------------------------------
@pytest.mark.slow
def test_doctor_on_this_cpu_machine_end_to_end(capsys: pytest.CaptureFixture[str]) -> None:
    """Without a GPU: one line saying so, the CPU reference smoke run, the GPU part skipped, exit 0."""
    from tests.conftest import nvml_finds_a_gpu

    if nvml_finds_a_gpu():
        pytest.skip("this machine has a GPU; the GPU path is test_doctor_on_a_gpu")
    code = main(["doctor"])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0 and lines[0].startswith("no NVIDIA GPU is usable here")
    assert any(line.startswith("smoke: CPU onnxruntime on CPUExecutionProvider") for line in lines)
    assert "smoke: GPU part skipped: no GPU on this machine; the CPU reference ran" in lines


def test_doctor_json_on_a_replayed_state(capsys: pytest.CaptureFixture[str]) -> None:
    """`doctor --replay FILE --json --no-smoke` prints the reconciliation as JSON."""
    code = main(
        ["doctor", "--replay", str(FIXTURES / "a100-80gb-scenario7.json"), "--json", "--no-smoke"]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["gpus"][0]["verdict"] == MATCHES


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--include-ids"], "--include-ids only changes what --record writes"),
        (["--record", ""], "--record needs a folder name"),
        (["--replay", ""], "--replay needs a file name"),
    ],
)
def test_bad_options_are_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Options that make no sense are one line on stderr and exit 2."""
    code = main(["doctor", *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


@pytest.mark.gpu
def test_doctor_on_a_gpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """On a GPU every smoke test passes (outputs match the CPU reference) and the bundle is written."""
    code = main(["doctor", "--record", str(tmp_path / "bundle")])
    out = capsys.readouterr().out
    assert code == 0, out
    report = json.loads((tmp_path / "bundle" / "doctor.json").read_text())
    assert report["ok"] and len(report["smoke"]) > 1, out
