"""What a run's telemetry comes to: `RunTelemetry` (plain data, to_dict / from_dict) and
`summarize`, which makes it from the sampled rows and the common timed window.

Energy is the GPU board's (NVML), never wall power; the CPU package's (RAPL) for emulated runs
where readable. Energy over the window comes from the energy counter where the GPU has one: the
counter's steps are summed, and a step backwards (the driver reloaded, the counter reset or
wrapped) is replaced by board power x time for that step, never taken as negative energy.
Without a counter the board power is integrated; so it is where the counter disagrees with that
integral beyond COUNTER_AGREES (a stuck counter is named), and the summary's notes say so. Each
instance's share of the energy is an
estimate: the GPU's energy split by the instances' activity x compute slices.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from mlperf_mig._checks import is_whole
from mlperf_mig._io import JsonData, finite_number, safe_name
from mlperf_mig.errors import UntrustedPathError
from mlperf_mig.telemetry.nvml import reason_names

FORMAT = 1
CSV_FILE = "telemetry.csv"
BOARD_ENERGY_LABEL = "GPU board energy, not wall power"
PACKAGE_ENERGY_LABEL = "CPU package energy (RAPL), not wall power; emulated partitions"
SHARE_LABEL = "estimate: the GPU's board energy split by each instance's activity x compute slices"
_LIMIT = 1e12  # no quantity of one run comes near it; a larger one was edited in


# --- records ---------------------------------------------------------------------------------------
def _check_number(value: JsonData, what: str, source: str) -> float | None:
    if value is None:
        return None
    if not finite_number(value) or not -_LIMIT <= value <= _LIMIT:
        raise UntrustedPathError(
            f"{source!r}: telemetry {what} {value!r} is not a finite number within ±{_LIMIT:g}; the "
            "file was edited or is not one this tool wrote: fix that field or write the run again"
        )
    return float(value)


def _check_text(value: JsonData, what: str, source: str, limit: int = 500) -> str:
    if not isinstance(value, str) or len(value) > limit or any(ord(c) < 32 for c in value):
        raise UntrustedPathError(
            f"{source!r}: telemetry {what} {value!r} is not a short line of text; the file was "
            "edited or is not one this tool wrote: fix that field or write the run again"
        )
    return value


def _check_list(value: JsonData, what: str, source: str) -> list[Any]:
    if not isinstance(value, list):
        raise UntrustedPathError(f"{source!r}: telemetry {what} is not a list; write the run again")
    return value


def _check_mapping(value: JsonData, what: str, source: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise UntrustedPathError(
            f"{source!r}: telemetry {what} is not an object; write the run again"
        )
    return value


@attrs.frozen(kw_only=True)
class Window:
    """The common timed window the summary covers (wall-clock seconds since 1970, UTC)."""

    start_unix_s: float
    end_unix_s: float
    source: str

    @property
    def duration_s(self) -> float:
        return self.end_unix_s - self.start_unix_s

    def to_dict(self) -> dict[str, Any]:
        return {**attrs.asdict(self), "duration_s": self.duration_s}

    @classmethod
    def from_dict(cls, data: JsonData, source: str) -> Window:
        data = _check_mapping(data, "window", source)
        start = _check_number(data.get("start_unix_s"), "window start", source)
        end = _check_number(data.get("end_unix_s"), "window end", source)
        if start is None or end is None or end < start:
            raise UntrustedPathError(
                f"{source!r}: telemetry window {dict(data)!r} does not run forwards; write the run again"
            )
        return cls(
            start_unix_s=start,
            end_unix_s=end,
            source=_check_text(data.get("source"), "window source", source),
        )


@attrs.frozen(kw_only=True)
class InstanceTelemetry:
    """One instance over the window: its activity, its peak memory, its estimated energy."""

    name: str
    gpu_index: int | None
    util_metric: str  # what util % is: GPM SM activity, or CPU use of its CPUs (emulated)
    util_mean_pct: float | None = None
    util_p95_pct: float | None = None
    memory_metric: str = ""
    memory_peak_mib: float | None = None
    energy_share_j: float | None = None  # an estimate (SHARE_LABEL)

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_dict(cls, data: JsonData, source: str) -> InstanceTelemetry:
        data = _check_mapping(data, "instance", source)
        gpu = data.get("gpu_index")
        if gpu is not None and not is_whole(gpu, 0, 4095):
            raise UntrustedPathError(
                f"{source!r}: telemetry gpu_index {gpu!r} is not a GPU index; write the run again"
            )
        return cls(
            name=safe_name(data.get("name"), "telemetry instance name", source),
            gpu_index=gpu,
            util_metric=_check_text(data.get("util_metric"), "util_metric", source),
            util_mean_pct=_check_number(data.get("util_mean_pct"), "util_mean_pct", source),
            util_p95_pct=_check_number(data.get("util_p95_pct"), "util_p95_pct", source),
            memory_metric=_check_text(data.get("memory_metric", ""), "memory_metric", source),
            memory_peak_mib=_check_number(data.get("memory_peak_mib"), "memory_peak_mib", source),
            energy_share_j=_check_number(data.get("energy_share_j"), "energy_share_j", source),
        )


_GPU_NUMBERS = (
    "energy_j",
    "power_mean_w",
    "power_peak_w",
    "idle_power_w",
    "temperature_peak_c",
    "sm_clock_mean_mhz",
)


@attrs.frozen(kw_only=True)
class GpuTelemetry:
    """One GPU over the window: energy, power, idle power before the run, throttling seen."""

    index: int
    name: str
    energy_j: float | None = None
    energy_source: str = ""
    power_mean_w: float | None = None
    power_peak_w: float | None = None
    idle_power_w: float | None = None
    temperature_peak_c: float | None = None
    sm_clock_mean_mhz: float | None = None
    throttle: tuple[tuple[str, float], ...] = attrs.field(
        default=(), converter=lambda v: tuple(tuple(p) for p in v)
    )
    gpm: str = ""
    measured: tuple[str, ...] = attrs.field(default=(), converter=tuple[str, ...])
    not_measured: tuple[tuple[str, str], ...] = attrs.field(
        default=(), converter=lambda v: tuple(tuple(p) for p in v)
    )

    def to_dict(self) -> dict[str, Any]:
        data = attrs.asdict(self)
        data["throttle"] = [{"reason": r, "seconds": s} for r, s in self.throttle]
        data["measured"] = list(self.measured)
        data["not_measured"] = {k: v for k, v in self.not_measured}
        return data

    @classmethod
    def from_dict(cls, data: JsonData, source: str) -> GpuTelemetry:
        data = _check_mapping(data, "gpu", source)
        index = data.get("index")
        if not is_whole(index, 0, 4095):
            raise UntrustedPathError(
                f"{source!r}: telemetry GPU index {index!r} is not a GPU index; write the run again"
            )
        throttle = []
        for entry in _check_list(data.get("throttle", []), "throttle", source):
            entry = _check_mapping(entry, "throttle entry", source)
            seconds = _check_number(entry.get("seconds"), "throttle seconds", source)
            throttle.append(
                (_check_text(entry.get("reason"), "throttle reason", source, 60), seconds or 0.0)
            )
        not_measured = _check_mapping(data.get("not_measured", {}), "not_measured", source)
        return cls(
            index=index,
            name=_check_text(data.get("name"), "GPU name", source, 200),
            energy_source=_check_text(data.get("energy_source", ""), "energy_source", source),
            throttle=throttle,
            gpm=_check_text(data.get("gpm", ""), "gpm", source),
            measured=[
                _check_text(m, "measured", source, 60)
                for m in _check_list(data.get("measured", []), "measured", source)
            ],
            not_measured=[
                (_check_text(k, "not_measured", source, 60), _check_text(v, "not_measured", source))
                for k, v in not_measured.items()
            ],
            **{name: _check_number(data.get(name), name, source) for name in _GPU_NUMBERS},
        )


@attrs.frozen(kw_only=True)
class RunTelemetry:
    """What the run's sampler recorded, summarised over the common timed window."""

    interval_s: float
    samples: int
    window: Window | None
    instances: tuple[InstanceTelemetry, ...] = attrs.field(converter=tuple[InstanceTelemetry, ...])
    gpus: tuple[GpuTelemetry, ...] = attrs.field(converter=tuple[GpuTelemetry, ...])
    energy_j: float | None = (
        None  # the layout's: the sum over its GPUs (or the CPU package, emulated)
    )
    power_mean_w: float | None = None
    idle_power_w: float | None = None
    energy_label: str = BOARD_ENERGY_LABEL
    cpu_package: Mapping[str, Any] = attrs.field(factory=dict)
    notes: tuple[str, ...] = attrs.field(default=(), converter=tuple[str, ...])
    csv: str | None = CSV_FILE
    sampled_s: float | None = None  # from the first row to the last
    sampler_cpu_s: float | None = (
        None  # CPU time the sampler's thread spent reading, over that span
    )

    def instance(self, name: str) -> InstanceTelemetry | None:
        return next((i for i in self.instances if i.name == name), None)

    def per_joule(self, rate: float | None) -> float | None:
        """Work per joule of the layout: `rate` (samples/s, tokens/s) over the mean power in the
        window (W = J/s); None where either is unknown."""
        if rate is None or not self.power_mean_w or self.power_mean_w <= 0:
            return None
        return rate / self.power_mean_w

    def samples_per_joule(self, throughput: float | None) -> float | None:
        """Samples per joule of the layout: throughput (samples/s) over mean power (W = J/s)."""
        return self.per_joule(throughput)

    def instance_per_joule(self, name: str, rate: float | None) -> float | None:
        """Work per joule of instance `name`: its `rate` over its mean power in the window, its
        estimated share of the GPU's energy (SHARE_LABEL) over the window's length; None where
        the rate, the share or the window is unknown."""
        found = self.instance(name)
        window = self.window
        if (
            rate is None
            or found is None
            or not found.energy_share_j
            or found.energy_share_j <= 0
            or window is None
            or window.duration_s <= 0
        ):
            return None
        return rate * window.duration_s / found.energy_share_j

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "interval_s": self.interval_s,
            "samples": self.samples,
            "csv": self.csv,
            "window": None if self.window is None else self.window.to_dict(),
            "instances": [i.to_dict() for i in self.instances],
            "gpus": [g.to_dict() for g in self.gpus],
            "layout": {
                "energy_j": self.energy_j,
                "power_mean_w": self.power_mean_w,
                "idle_power_w": self.idle_power_w,
                "energy_label": self.energy_label,
            },
            "cpu_package": dict(self.cpu_package),
            "notes": list(self.notes),
            "sampled_s": self.sampled_s,
            "sampler_cpu_s": self.sampler_cpu_s,
        }

    @classmethod
    def from_dict(cls, data: JsonData, source: str = "results.json") -> RunTelemetry:
        """Read back a results.json's telemetry, every value checked (the file is untrusted)."""
        data = _check_mapping(data, "telemetry", source)
        if data.get("format") != FORMAT:
            raise UntrustedPathError(
                f"{source!r}: telemetry format {data.get('format')!r} is not {FORMAT}; write the run again"
            )
        layout = _check_mapping(data.get("layout", {}), "layout", source)
        package = _check_mapping(data.get("cpu_package", {}), "cpu_package", source)
        csv = data.get("csv")
        if csv not in (None, CSV_FILE):
            raise UntrustedPathError(
                f"{source!r}: telemetry csv {csv!r} is not {CSV_FILE!r} or null; write the run again"
            )
        samples = data.get("samples")
        if not is_whole(samples, 0, _LIMIT):
            raise UntrustedPathError(
                f"{source!r}: telemetry samples {samples!r} is not a count; write the run again"
            )
        interval = _check_number(data.get("interval_s"), "interval_s", source)
        if interval is None or interval <= 0:
            raise UntrustedPathError(
                f"{source!r}: telemetry interval_s {interval!r} is not positive; write the run again"
            )
        return cls(
            interval_s=interval,
            samples=samples,
            window=None if data.get("window") is None else Window.from_dict(data["window"], source),
            instances=[
                InstanceTelemetry.from_dict(i, source)
                for i in _check_list(data.get("instances"), "instances", source)
            ],
            gpus=[
                GpuTelemetry.from_dict(g, source)
                for g in _check_list(data.get("gpus"), "gpus", source)
            ],
            energy_j=_check_number(layout.get("energy_j"), "layout energy_j", source),
            power_mean_w=_check_number(layout.get("power_mean_w"), "layout power_mean_w", source),
            idle_power_w=_check_number(layout.get("idle_power_w"), "layout idle_power_w", source),
            energy_label=_check_text(
                layout.get("energy_label", BOARD_ENERGY_LABEL), "energy_label", source
            ),
            cpu_package={
                "energy_j": _check_number(package.get("energy_j"), "cpu_package energy_j", source),
                "power_mean_w": _check_number(
                    package.get("power_mean_w"), "cpu_package power_mean_w", source
                ),
                "source": _check_text(package.get("source", ""), "cpu_package source", source),
            },
            notes=[
                _check_text(n, "note", source, 1000)
                for n in _check_list(data.get("notes", []), "notes", source)
            ],
            csv=csv,
            sampled_s=_check_number(data.get("sampled_s"), "sampled_s", source),
            sampler_cpu_s=_check_number(data.get("sampler_cpu_s"), "sampler_cpu_s", source),
        )


