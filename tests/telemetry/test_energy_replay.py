"""Energy over a run's window from replayed NVML states whose counter misbehaves: a counter that
never moves while board power reads 403-493 W gives way to the integral of power and is named;
a counter that restarts mid-window is bridged by power and noted; a lost GPU is left out."""

from __future__ import annotations

from typing import Any

import numpy as np
import pynvml
import pytest

from mlperf_mig.registry.replay import _GpuHandle
from mlperf_mig.telemetry.nvml import Device, NvmlReadings
from mlperf_mig.telemetry.record import capabilities
from mlperf_mig.telemetry.replay import RecordedTelemetry
from mlperf_mig.telemetry.sampler import Sampler
from mlperf_mig.telemetry.summary import RunTelemetry, Window, power_energy, series, summarize

from .conftest import ManualClock, load_state

STUCK = "h200-stuck-energy-counter-telemetry"
RESET = "h200-energy-counter-reset-telemetry"
INTERVAL_S = 0.1


def _sampled(name: str, clock: ManualClock) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """4 s of 10 Hz samples of the replayed GPU 0 (rows, and the GPU facts of the summary)."""
    state = load_state(name)
    source = RecordedTelemetry(state, clock=clock)
    readings = NvmlReadings.open(source, [Device("gpu0", state["gpus"][0]["uuid"])])
    sampler = Sampler([readings], interval_s=INTERVAL_S, clock=clock)
    for _ in range(41):
        sampler.sample_once()
        clock.advance(INTERVAL_S)
    gpus = [{**gpu, "not_measured": {}} for gpu in readings.gpus()]
    readings.close()
    return sampler.rows, gpus


def _summary(
    rows: list[dict[str, Any]], gpus: list[dict[str, Any]], window: Window
) -> RunTelemetry:
    return summarize(
        rows,
        window=window,
        idle=[],
        instances=[],
        gpus=gpus,
        package={"column": None, "source": "not measured"},
        interval_s=INTERVAL_S,
    )


@pytest.fixture(name="window")
def fixture_window(clock: ManualClock) -> Window:
    """The timed window: 0.5 s to 3.5 s after the replay starts."""
    return Window(start_unix_s=clock.now + 0.5, end_unix_s=clock.now + 3.5, source="test")


def test_a_stuck_counter_gives_way_to_the_integral_of_board_power(clock, window) -> None:
    """The counter reads the same all along while power reads 403-493 W: the energy is the
    integral of board power (about 448 W x 3 s) and a note names the stuck counter."""
    rows, gpus = _sampled(STUCK, clock)
    counter = series(rows, "gpu0:energy_j")[1]
    power = series(rows, "gpu0:power_w")[1]
    assert np.all(counter == counter[0]) and power.min() >= 403 and power.max() <= 493
    summary = _summary(rows, gpus, window)
    (gpu,) = summary.gpus
    integral = power_energy(*series(rows, "gpu0:power_w"), window.start_unix_s, window.end_unix_s)
    assert gpu.energy_j == pytest.approx(integral, abs=0.01)
    assert 1330 < gpu.energy_j < 1360
    assert gpu.energy_source == "NVML board power, integrated (the energy counter disagreed)"
    assert summary.notes == (
        "GPU 0: its energy counter did not move while board power read 448 W; its energy is "
        "the integral of board power",
    )


def test_a_counter_reset_mid_window_is_bridged_and_noted(clock, window) -> None:
    """The counter restarts from 0 at 2 s (a driver reload): the step across it counts board
    power, so the counter's energy stays within 1% of the integral, and a note says so."""
    rows, gpus = _sampled(RESET, clock)
    times, counter = series(rows, "gpu0:energy_j")
    went_back = times[1:][np.diff(counter) < 0]
    assert len(went_back) == 1 and window.start_unix_s < went_back[0] < window.end_unix_s
    summary = _summary(rows, gpus, window)
    (gpu,) = summary.gpus
    integral = power_energy(*series(rows, "gpu0:power_w"), window.start_unix_s, window.end_unix_s)
    assert gpu.energy_source == "NVML total energy counter"
    assert gpu.energy_j == pytest.approx(integral, rel=0.01) and gpu.energy_j > 0
    assert summary.notes == (
        "GPU 0: its energy counter went back within the window (a reset or a driver reload); "
        "the interval across it counts board power x time",
    )


def test_a_counter_reset_outside_the_window_is_not_noted(clock) -> None:
    """A reset before the window starts leaves the window's counter steps forward: no note."""
    rows, gpus = _sampled(RESET, clock)
    late = Window(start_unix_s=clock.now - 1.5, end_unix_s=clock.now - 0.5, source="test")
    summary = _summary(rows, gpus, late)
    assert summary.gpus[0].energy_source == "NVML total energy counter" and summary.notes == ()


def test_capabilities_leave_out_a_lost_gpu() -> None:
    """A state whose GPU 1 answers GPU_IS_LOST: what telemetry measures is said for GPU 0 only,
    without an exception."""
    state = load_state(STUCK)
    state["gpus"].append({"error": "GPU_IS_LOST", "failed_query": "nvmlDeviceGetHandleByIndex"})
    found = capabilities(RecordedTelemetry(state))
    assert [gpu["index"] for gpu in found["gpus"]] == [0]


def test_capabilities_do_not_hide_an_error_that_is_not_a_lost_gpu() -> None:
    """A GPU answering NO_PERMISSION is not taken for a lost one: the error reaches the caller."""
    state = load_state(STUCK)
    state["gpus"].append({"error": "NO_PERMISSION", "failed_query": "nvmlDeviceGetHandleByIndex"})
    with pytest.raises(pynvml.NVMLError_NoPermission):
        capabilities(RecordedTelemetry(state))


def test_a_lost_gpu_answers_its_error_to_every_reading() -> None:
    """A replayed lost GPU answers GPU_IS_LOST to a power reading, as the driver did."""
    state = load_state(STUCK)
    state["gpus"].append({"error": "GPU_IS_LOST", "failed_query": "nvmlDeviceGetMemoryInfo"})
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        RecordedTelemetry(state).nvmlDeviceGetPowerUsage(_GpuHandle(1))
