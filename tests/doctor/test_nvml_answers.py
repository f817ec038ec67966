"""`detect` and `doctor` on the replay fixtures of NVML as a real driver answers (issue 36): a GPU
lost at its handle or at a later query, MIG on with every profile query NOT_SUPPORTED, a stuck
energy counter and a counter reset. Doctor reports a lost GPU, goes on with the rest, exits 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlperf_mig.cli import main
from mlperf_mig.doctor import diagnose
from mlperf_mig.doctor import report as doctor_report
from mlperf_mig.registry import RecordedNvml, detect

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = ROOT / "tests" / "registry" / "fixtures"
TELEMETRY = ROOT / "tests" / "telemetry" / "fixtures"
AT_HANDLE = REGISTRY / "lost-gpu-at-handle.json"
AT_QUERY = REGISTRY / "lost-gpu-at-query.json"
NOT_SUPPORTED = REGISTRY / "mig-on-profiles-not-supported.json"
STUCK = TELEMETRY / "h200-stuck-energy-counter-telemetry.json"
RESET = TELEMETRY / "h200-energy-counter-reset-telemetry.json"
FIX = "fix: look for an Xid error in `dmesg` and at `nvidia-smi -i {i}`, then reset the GPU as root (`nvidia-smi -r -i {i}`) or reboot"


def _doctor(capsys: pytest.CaptureFixture[str], replay: Path, *more: str) -> tuple[int, list[str]]:
    code = main(["doctor", "--replay", str(replay), "--no-smoke", *more])
    out, err = capsys.readouterr()
    assert err == ""
    return code, out.splitlines()


def _detect(capsys: pytest.CaptureFixture[str], replay: Path) -> tuple[int, list[str]]:
    code = main(["detect", "--replay", str(replay)])
    out, err = capsys.readouterr()
    assert err == ""
    return code, out.splitlines()


# --- a lost GPU -----------------------------------------------------------------------------
def test_doctor_reports_a_gpu_lost_at_its_handle_and_goes_on(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """GPU 1 lost at its handle: GPU 0 is reconciled, GPU 1 named with what failed and the fix,
    the backends and the smoke line still follow, exit 1."""
    code, lines = _doctor(capsys, AT_HANDLE)
    assert code == 1
    assert lines[1:4] == [
        "GPU 0 NVIDIA H200 (H200-SXM5-141GB): MIG on now, on pending",
        "GPU 0: catalog matches",
        "GPU 1 answered GPU_IS_LOST to nvmlDeviceGetHandleByIndex (it fell off the bus or the "
        f"driver lost it), so nothing can run on it; {FIX.format(i=1)}",
    ]
    assert any(line.startswith("onnxruntime ") for line in lines)
    assert "smoke: skipped (--no-smoke)" in lines


def test_doctor_reports_a_gpu_lost_at_a_later_query_and_goes_on(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """GPU 0 lost at nvmlDeviceGetMemoryInfo (its name kept), GPU 1 reconciled, exit 1."""
    code, lines = _doctor(capsys, AT_QUERY)
    assert code == 1
    assert lines[1:4] == [
        "GPU 0 (NVIDIA H200) answered GPU_IS_LOST to nvmlDeviceGetMemoryInfo (it fell off the "
        f"bus or the driver lost it), so nothing can run on it; {FIX.format(i=0)}",
        "GPU 1 NVIDIA H200 (H200-SXM5-141GB): MIG on now, on pending",
        "GPU 1: catalog matches",
    ]


def test_doctor_json_marks_the_lost_gpu_and_the_report_not_ok(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`doctor --json`: ok false, the lost GPU with its error, query, problem and verdict."""
    code = main(["doctor", "--replay", str(AT_HANDLE), "--no-smoke", "--json"])
    data = json.loads(capsys.readouterr().out)
    healthy, lost = data["gpus"]
    assert code == 1 and data["ok"] is False
    assert (healthy["error"], healthy["verdict"]) == (None, "catalog matches")
    assert (lost["index"], lost["error"], lost["verdict"]) == (
        1,
        "GPU_IS_LOST",
        "lost (GPU_IS_LOST): nothing to compare",
    )
    assert lost["problem"].startswith("GPU 1 answered GPU_IS_LOST to nvmlDeviceGetHandleByIndex")


