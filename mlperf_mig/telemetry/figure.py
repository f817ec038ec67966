"""The time-series figure of one run: each instance's activity and the GPUs' power over time.

Drawn from telemetry.csv (read back as untrusted input, only the columns and at most the rows
the figure draws) onto a matplotlib Figure the caller makes (the HTML report embeds it as SVG); the common timed window is shaded, time is counted
from its start.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mlperf_mig.telemetry.series import read_columns, read_series
from mlperf_mig.telemetry.summary import RunTelemetry

if TYPE_CHECKING:
    from matplotlib.figure import Figure  # matplotlib is optional (the plot extra)

MAX_ROWS = 4000  # more points than a 9-inch figure can show apart
MAX_LINES = 64  # lines a panel draws (a system of 8 GPUs has 56 instances)


def _util_column(name: str, gpu_index: int | None, columns: list[str]) -> str | None:
    """Where an instance's activity is among the columns (GPM, worker CPU, whole GPU)."""
    for column in (f"{name}:sm_active_pct", f"{name}:cpu_pct", f"gpu{gpu_index}:util_pct"):
        if column in columns:
            return column
    return None


def series_for_figure(folder: str | Path, telemetry: RunTelemetry) -> dict[str, Any]:
    """The figure's data: time from the window start, activity per instance, power per GPU
    (the CPU package's, from its energy, where there is no GPU).

    Only what the figure draws is read: the columns of its lines (at most MAX_LINES a panel,
    the rest named in `left_out`) and at most MAX_ROWS rows, evenly spaced: a 63 MiB
    telemetry.csv is drawn from a few thousand rows of a few columns, not held whole."""
    header = read_columns(folder)
    util_columns = {}
    for instance in telemetry.instances:
        found = _util_column(instance.name, instance.gpu_index, header)
        if found is not None:
            util_columns[instance.name] = found
    power_columns = {c.split(":")[0]: c for c in header if c.endswith(":power_w")}
    energy = (
        "cpu_package:energy_j" if not power_columns and "cpu_package:energy_j" in header else None
    )
    left_out = max(0, len(util_columns) - MAX_LINES) + max(0, len(power_columns) - MAX_LINES)
    util_columns = dict(list(util_columns.items())[:MAX_LINES])
    power_columns = dict(list(power_columns.items())[:MAX_LINES])
    wanted = list(dict.fromkeys([*util_columns.values(), *power_columns.values()]))
    if energy is not None:
        wanted.append(energy)
    columns, rows = read_series(folder, wanted, MAX_ROWS)
    table = np.array(
        [[np.nan if v is None else v for v in row] for row in rows], dtype=float
    ).reshape(len(rows), len(columns) + 1)
    t = table[:, 0]
    origin = (
        telemetry.window.start_unix_s if telemetry.window is not None else (t[0] if len(t) else 0.0)
    )

    def column(name: str) -> np.ndarray:
        return table[:, 1 + columns.index(name)]

    util = {name: column(found) for name, found in util_columns.items()}
    power = {name: column(found) for name, found in power_columns.items()}
    if energy is not None and len(t) > 1:
        power["CPU package"] = np.concatenate([[np.nan], np.diff(column(energy)) / np.diff(t)])
    window = None if telemetry.window is None else (0.0, telemetry.window.duration_s)
    return {"t": t - origin, "util": util, "power": power, "window": window, "left_out": left_out}


def draw_timeseries(figure: Figure, data: dict[str, Any]) -> None:
    """Two panels sharing time: activity per instance (%), power (W)."""
    top, bottom = figure.subplots(2, 1, sharex=True)
    for name, values in data["util"].items():
        top.plot(data["t"], values, label=name, linewidth=1)
    top.set_ylabel("util % per instance", fontsize=9)
    top.set_ylim(0, 105)
    if data["util"]:
        top.legend(fontsize=7, ncol=4, loc="lower right")
    else:
        top.text(0.5, 0.5, "instance activity not measured", ha="center", transform=top.transAxes)
    for name, values in data["power"].items():
        bottom.plot(data["t"], values, label=f"{name} power", linewidth=1)
    bottom.set_ylabel("power (W)", fontsize=9)
    if data["power"]:
        bottom.legend(fontsize=7, loc="lower right")
    else:
        bottom.text(0.5, 0.5, "power not measured", ha="center", transform=bottom.transAxes)
    bottom.set_xlabel("seconds from the start of the common timed window", fontsize=9)
    if data["window"] is not None:
        for axes in (top, bottom):
            axes.axvspan(*data["window"], color="#dddddd", alpha=0.5, linewidth=0)
    title = "what each slice did (shaded: the common timed window)"
    if data.get("left_out"):
        title += f"; {data['left_out']} more line(s) not drawn (at most {MAX_LINES} a panel)"
    top.set_title(title, fontsize=10)
