"""Telemetry in words: the lines every table, report and submission note carries."""

from __future__ import annotations

from collections.abc import Mapping

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


def tokens_per_joule_lines(
    t: RunTelemetry, tokens_per_s: float | None, instance_tokens_per_s: Mapping[str, float | None]
) -> list[str]:
    """A generative workload's tokens/J: the layout's (its tokens/s over the mean power) and
    each instance's (its own tokens/s over its estimated share of the power); [] where no
    tokens or no energy were measured."""
    total = t.per_joule(tokens_per_s)
    if total is None or tokens_per_s is None:
        return []
    lines = [
        f"tokens/J {total:.4g} = tokens/s / mean power ({t.energy_label}): {tokens_per_s:,.1f} "
        f"tokens/s over {_number(t.power_mean_w, 'W')}"
    ]
    shares = [
        (name, found)
        for name, rate in instance_tokens_per_s.items()
        if (found := t.instance_per_joule(name, rate)) is not None
    ]
    if shares:
        lines.append(
            f"tokens/J per instance = its tokens/s / its mean power ({SHARE_LABEL}): "
            + ", ".join(f"{n} {v:.4g}" for n, v in shares)
        )
    return lines


def telemetry_lines(
    t: RunTelemetry,
    samples_per_joule: float | None,
    *,
    tokens_per_s: float | None = None,
    instance_tokens_per_s: Mapping[str, float | None] | None = None,
) -> list[str]:
    """What util % and samples/J are (and tokens/J, per instance and in total, for a workload
    that generates tokens), each GPU's energy and throttling, what was not measured."""
    lines = []
    window = t.window
    metrics = sorted({i.util_metric for i in t.instances})
    where = (
        f"the common timed window ({window.duration_s:.2f} s; {window.source})"
        if window is not None
        else "the whole performance round (no common timed window)"
    )
    lines.append(
        f"util % = {'; '.join(metrics) or 'not measured'}; mean over {where}, {t.samples} samples at {1 / t.interval_s:.0f} Hz"
    )
    if samples_per_joule is not None:
        lines.append(
            f"samples/J {samples_per_joule:.4g} = throughput / mean power ({t.energy_label}); layout "
            f"energy {_number(t.energy_j, 'J')}, mean {_number(t.power_mean_w, 'W')}, idle before the run "
            f"{_number(t.idle_power_w, 'W')}"
        )
    lines += tokens_per_joule_lines(t, tokens_per_s, instance_tokens_per_s or {})
    lines += [gpu_line(g) for g in t.gpus]
    shares = [(i.name, i.energy_share_j) for i in t.instances if i.energy_share_j is not None]
    if shares:
        lines.append(
            f"energy per instance ({SHARE_LABEL}): "
            + ", ".join(f"{n} {e:.1f} J" for n, e in shares)
        )
    memory = [(i.name, i.memory_peak_mib) for i in t.instances if i.memory_peak_mib is not None]
    if memory:
        kinds = "; ".join(
            sorted({i.memory_metric for i in t.instances if i.memory_peak_mib is not None})
        )
        lines.append(f"peak memory ({kinds}): " + ", ".join(f"{n} {m:.0f} MiB" for n, m in memory))
    package = t.cpu_package
    if package.get("energy_j") is not None:
        lines.append(
            f"CPU package energy {package['energy_j']:.1f} J ({package.get('source', '')}; not wall power)"
        )
    for gpu in t.gpus:
        lines += [f"GPU {gpu.index} {what} not measured: {why}" for what, why in gpu.not_measured]
    lines += list(t.notes)
    lines.append("series: telemetry.csv beside results.json" if t.csv else "series: not written")
    return lines


def system_notes(
    t: RunTelemetry, samples_per_joule: float | None, instance: str | None = None
) -> list[str]:
    """One line for a submission's system description (hw_notes): what the telemetry saw,
    labelled as not an MLPerf Power measurement."""
    parts = []
    if t.power_mean_w is not None:
        parts.append(
            f"mean power {t.power_mean_w:.1f} W ({t.energy_label}), idle before the run {_number(t.idle_power_w, 'W')}"
        )
    if samples_per_joule is not None:
        parts.append(f"{samples_per_joule:.4g} samples/J for the layout")
    throttled = sorted({reason for g in t.gpus for reason, _ in g.throttle if reason != "gpu_idle"})
    if t.gpus:
        parts.append(f"clock events seen: {', '.join(throttled) or 'none'}")
    found = None if instance is None else t.instance(instance)
    if found is not None and found.util_mean_pct is not None:
        parts.append(
            f"instance {instance} mean util {found.util_mean_pct:.1f}% ({found.util_metric})"
        )
    if found is not None and found.energy_share_j is not None:
        parts.append(f"its energy {found.energy_share_j:.1f} J ({SHARE_LABEL})")
    if not parts:
        return []
    return ["Telemetry over the timed window, not an MLPerf Power measurement: " + "; ".join(parts)]
