"""A GPU NVML cannot read (GPU_IS_LOST, UNKNOWN, NOT_FOUND) is one GPU in an error state: the
others are read, `detect` shows it as a row, a run that asks for it is refused naming it, and a
recorded state keeps the error so that it replays. Replay files are checked as untrusted input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pynvml
import pytest

from mlperf_mig.cli import main
from mlperf_mig.errors import PlacementError
from mlperf_mig.registry import Catalog, RecordedNvml, detect, read_nvml_state, usable_devices
from mlperf_mig.registry.devices import refuse_lost_gpu
from mlperf_mig.registry.replay import nvml_error

FIXTURES = Path(__file__).parent / "fixtures"
AT_HANDLE = FIXTURES / "lost-gpu-at-handle.json"
AT_QUERY = FIXTURES / "lost-gpu-at-query.json"
PROBLEM_AT_HANDLE = (
    "GPU 1 answered GPU_IS_LOST to nvmlDeviceGetHandleByIndex (it fell off the bus or the driver "
    "lost it), so nothing can run on it; fix: look for an Xid error in `dmesg` and at "
    "`nvidia-smi -i 1`, then reset the GPU as root (`nvidia-smi -r -i 1`) or reboot"
)
PROBLEM_AT_QUERY = (
    "GPU 0 (NVIDIA H200) answered GPU_IS_LOST to nvmlDeviceGetMemoryInfo (it fell off the bus or "
    "the driver lost it), so nothing can run on it; fix: look for an Xid error in `dmesg` and at "
    "`nvidia-smi -i 0`, then reset the GPU as root (`nvidia-smi -r -i 0`) or reboot"
)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _state(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


# --- discovery ------------------------------------------------------------------------------
def test_a_gpu_lost_at_its_handle_leaves_the_other_gpu_whole(catalog: Catalog) -> None:
    """GPU 1 answers GPU_IS_LOST to its handle: GPU 0 keeps its 7 MIG devices, GPU 1 is a GPU
    in an error state with its index, the error and the query."""
    healthy, lost = detect(RecordedNvml.from_file(AT_HANDLE), catalog=catalog).gpus
    assert (healthy.lost, str(healthy.layout()), len(usable_devices(healthy))) == (
        False,
        "7x1g.18gb",
        7,
    )
    assert (lost.index, lost.error, lost.failed_query, lost.name) == (
        1,
        "GPU_IS_LOST",
        "nvmlDeviceGetHandleByIndex",
        "",
    )
    assert lost.problem == PROBLEM_AT_HANDLE


def test_a_gpu_lost_at_a_later_query_keeps_what_it_answered(catalog: Catalog) -> None:
    """GPU 0 answered its name, UUID and PCI ID, then GPU_IS_LOST to its memory: those are kept."""
    lost, healthy = detect(RecordedNvml.from_file(AT_QUERY), catalog=catalog).gpus
    assert (lost.name, lost.pci_device_id, lost.memory_mib) == ("NVIDIA H200", 0x233510DE, None)
    assert lost.problem == PROBLEM_AT_QUERY and not healthy.lost


@pytest.mark.parametrize("path", [AT_HANDLE, AT_QUERY], ids=["at-handle", "at-query"])
def test_a_recorded_lost_gpu_replays_as_recorded(path: Path) -> None:
    """Recording a replayed state with a lost GPU gives the same GPUs back: the error replays."""
    state = _state(path)
    assert read_nvml_state(RecordedNvml.from_file(path))["gpus"] == state["gpus"]


def test_a_gpu_lost_during_its_profile_queries_is_lost_not_without_profiles(
    load_state, catalog: Catalog
) -> None:
    """GPU_IS_LOST from a MIG profile query makes the GPU lost at that query; it is not taken as
    'every MIG profile query answered GPU_IS_LOST'."""

    class LostInProfiles(RecordedNvml):
        def nvmlDeviceGetGpuInstanceProfileInfo(self, *args: Any, **kwargs: Any) -> None:
            raise nvml_error("GPU_IS_LOST")

    state = read_nvml_state(LostInProfiles(load_state("h200-7x1g")))
    (gpu,) = state["gpus"]
    assert (gpu["error"], gpu["failed_query"], gpu["mig_mode"]) == (
        "GPU_IS_LOST",
        "nvmlDeviceGetGpuInstanceProfileInfo",
        [1, 1],
    )
    assert "gi_profiles" not in gpu and "gi_profile_error" not in gpu


def test_a_gpu_lost_at_its_placements_is_lost_at_that_query(load_state) -> None:
    """GPU_IS_LOST from a placement query makes the GPU lost there; it is not recorded as a
    profile whose placements could not be read."""

    class LostInPlacements(RecordedNvml):
        def nvmlDeviceGetGpuInstancePossiblePlacements(self, *args: Any) -> None:
            raise nvml_error("UNKNOWN")

    (gpu,) = read_nvml_state(LostInPlacements(load_state("h200-7x1g")))["gpus"]
    assert (gpu["error"], gpu["failed_query"]) == (
        "UNKNOWN",
        "nvmlDeviceGetGpuInstancePossiblePlacements",
    )


def test_a_lost_gpu_offers_no_device_and_a_run_on_it_is_refused(catalog: Catalog) -> None:
    """A lost GPU has no usable device; asking to run on it is a PlacementError naming it."""
    lost = detect(RecordedNvml.from_file(AT_QUERY), catalog=catalog).gpus[0]
    assert usable_devices(lost) == ()
    with pytest.raises(
        PlacementError,
        match=r"^GPU 0 \(NVIDIA H200\) cannot run the layout: it answered GPU_IS_LOST",
    ):
        refuse_lost_gpu(lost)


# --- detect ---------------------------------------------------------------------------------
def test_detect_shows_the_gpu_lost_at_its_handle_as_a_row(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`detect` lists both GPUs, the lost one with its state, then says what failed and the fix."""
    code, out, err = _run(capsys, "detect", "--replay", str(AT_HANDLE))
    rows = out.splitlines()
    assert code == 0 and err == ""
    assert rows[2].split()[:4] == ["0", "NVIDIA", "H200", "ok"]
    assert rows[3].split()[:4] == ["1", "-", "lost:", "GPU_IS_LOST"]
    assert "nvmlDeviceGetHandleByIndex" in rows[3]
    assert len([row for row in rows if " MIG-" in row]) == 7 and rows[-1] == PROBLEM_AT_HANDLE