# --- the numbers ------------------------------------------------------------------------------------
def series(rows: Sequence[Mapping[str, Any]], column: str) -> tuple[np.ndarray, np.ndarray]:
    """Times and values of `column` where it was read (rows without a value are left out)."""
    pairs = [(r["t"], r[column]) for r in rows if r.get(column) is not None]
    if not pairs:
        return np.empty(0), np.empty(0)
    times, values = zip(*pairs)
    return np.asarray(times, dtype=float), np.asarray(values, dtype=float)


def in_window(rows: Sequence[Mapping[str, Any]], window: Window | None) -> list[Mapping[str, Any]]:
    if window is None:
        return list(rows)
    return [r for r in rows if window.start_unix_s <= r["t"] <= window.end_unix_s]


def counter_energy(
    times: np.ndarray,
    counter: np.ndarray,
    power_times: np.ndarray,
    power: np.ndarray,
    start: float,
    end: float,
) -> float | None:
    """Energy (J) between `start` and `end` from a cumulative counter sampled at `times`.

    A step backwards (reset or wrap) is replaced by board power x its duration; the counter
    between readings is taken as linear. None when the readings do not cover the window.
    """
    if len(times) < 2 or times[0] > start or times[-1] < end:
        return None
    steps = np.diff(counter)
    back = steps < 0
    if back.any():
        if len(power_times) == 0:
            return None
        middles = (times[:-1] + times[1:]) / 2
        estimate = np.interp(middles, power_times, power) * np.diff(times)
        steps = np.where(back, estimate, steps)
    cumulative = np.concatenate([[0.0], np.cumsum(steps)])
    return float(np.interp(end, times, cumulative) - np.interp(start, times, cumulative))


