"""What this machine can measure, and the short recording doctor puts in its bundle."""

from __future__ import annotations

import pynvml
import pytest

from mlperf_mig.doctor import diagnose
from mlperf_mig.registry.replay import RecordedNvml
from mlperf_mig.telemetry.nvml import Device, NvmlReadings
from mlperf_mig.telemetry.record import capabilities, capability_lines, record_telemetry
from mlperf_mig.telemetry.replay import RecordedTelemetry

from .conftest import load_state


def test_capabilities_say_which_gpu_has_gpm(replay):
    """An H200 reports GPM per instance; an A100 says it has none and why."""
    assert capabilities(replay("h200-7x1g-telemetry"))["gpus"][0]["gpm"] == "supported"
    a100 = capabilities(replay("a100-80gb-scenario7-telemetry"))["gpus"][0]
    assert a100["gpm"].startswith("not supported") and "energy_j" in a100["measured"]


def test_a_state_without_telemetry_says_so():
    """A recorded state without telemetry is not taken for a GPU that measures nothing."""
    found = capabilities(RecordedNvml(load_state("h200-7x1g-telemetry") | {"telemetry": None}))
    assert "holds no telemetry" in found["gpu_note"] and found["gpus"] == []


def test_a_recording_replays_what_was_read(replay, clock):
    """The recorded section replays: the same power and GPM activity come back through NVML's calls."""
    source = replay("h200-7x1g-telemetry")
    recorded = record_telemetry(source, seconds=0.3, interval_s=0.1, sleep=clock.advance)
    state = load_state("h200-7x1g-telemetry") | {"telemetry": recorded}
    again = RecordedTelemetry(state, clock=clock)
    mig = state["gpus"][0]["mig_devices"][0]["uuid"]
    readings = NvmlReadings.open(again, [Device("i0", mig)])
    row = readings.read()
    assert row["gpu0:power_w"] == recorded["gpus"]["0"]["power_mw"][0] / 1000
    assert recorded["mig_devices"][mig]["sm_active_pct"]


def test_doctor_reports_what_telemetry_measures(replay):
    """doctor's text has a telemetry line per GPU and one for the host."""
    text = diagnose(replay("a100-80gb-scenario7-telemetry"), smoke=False).text()
    assert "telemetry: GPU 0 NVIDIA A100-SXM4-80GB: measures power_w" in text
    assert "telemetry: DCGM Python bindings" in text


def test_capability_lines_name_what_is_not_measured(replay):
    """A quantity the GPU does not offer is named with NVML's reason."""

    def no_power(state):
        state["telemetry"]["gpus"]["0"]["power_mw"] = "NOT_SUPPORTED"

    lines = capability_lines(capabilities(replay("a100-80gb-scenario7-telemetry", no_power)))
    assert any("power_w: NOT_SUPPORTED" in line for line in lines)


@pytest.mark.nvml
def test_live_gpus_record_board_power_and_the_energy_counter():
    """On a real GPU: every GPU reports power and an energy counter that does not go backwards."""
    recorded = record_telemetry(pynvml, seconds=0.5)
    assert recorded is not None
    for gpu in recorded["gpus"].values():
        assert min(gpu["power_mw"]) > 0 and gpu["energy_mj_at_init"] > 0


@pytest.mark.nvml
def test_live_mig_devices_report_memory_and_gpm_where_supported():
    """On a real MIG GPU: each MIG device has memory used; GPM metrics where the GPU has GPM."""
    found = capabilities(pynvml)
    recorded = record_telemetry(pynvml, seconds=0.5)
    assert recorded is not None
    if not recorded["mig_devices"]:
        pytest.skip("no MIG device on this machine's GPUs: nothing to check (create a layout)")
    for uuid, series in recorded["mig_devices"].items():
        assert "memory_used_mib" in series, uuid
    if any(g["gpm"] == "supported" for g in found["gpus"]) and recorded["mig_devices"]:
        assert any("sm_active_pct" in s for s in recorded["mig_devices"].values())
