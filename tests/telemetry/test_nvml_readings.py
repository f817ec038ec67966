"""NVML readings through the recorded replay: units, MIG conventions, GPM, NOT_SUPPORTED."""

from __future__ import annotations

from typing import Any

import pynvml
import pytest

from mlperf_mig.telemetry.nvml import Device, NvmlReadings, reason_names


def _devices(source: Any) -> list[Device]:
    return [
        Device(f"i{i}", m["uuid"]) for i, m in enumerate(source.state["gpus"][0]["mig_devices"])
    ]


def test_power_and_energy_are_converted_from_milli_units(replay, clock):
    """Board power comes in mW and the energy counter in mJ; the readings are W and J."""
    source = replay("h200-7x1g-telemetry")
    readings = NvmlReadings.open(source, _devices(source)[:1])
    row = readings.read()
    gpu = source.state["telemetry"]["gpus"]["0"]
    assert row["gpu0:power_w"] == gpu["power_mw"][0] / 1000
    assert row["gpu0:energy_j"] == gpu["energy_mj_at_init"] / 1000


def test_whole_gpu_utilisation_is_not_asked_on_a_mig_enabled_gpu(replay):
    """NVML answers NOT_SUPPORTED for whole-GPU utilisation under MIG: no column, and said why."""
    source = replay("h200-7x1g-telemetry")
    readings = NvmlReadings.open(source, _devices(source))
    assert "gpu0:util_pct" not in readings.columns()
    assert "NOT_SUPPORTED" in readings.missing["gpu0:util_pct"]


def test_the_fake_refuses_whole_gpu_utilisation_under_mig(replay):
    """The replay keeps NVML's convention: nvmlDeviceGetUtilizationRates is NOT_SUPPORTED on MIG."""
    source = replay("h200-7x1g-telemetry")
    source.nvmlInit()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        source.nvmlDeviceGetUtilizationRates(source.nvmlDeviceGetHandleByIndex(0))


def test_gpm_gives_each_gpu_instance_its_sm_activity(replay, clock):
    """On a GPU with GPM each instance has SM activity, occupancy and DRAM bandwidth columns,
    read between the previous GPM sample and a new one."""
    source = replay("h200-7x1g-telemetry")
    readings = NvmlReadings.open(source, _devices(source)[:2])
    clock.advance(0.35)  # step 3 of the recorded sequences
    row = readings.read()
    expected = source.state["telemetry"]["mig_devices"][
        source.state["gpus"][0]["mig_devices"][1]["uuid"]
    ]
    assert row["i1:sm_active_pct"] == pytest.approx(expected["sm_active_pct"][3])
    assert row["i1:dram_bw_pct"] == pytest.approx(expected["dram_bw_pct"][3])


def test_gpm_metrics_need_two_samples(replay):
    """The replay refuses GPM metrics from one sample, as NVML does."""
    source = replay("h200-7x1g-telemetry")
    source.nvmlInit()
    gpu = source.nvmlDeviceGetHandleByIndex(0)
    sample = source.nvmlGpmMigSampleGet(gpu, 7, source.nvmlGpmSampleAlloc())
    request = pynvml.c_nvmlGpmMetricsGet_t()
    request.numMetrics = 1
    request.sample1 = request.sample2 = sample
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        source.nvmlGpmMetricsGet(request)


def test_a_gpu_without_gpm_has_no_activity_columns_and_says_so(replay):
    """An A100 (no GPM) reports memory per instance only, and why there is no SM activity."""
    source = replay("a100-80gb-scenario7-telemetry")
    readings = NvmlReadings.open(source, _devices(source))
    assert not any(c.endswith("sm_active_pct") for c in readings.columns())
    assert "i0:memory_mib" in readings.columns()
    assert readings.gpus()[0]["gpm"].startswith("not supported")


def test_a_quantity_the_gpu_does_not_offer_is_named_not_read(replay):
    """Board power recorded as NOT_SUPPORTED (a vGPU guest, say) is no column and is named."""

    def no_power(state: dict[str, Any]) -> None:
        state["telemetry"]["gpus"]["0"]["power_mw"] = "NOT_SUPPORTED"
        state["telemetry"]["gpus"]["0"]["energy_mj_at_init"] = "NOT_SUPPORTED"

    source = replay("a100-80gb-scenario7-telemetry", no_power)
    readings = NvmlReadings.open(source, _devices(source))
    assert "gpu0:power_w" not in readings.columns()
    assert readings.missing["gpu0:power_w"] == "NOT_SUPPORTED"
    assert readings.missing["gpu0:energy_j"] == "NOT_SUPPORTED"


def test_a_reading_that_fails_during_the_run_is_left_empty_and_counted(replay, clock):
    """A transient NVML error after the capability check gives None, never a stopped run."""
    source = replay("a100-80gb-scenario7-telemetry")
    readings = NvmlReadings.open(source, _devices(source)[:1])
    source.state["telemetry"]["gpus"]["0"]["temperature_c"] = "GPU_IS_LOST"
    row = readings.read()
    assert row["gpu0:temperature_c"] is None
    assert readings.errors == 1


def test_a_gpu_without_mig_reports_whole_gpu_utilisation(replay):
    """With MIG off (a shared GPU) the whole GPU's utilisation is a column."""
    source = replay("h100-shared-telemetry")
    readings = NvmlReadings.open(source, [Device("i0", source.state["gpus"][0]["uuid"])])
    assert "gpu0:util_pct" in readings.columns()
    assert (
        readings.read()["gpu0:util_pct"]
        == source.state["telemetry"]["gpus"]["0"]["utilization_pct"][0]
    )


def test_clock_event_bits_are_named_as_nvml_names_them():
    """The throttle bit mask becomes NVML's reason names; unknown bits are kept as bits."""
    mask = (
        pynvml.nvmlClocksEventReasonSwPowerCap
        | pynvml.nvmlClocksEventReasonHwThermalSlowdown
        | 0x10000
    )
    assert reason_names(mask) == ["sw_power_cap", "hw_thermal_slowdown", "bit 0x10000"]


def test_close_frees_the_gpm_samples(replay):
    """Closing the readings frees every GPM sample it allocated (the replay tracks them)."""
    source = replay("h200-7x1g-telemetry")
    readings = NvmlReadings.open(source, _devices(source))
    readings.read()
    readings.close()
    assert source._live["gpm"] == {}