def power_energy(times: np.ndarray, power: np.ndarray, start: float, end: float) -> float | None:
    """Energy (J) between `start` and `end` by integrating power samples (trapezoids)."""
    if len(times) < 2 or times[0] > start or times[-1] < end:
        return None
    inside = (times > start) & (times < end)
    grid = np.concatenate([[start], times[inside], [end]])
    values = np.interp(grid, times, power)
    return float(
        np.sum((values[1:] + values[:-1]) / 2 * np.diff(grid))
    )  # trapezoids (numpy 1.x too)


# The energy counter is trusted while it agrees with the integral of board power over the same
# window within these factors; outside them (a counter that is stuck, jumps or belongs to another
# clock) the integral is taken and the summary says why. Power samples are coarse, so the band is
# wide: it catches a broken counter, not a few percent of sampling error.
COUNTER_AGREES = (0.5, 2.0)


def gpu_energy(
    index: int,
    counter: tuple[np.ndarray, np.ndarray],
    power: tuple[np.ndarray, np.ndarray],
    window: Window,
    idle_power_w: float | None,
) -> tuple[float | None, str, str | None]:
    """(energy J, its source, a note) of one GPU over the window: the energy counter where it
    reads and agrees with the integral of board power (COUNTER_AGREES), else the integral, with a
    note naming the counter (a stuck one: it did not move while power read above idle); a
    counter that went back within the window (a reset) is bridged by power and noted."""
    start, end = window.start_unix_s, window.end_unix_s
    from_counter = counter_energy(*counter, *power, start, end)
    integral = power_energy(*power, start, end)
    if from_counter is not None and (integral is None or integral <= 0):
        return from_counter, "NVML total energy counter", None
    if from_counter is None:
        source = "NVML board power, integrated" if integral is not None else ""
        return integral, source, None
    assert integral is not None  # narrowed above: a positive integral
    ratio = from_counter / integral
    if COUNTER_AGREES[0] <= ratio <= COUNTER_AGREES[1]:
        reset = (
            f"GPU {index}: its energy counter went back within the window (a reset or a driver "
            "reload); the interval across it counts board power x time"
            if _went_back(*counter, start, end)
            else None
        )
        return from_counter, "NVML total energy counter", reset
    mean_w = integral / window.duration_s if window.duration_s > 0 else 0.0
    if from_counter == 0 and (idle_power_w is None or mean_w > idle_power_w):
        why = f"its energy counter did not move while board power read {mean_w:.0f} W"
    else:
        why = (
            f"its energy counter gave {from_counter:.0f} J against {integral:.0f} J from board "
            f"power ({ratio:.2f}x, outside {COUNTER_AGREES[0]}-{COUNTER_AGREES[1]}x)"
        )
    note = f"GPU {index}: {why}; its energy is the integral of board power"
    return integral, "NVML board power, integrated (the energy counter disagreed)", note


