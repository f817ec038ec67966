"""The summary over the common timed window: energy from counters, shares, throttling, read-back."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mlperf_mig.errors import UntrustedPathError
from mlperf_mig.telemetry.summary import (
    BOARD_ENERGY_LABEL,
    InstanceColumns,
    RunTelemetry,
    Window,
    counter_energy,
    flag_seconds,
    power_energy,
    summarize,
)


def _rows(seconds: int = 10, power: float = 200.0, reset_at: int | None = None) -> list[dict]:
    """Samples at 1 Hz of a GPU at constant power, its energy counter and two instances."""
    rows, counter = [], 5_000.0
    for k in range(seconds + 1):
        if k == reset_at:
            counter = 3.0  # a driver reload restarts the counter
        rows.append(
            {
                "t": 100.0 + k,
                "gpu0:power_w": power,
                "gpu0:energy_j": counter,
                "gpu0:clock_events": 4.0 if 3 <= k < 5 else 0.0,
                "a:sm_active_pct": 80.0,
                "b:sm_active_pct": 40.0,
                "a:memory_mib": 100.0 + k,
                "b:memory_mib": 50.0,
            }
        )
        counter += power
    return rows


def _instances() -> list[InstanceColumns]:
    return [
        InstanceColumns(
            name=n,
            gpu_index=0,
            weight=w,
            util=f"{n}:sm_active_pct",
            util_metric="GPM",
            memory=f"{n}:memory_mib",
            memory_metric="MIG memory",
        )
        for n, w in (("a", 2.0), ("b", 1.0))
    ]


def _summary(rows: list[dict], window: Window | None) -> RunTelemetry:
    return summarize(
        rows,
        window=window,
        idle=[{"t": 0.0, "gpu0:power_w": 60.0}],
        instances=_instances(),
        gpus=[
            {
                "index": 0,
                "name": "NVIDIA H200",
                "gpm": "supported",
                "measured": ["power_w"],
                "not_measured": {},
            }
        ],
        package={"column": None, "source": "not measured: test"},
        interval_s=1.0,
    )


WINDOW = Window(start_unix_s=102.5, end_unix_s=107.5, source="test")


def test_counter_energy_is_the_counter_difference_over_the_window():
    """A counter growing 200 J/s gives 1000 J over a 5 s window, between samples too."""
    rows = _rows()
    t, e = np.array([r["t"] for r in rows]), np.array([r["gpu0:energy_j"] for r in rows])
    assert counter_energy(t, e, t, np.full(len(t), 200.0), 102.5, 107.5) == pytest.approx(1000.0)


def test_a_counter_reset_is_bridged_by_power_not_taken_as_negative_energy():
    """A counter that restarts inside the window still gives power x time for that step."""
    rows = _rows(reset_at=5)
    t, e = np.array([r["t"] for r in rows]), np.array([r["gpu0:energy_j"] for r in rows])
    assert counter_energy(t, e, t, np.full(len(t), 200.0), 102.5, 107.5) == pytest.approx(1000.0)


def test_energy_is_none_when_the_samples_do_not_cover_the_window():
    """A window beyond the samples has no energy rather than a partial one."""
    t = np.array([100.0, 101.0])
    assert counter_energy(t, np.array([0.0, 1.0]), t, np.array([1.0, 1.0]), 100.0, 105.0) is None


def test_power_is_integrated_where_there_is_no_counter():
    """Without an energy counter, constant 150 W over 4 s is 600 J."""
    t = np.arange(0.0, 11.0)
    assert power_energy(t, np.full(11, 150.0), 2.0, 6.0) == pytest.approx(600.0)


def test_throttle_reasons_are_timed_within_the_window():
    """sw_power_cap set at samples 3 and 4 (1 s each) counts 2 s; outside the window it does not."""
    assert flag_seconds(
        _rows(), "gpu0:clock_events", Window(start_unix_s=100, end_unix_s=110, source="t")
    ) == {"sw_power_cap": 2.0}
    assert (
        flag_seconds(
            _rows(), "gpu0:clock_events", Window(start_unix_s=106, end_unix_s=110, source="t")
        )
        == {}
    )


def test_summary_gives_gpu_energy_mean_power_and_idle_power():
    """Energy and mean power over the window, idle power from the readings before the run."""
    summary = _summary(_rows(), WINDOW)
    gpu = summary.gpus[0]
    assert (gpu.energy_j, gpu.power_mean_w, gpu.idle_power_w) == (1000.0, 200.0, 60.0)
    assert gpu.energy_source == "NVML total energy counter"
    assert summary.energy_label == BOARD_ENERGY_LABEL


def test_instance_energy_shares_split_the_gpu_energy_by_activity_and_size():
    """a (80% x 2 slices) and b (40% x 1 slice) share 1000 J as 800 and 200 J."""
    summary = _summary(_rows(), WINDOW)
    assert [i.energy_share_j for i in summary.instances] == [800.0, 200.0]


def test_samples_per_joule_is_throughput_over_mean_power():
    """1000 samples/s at a mean 200 W is 5 samples per joule."""
    assert _summary(_rows(), WINDOW).samples_per_joule(1000.0) == pytest.approx(5.0)


def test_without_a_window_there_is_no_energy_and_it_is_said():
    """No common timed window: no energy, no samples/J, and a note says so."""
    summary = _summary(_rows(), None)
    assert summary.energy_j is None and summary.samples_per_joule(1000.0) is None
    assert any("samples/J not available" in n for n in summary.notes)


def test_utilisation_counts_only_samples_inside_the_window():
    """Mean and p95 activity come from the window; peak memory from every sample."""
    rows = _rows()
    rows[0]["a:sm_active_pct"] = 0.0  # before the window
    summary = _summary(rows, WINDOW)
    a = summary.instance("a")
    assert (a.util_mean_pct, a.util_p95_pct, a.memory_peak_mib) == (80.0, 80.0, 110.0)


def test_telemetry_round_trips_through_its_dict():
    """to_dict and from_dict give the same record back."""
    summary = _summary(_rows(), WINDOW)
    assert RunTelemetry.from_dict(summary.to_dict()) == summary


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("layout", "energy_j"), math.nan),
        (("instances", 0, "name"), "../x"),
        (("csv",), "../../etc/passwd"),
        (("gpus", 0, "power_peak_w"), 1e308),
        (("samples",), -1),
        (("window", "end_unix_s"), 0.0),
    ],
)
def test_a_hostile_value_read_back_is_refused_in_one_line(path, value):
    """NaN, 1e308, a climbing name, another csv path or a backwards window is refused, named."""
    data = _summary(_rows(), WINDOW).to_dict()
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(UntrustedPathError, match=r"telemetry|not a plain name"):
        RunTelemetry.from_dict(data, "x/results.json")


def _with_counter(rows: list[dict], counter_of) -> list[dict]:
    """`rows` with the energy counter replaced by `counter_of(k)` at sample k."""
    return [{**row, "gpu0:energy_j": counter_of(k)} for k, row in enumerate(rows)]


def test_a_stuck_energy_counter_gives_way_to_board_power_and_is_named():
    """A counter that never moves while power reads 200 W: the energy is the integral of power
    (200 W x 5 s) and a note names the stuck counter."""
    summary = _summary(_with_counter(_rows(), lambda k: 5_000.0), WINDOW)
    (gpu,) = summary.gpus
    assert gpu.energy_j == pytest.approx(1000.0)
    assert gpu.energy_source.startswith("NVML board power, integrated")
    assert summary.power_mean_w == pytest.approx(200.0)
    assert any("GPU 0: its energy counter did not move while board power read 200 W" in n
               for n in summary.notes)  # fmt: skip


def test_a_counter_far_from_board_power_gives_way_to_it():
    """A counter growing 1000 J/s while power reads 200 W (5x): the integral is taken and the
    note gives both figures."""
    summary = _summary(_with_counter(_rows(), lambda k: 1_000.0 * k), WINDOW)
    (gpu,) = summary.gpus
    assert gpu.energy_j == pytest.approx(1000.0)
    (note,) = [n for n in summary.notes if n.startswith("GPU 0:")]
    assert "5000 J against 1000 J from board power (5.00x" in note


def test_a_counter_within_the_band_is_kept():
    """A counter 30% above the integral is within COUNTER_AGREES: the counter's energy stands,
    and nothing is noted."""
    summary = _summary(_with_counter(_rows(), lambda k: 260.0 * k), WINDOW)
    (gpu,) = summary.gpus
    assert gpu.energy_j == pytest.approx(1300.0)
    assert gpu.energy_source == "NVML total energy counter"
    assert not [n for n in summary.notes if n.startswith("GPU 0:")]


def test_each_reasons_seconds_are_pinned_to_the_sample_that_read_it():
    """Every interval carries a different set of reasons and the window cuts the first and last
    intervals: a reason read at a sample holds until the next, counted only inside the window.

    Samples at t = 0, 2, 3, 7, 8 read {sw_power_cap}, {sw_power_cap, hw_slowdown}, {}, {gpu_idle},
    {hw_slowdown}; the window is [1, 7.5]. By hand: sw_power_cap 1 (1-2) + 1 (2-3) = 2 s,
    hw_slowdown 1 (2-3) + 0 (the sample at 8 is after the window's end) = 1 s, gpu_idle 0.5
    (7-7.5).
    """
    from mlperf_mig.telemetry.nvml import CLOCK_EVENT_REASONS

    bit = {name: mask for mask, name in CLOCK_EVENT_REASONS.items()}
    masks = [
        bit["sw_power_cap"],
        bit["sw_power_cap"] | bit["hw_slowdown"],
        0,
        bit["gpu_idle"],
        bit["hw_slowdown"],
    ]
    rows = [{"t": t, "c": float(m)} for t, m in zip((0.0, 2.0, 3.0, 7.0, 8.0), masks)]
    window = Window(start_unix_s=1.0, end_unix_s=7.5, source="t")
    assert flag_seconds(rows, "c", window) == {
        "gpu_idle": 0.5,
        "hw_slowdown": 1.0,
        "sw_power_cap": 2.0,
    }


def test_an_instances_work_per_joule_is_its_rate_over_its_share_of_the_power():
    """Instance a's 100 tokens/s over its energy share spread over the window."""
    summary = _summary(_rows(), WINDOW)
    share = summary.instance("a").energy_share_j
    assert summary.instance_per_joule("a", 100.0) == pytest.approx(100.0 * 5.0 / share)
    assert summary.per_joule(100.0) == pytest.approx(100.0 / summary.power_mean_w)
    assert summary.instance_per_joule("a", None) is None
    assert summary.instance_per_joule("nobody", 100.0) is None


def test_tokens_per_joule_lines_name_the_layouts_and_each_instances():
    """The telemetry notes of a generative run: the layout's tokens/J and each instance's, the
    instance's labelled an estimate; none where no tokens were measured."""
    from mlperf_mig.telemetry.report import telemetry_lines
    from mlperf_mig.telemetry.summary import SHARE_LABEL

    summary = _summary(_rows(), WINDOW)
    rates = {"a": 300.0, "b": 100.0}
    lines = telemetry_lines(summary, 1.0, tokens_per_s=400.0, instance_tokens_per_s=rates)
    (total,) = [line for line in lines if line.startswith("tokens/J ") and "instance" not in line]
    assert total.startswith(f"tokens/J {400.0 / summary.power_mean_w:.4g} = tokens/s / mean power")
    (each,) = [line for line in lines if line.startswith("tokens/J per instance")]
    assert SHARE_LABEL in each
    for name, rate in rates.items():
        assert f"{name} {summary.instance_per_joule(name, rate):.4g}" in each
    assert not any("tokens/J" in line for line in telemetry_lines(summary, 1.0))


def test_no_energy_means_no_tokens_per_joule():
    """Without a common timed window there is no energy, so no tokens/J line."""
    from mlperf_mig.telemetry.report import telemetry_lines

    summary = _summary(_rows(), None)
    lines = telemetry_lines(summary, None, tokens_per_s=400.0, instance_tokens_per_s={"a": 1.0})
    assert not any("tokens/J" in line for line in lines)