def test_doctor_is_ok_when_no_gpu_is_lost() -> None:
    """The same two H200 with both GPUs read: the report is ok (exit 0)."""
    state = json.loads(AT_HANDLE.read_text(encoding="utf-8"))
    state["gpus"][1] = state["gpus"][0]
    assert diagnose(RecordedNvml(state), smoke=False, versions={}).ok


def test_the_smoke_test_says_when_every_gpu_is_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a machine whose only GPU is lost the GPU part of the smoke test is skipped, saying why."""
    state = json.loads(AT_HANDLE.read_text(encoding="utf-8"))
    state["gpus"] = state["gpus"][1:]
    detection = detect(RecordedNvml(state))
    monkeypatch.setattr(doctor_report, "smoke_all", lambda devices, backends: [])
    results, note = doctor_report._smoke(detection, [], replayed=False, enabled=True)
    assert (results, note) == ([], "GPU part skipped: every GPU is lost; the CPU reference ran")


@pytest.mark.parametrize(("replay", "lost"), [(AT_HANDLE, 1), (AT_QUERY, 0)])
def test_detect_on_a_lost_gpu_fixture_shows_both_gpus(
    capsys: pytest.CaptureFixture[str], replay: Path, lost: int
) -> None:
    """`detect` shows the lost GPU as a row among the healthy one's, exit 0."""
    code, lines = _detect(capsys, replay)
    states = {int(line.split()[0]): line for line in lines[2:4]}
    assert code == 0 and "lost: GPU_IS_LOST at nvmlDevice" in states[lost]
    assert " ok " in states[1 - lost] and states[1 - lost].endswith("7x1g.18gb")


# --- MIG on, every profile query NOT_SUPPORTED ----------------------------------------------
def test_detect_on_mig_on_with_profile_queries_not_supported(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`detect` says MIG on and what NVML answered, once."""
    code, lines = _detect(capsys, NOT_SUPPORTED)
    assert code == 0 and lines[2].split()[-3:] == ["on", "on", "-"]  # MIG now, pending, no layout
    assert lines[3:] == [
        "GPU 0: every MIG profile query answered NOT_SUPPORTED with MIG on; using the shipped table"
    ]


def test_doctor_on_mig_on_with_profile_queries_not_supported(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`doctor` says MIG on, that NVML listed no profile with MIG on, and the note; exit 0."""
    code, lines = _doctor(capsys, NOT_SUPPORTED)
    assert code == 0
    assert lines[1:4] == [
        "GPU 0 NVIDIA H100 80GB HBM3 (H100-SXM5-80GB): MIG on now, on pending",
        "GPU 0: no live MIG profiles to compare: NVML listed none with MIG on (see the notes)",
        "GPU 0: note: every MIG profile query answered NOT_SUPPORTED with MIG on; using the "
        "shipped table",
    ]


# --- energy counters ------------------------------------------------------------------------
@pytest.mark.parametrize("replay", [STUCK, RESET], ids=["stuck-counter", "counter-reset"])
def test_detect_on_an_energy_fixture_shows_the_h200(
    capsys: pytest.CaptureFixture[str], replay: Path
) -> None:
    """The energy fixtures are an H200 with 7x 1g.18gb to `detect`."""
    code, lines = _detect(capsys, replay)
    assert code == 0 and len(lines) == 3 + 1 + 2 + 7  # the GPU table, a blank line, 7 devices
    assert lines[2].split()[:4] == ["0", "NVIDIA", "H200", "ok"] and lines[2].endswith("7x1g.18gb")


@pytest.mark.parametrize("replay", [STUCK, RESET], ids=["stuck-counter", "counter-reset"])
def test_doctor_on_an_energy_fixture_says_what_telemetry_measures(
    capsys: pytest.CaptureFixture[str], replay: Path
) -> None:
    """`doctor` on the energy fixtures: the catalog matches and the GPU measures board power and
    the energy counter (whether the counter is sane is the run summary's check), exit 0."""
    code, lines = _doctor(capsys, replay)
    assert code == 0 and "GPU 0: catalog matches" in lines
    (measures,) = [line for line in lines if line.startswith("telemetry: GPU 0 NVIDIA H200")]
    assert "measures power_w, energy_j" in measures and "GPM: supported" in measures