def _went_back(times: np.ndarray, counter: np.ndarray, start: float, end: float) -> bool:
    """Whether the counter steps backwards between two readings that overlap the window."""
    steps = np.diff(counter)
    overlapping = (times[1:] > start) & (times[:-1] < end)
    return bool(np.any((steps < 0) & overlapping))


def flag_seconds(
    rows: Sequence[Mapping[str, Any]], column: str, window: Window | None
) -> dict[str, float]:
    """How long each clock-event reason was set within the window (a reason read at one sample
    holds until the next), by reason name."""
    times, masks = series(rows, column)
    if len(times) < 2:
        return {}
    start = window.start_unix_s if window else times[0]
    end = window.end_unix_s if window else times[-1]
    seen: dict[str, float] = {}
    for t0, t1, mask in zip(times[:-1], times[1:], masks[:-1]):
        overlap = min(t1, end) - max(t0, start)
        if overlap <= 0 or not mask:
            continue
        for name in reason_names(int(mask)):
            seen[name] = seen.get(name, 0.0) + float(overlap)
    return {name: round(seconds, 3) for name, seconds in sorted(seen.items())}


def _mean(values: np.ndarray) -> float | None:
    return float(values.mean()) if len(values) else None


def _max(values: np.ndarray) -> float | None:
    return float(values.max()) if len(values) else None


