"""Telemetry in words: the lines every table, report and submission note carries."""

from __future__ import annotations

from mlperf_mig.telemetry.summary import SHARE_LABEL, GpuTelemetry, RunTelemetry


def _number(value: float | None, unit: str, digits: str = ".1f") -> str:
    return "-" if value is None else f"{value:{digits}} {unit}"


def gpu_line(gpu: GpuTelemetry) -> str:
    """One GPU over the window: energy, power, idle power, temperature, clock events."""
    events = ", ".join(f"{reason} {seconds:.1f} s" for reason, seconds in gpu.throttle) or "none"
    source = f" ({gpu.energy_source})" if gpu.energy_source else ""
    return (
        f"GPU {gpu.index} ({gpu.name}): energy {_number(gpu.energy_j, 'J')}{source}, mean power "
        f"{_number(gpu.power_mean_w, 'W')}, peak {_number(gpu.power_peak_w, 'W')}, idle before the "
        f"run {_number(gpu.idle_power_w, 'W')}, peak temperature {_number(gpu.temperature_peak_c, 'C', '.0f')}, "
        f"clock events (throttle reasons) seen: {events}; per-instance activity by GPM: {gpu.gpm}"
    )


def telemetry_lines(t: RunTelemetry, samples_per_joule: float | None) -> list[str]:
    """What util % and samples/J are, each GPU's energy and throttling, what was not measured."""
    lines = []
    window = t.window
    metrics = sorted({i.util_metric for i in t.instances})
    where = (
        f"the common timed window ({window.duration_s:.2f} s; {window.source})"
        if window is not None else "the whole performance round (no common timed window)"
    )
    lines.append(f"util % = {'; '.join(metrics) or 'not measured'}; mean over {where}, {t.samples} samples at {1 / t.interval_s:.0f} Hz")
    if samples_per_joule is not None:
        lines.append(
            f"samples/J {samples_per_joule:.4g} = throughput / mean power ({t.energy_label}); layout "
            f"energy {_number(t.energy_j, 'J')}, mean {_number(t.power_mean_w, 'W')}, idle before the run "
            f"{_number(t.idle_power_w, 'W')}"
        )
    lines += [gpu_line(g) for g in t.gpus]
    shares = [(i.name, i.energy_share_j) for i in t.instances if i.energy_share_j is not None]
    if shares:
        lines.append(f"energy per instance ({SHARE_LABEL}): " + ", ".join(f"{n} {e:.1f} J" for n, e in shares))
    memory = [(i.name, i.memory_peak_mib) for i in t.instances if i.memory_peak_mib is not None]
    if memory:
        kinds = "; ".join(sorted({i.memory_metric for i in t.instances if i.memory_peak_mib is not None}))
        lines.append(f"peak memory ({kinds}): " + ", ".join(f"{n} {m:.0f} MiB" for n, m in memory))
    package = t.cpu_package
    if package.get("energy_j") is not None:
        lines.append(f"CPU package energy {package['energy_j']:.1f} J ({package.get('source', '')}; not wall power)")
    for gpu in t.gpus:
        lines += [f"GPU {gpu.index} {what} not measured: {why}" for what, why in gpu.not_measured]
    lines += list(t.notes)
    lines.append("series: telemetry.csv beside results.json" if t.csv else "series: not written")
    return lines