def test_detect_shows_the_gpu_lost_at_a_later_query_as_a_row(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`detect` shows GPU 0 lost at nvmlDeviceGetMemoryInfo, its name kept, and GPU 1 whole."""
    code, out, _ = _run(capsys, "detect", "--replay", str(AT_QUERY))
    rows = out.splitlines()
    assert code == 0
    assert rows[2].split()[:5] == ["0", "NVIDIA", "H200", "lost:", "GPU_IS_LOST"]
    assert rows[3].split()[:4] == ["1", "NVIDIA", "H200", "ok"]
    assert rows[-1] == PROBLEM_AT_QUERY


def test_detect_json_carries_the_error(capsys: pytest.CaptureFixture[str]) -> None:
    """`detect --json` gives the lost GPU's error, query and problem; the healthy one null ones."""
    code, out, _ = _run(capsys, "detect", "--replay", str(AT_QUERY), "--json")
    lost, healthy = json.loads(out)["gpus"]
    assert code == 0
    assert (lost["error"], lost["failed_query"], lost["memory_mib"]) == (
        "GPU_IS_LOST",
        "nvmlDeviceGetMemoryInfo",
        None,
    )
    assert lost["problem"] == PROBLEM_AT_QUERY
    assert (healthy["error"], healthy["problem"], healthy["layout"]) == (None, None, "7x1g.18gb")


def test_detect_record_keeps_the_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`detect --record` on a machine with a lost GPU writes the error into the state."""
    import mlperf_mig.registry.discovery as discovery

    machine = RecordedNvml(_state(AT_HANDLE))
    monkeypatch.setattr(discovery, "read_nvml_state", lambda source=None: read_nvml_state(machine))
    record = tmp_path / "state.json"
    code, out, _ = _run(capsys, "detect", "--record", str(record))
    assert code == 0 and PROBLEM_AT_HANDLE in out
    assert _state(record)["gpus"][1] == {
        "error": "GPU_IS_LOST",
        "failed_query": "nvmlDeviceGetHandleByIndex",
    }


# --- plan and run -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "--scenario", "8"],
        ["plan", "--scenario", "8", "--gpus", "0"],
        ["plan", "--scenario", "8", "--gpus", "all"],
        ["run", "--scenario", "8", "--gpus", "0", "--backend", "null"],
    ],
    ids=["plan-default-gpu-0", "plan-gpus-0", "plan-gpus-all", "run-gpus-0"],
)
def test_a_run_that_asks_for_the_lost_gpu_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], tmp_path: Path
) -> None:
    """plan or run on the lost GPU 0 (by default, by index, or among all) is one line naming it,
    exit 2, and nothing runs."""
    code, out, err = _run(
        capsys, *argv, "--nvml-state", str(AT_QUERY), "--outdir", str(tmp_path / "run")
    )
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith(
        "mlperf-mig: error: GPU 0 (NVIDIA H200) cannot run the layout: it answered GPU_IS_LOST to "
        "nvmlDeviceGetMemoryInfo"
    )
    assert "select them with --gpus" in err and not (tmp_path / "run").exists()


def test_a_plan_on_the_healthy_gpu_goes_on(capsys: pytest.CaptureFixture[str]) -> None:
    """With GPU 0 lost, a plan that asks for GPU 1 is made for its live 7x 1g.18gb."""
    code, out, err = _run(
        capsys, "plan", "--scenario", "8", "--gpus", "1", "--nvml-state", str(AT_QUERY)
    )
    assert code == 0 and err == ""
    assert "MIG layout 7x1g.18gb on H200-SXM5-141GB (mig)" in out


# --- replay files are untrusted ---------------------------------------------------------------
def _edited(state: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    target = state
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return state


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (
            ("gpus", 1, "error"),
            "EXPLODED",
            "gpus[1].error: expected one of GPU_IS_LOST, UNKNOWN, NOT_FOUND",
        ),
        (
            ("gpus", 1, "failed_query"),
            "os.system",
            "gpus[1].failed_query: expected an NVML function",
        ),
        (("gpus", 0, "name"), 3, "gpus[0].name: expected text"),
        (("gpus", 0, "name"), "x" * 300, "gpus[0].name: expected text of at most 256 characters"),
        (("gpus", 0, "pci_device_id"), "0xZZ", "gpus[0].pci_device_id: expected a hex number"),
        (
            ("gpus", 0, "memory_total_bytes"),
            -1,
            "gpus[0].memory_total_bytes: expected a whole number",
        ),
        (("gpus", 0, "mig_mode"), [2, 0], "gpus[0].mig_mode: expected null or [current, pending]"),
        (
            ("gpus", 0, "mig_devices", 0, "uuid"),
            ["MIG-"],
            "gpus[0].mig_devices[0].uuid: expected text",
        ),
        (
            ("gpus", 0, "mig_devices", 0, "gpu_instance_id"),
            True,
            "gpu_instance_id: expected a whole number",
        ),
        (
            ("gpus", 0, "gi_profiles", 0, "placements"),
            [[0]],
            "gi_profiles[0].placements[0]: expected [start, size]",
        ),
        (
            ("gpus", 0, "gi_profile_error"),
            "\x1b[2J",
            "gpus[0].gi_profile_error: expected an NVML error name",
        ),
        (("cuda_driver_version",), "12.4", "cuda_driver_version: expected a whole number"),
        (("nvml_version",), 12, "the state.nvml_version: expected text"),
        (("init_error",), "no driver", "init_error: expected an NVML error name"),
        (("gpus", 0), "GPU 0", "gpus[0]: expected an object"),
        (
            ("gpus", 0, "gi_profiles", 0, "placements"),
            [[0, "4"]],
            "placements[0][1]: expected a whole",
        ),
        (("gpus",), {"0": {}}, "gpus: expected a list"),
    ],
)
def test_a_hostile_replay_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    path: tuple[Any, ...],
    value: Any,
    message: str,
) -> None:
    """A replay field of the wrong kind is refused naming the file and the field, exit 2, no
    traceback and no raw control character."""
    replay = tmp_path / "hostile.json"
    replay.write_text(json.dumps(_edited(_state(AT_HANDLE), path, value)))
    code, out, err = _run(capsys, "detect", "--replay", str(replay))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "hostile.json: not a recorded NVML state (" in err and message in err
    assert "\x1b" not in err


def test_the_nvml_error_names_are_pynvml_s() -> None:
    """The lost-GPU answers are NVML's own error codes (pynvml names them)."""
    assert {
        pynvml.NVML_ERROR_GPU_IS_LOST,
        pynvml.NVML_ERROR_UNKNOWN,
        pynvml.NVML_ERROR_NOT_FOUND,
    } == {15, 999, 6}