def _p95(values: np.ndarray) -> float | None:
    return float(np.percentile(values, 95)) if len(values) else None


def _rounded(value: float | None, digits: int = 3) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, digits)


@attrs.frozen(kw_only=True)
class InstanceColumns:
    """Where an instance's numbers are in the rows, and what they are."""

    name: str
    gpu_index: int | None
    weight: float  # compute slices (GPU) or CPUs (emulated): the energy split's size factor
    util: str | None  # column of its activity (%), None: not measured
    util_metric: str
    memory: str | None
    memory_metric: str


def _gpu_summary(
    gpu: Mapping[str, Any],
    rows: Sequence[Mapping[str, Any]],
    idle: Sequence[Mapping[str, Any]],
    window: Window | None,
    notes: list[str],
) -> GpuTelemetry:
    """One GPU's summary; a note on its energy (a counter not trusted) goes to `notes`."""
    prefix = f"gpu{gpu['index']}:"
    _, p_idle = series(idle, prefix + "power_w")
    energy, source = None, ""
    if window is not None:
        energy, source, note = gpu_energy(
            gpu["index"],
            series(rows, prefix + "energy_j"),
            series(rows, prefix + "power_w"),
            window,
            _mean(p_idle),
        )
        if note is not None:
            notes.append(note)
    during = in_window(rows, window)
    _, p_in = series(during, prefix + "power_w")
    _, temperature = series(during, prefix + "temperature_c")
    _, clock = series(during, prefix + "sm_clock_mhz")
    mean_power = (
        energy / window.duration_s
        if energy is not None and window and window.duration_s > 0
        else _mean(p_in)
    )
    return GpuTelemetry(
        index=gpu["index"],
        name=gpu["name"],
        energy_j=_rounded(energy),
        energy_source=source,
        power_mean_w=_rounded(mean_power),
        power_peak_w=_rounded(_max(p_in)),
        idle_power_w=_rounded(_mean(p_idle)),
        temperature_peak_c=_rounded(_max(temperature)),
        sm_clock_mean_mhz=_rounded(_mean(clock), 1),
        throttle=flag_seconds(rows, prefix + "clock_events", window).items(),
        gpm=gpu.get("gpm", ""),
        measured=gpu.get("measured", ()),
        not_measured=sorted(gpu.get("not_measured", {}).items()),
    )


def summarize(
    rows: Sequence[Mapping[str, Any]],
    *,
    window: Window | None,
    idle: Sequence[Mapping[str, Any]],
    instances: Sequence[InstanceColumns],
    gpus: Sequence[Mapping[str, Any]],
    package: Mapping[str, Any],
    interval_s: float,
    notes: Sequence[str] = (),
) -> RunTelemetry:
    """The run's telemetry over `window`: per instance, per GPU, the layout's energy.

    `gpus`: per GPU {"index", "name", "gpm", "measured", "not_measured"}; `package`: {"column"
    or None, "source" or why not}.
    """
    notes = list(notes)
    during = in_window(rows, window)
    gpu_records = [_gpu_summary(g, rows, idle, window, notes) for g in gpus]
    activity: dict[str, float | None] = {}
    records = []
    for spec in instances:
        util = series(during, spec.util)[1] if spec.util else np.empty(0)
        memory = series(rows, spec.memory)[1] if spec.memory else np.empty(0)
        activity[spec.name] = _mean(util)
        records.append(
            InstanceTelemetry(
                name=spec.name,
                gpu_index=spec.gpu_index,
                util_metric=spec.util_metric,
                util_mean_pct=_rounded(_mean(util), 1),
                util_p95_pct=_rounded(_p95(util), 1),
                memory_metric=spec.memory_metric,
                memory_peak_mib=_rounded(_max(memory), 1),
            )
        )
    package_energy = None
    if package.get("column") and window is not None:
        t, e = series(rows, package["column"])
        package_energy = counter_energy(
            t, e, np.empty(0), np.empty(0), window.start_unix_s, window.end_unix_s
        )
    duration = window.duration_s if window is not None and window.duration_s > 0 else None
    package_record = {
        "energy_j": _rounded(package_energy),
        "power_mean_w": _rounded(package_energy / duration)
        if package_energy is not None and duration
        else None,
        "source": package.get("source", ""),
    }
    energy: float | None
    idle_power: float | None
    budgets: dict[int | None, float | None]
    if gpus:
        energy = _total([g.energy_j for g in gpu_records])
        idle_power = _total([g.idle_power_w for g in gpu_records])
        label = BOARD_ENERGY_LABEL
        budgets = {g.index: g.energy_j for g in gpu_records}
    else:
        energy, idle_power, label = package_energy, None, PACKAGE_ENERGY_LABEL
        budgets = {None: package_energy}
    records = _with_shares(records, instances, activity, budgets)
    if energy is None:
        notes.append("energy not measured over the timed window: samples/J not available")
    return RunTelemetry(
        interval_s=interval_s,
        samples=len(rows),
        window=window,
        instances=records,
        gpus=gpu_records,
        energy_j=_rounded(energy),
        power_mean_w=_rounded(energy / duration) if energy is not None and duration else None,
        idle_power_w=_rounded(idle_power),
        energy_label=label,
        cpu_package=package_record,
        notes=notes,
    )


def _total(values: Sequence[float | None]) -> float | None:
    """The sum of `values` where every one is known (and there is one), else None."""
    known = [v for v in values if v is not None]
    return sum(known) if values and len(known) == len(values) else None


def _with_shares(
    records: list[InstanceTelemetry],
    instances: Sequence[InstanceColumns],
    activity: Mapping[str, float | None],
    budgets: Mapping[int | None, float | None],
) -> list[InstanceTelemetry]:
    """Each instance's estimated share of its GPU's energy: activity x size over the GPU's sum."""
    weights = {s.name: (activity[s.name] or 0.0) * s.weight for s in instances}
    totals: dict[int | None, float] = {}
    for spec in instances:
        totals[spec.gpu_index] = totals.get(spec.gpu_index, 0.0) + weights[spec.name]
    shared = []
    for record, spec in zip(records, instances):
        budget = budgets.get(spec.gpu_index)
        total = totals.get(spec.gpu_index, 0.0)
        known = budget is not None and total > 0 and activity[spec.name] is not None
        share = budget * weights[spec.name] / total if known else None  # type: ignore[operator]
        shared.append(attrs.evolve(record, energy_share_j=_rounded(share)))
    return shared
