"""telemetry.csv: the sampled time series beside results.json, one row per sample.

Column `t` is wall-clock seconds since 1970 (UTC, the LoadGen logs' clock); every other column is
`<gpuN or instance>:<quantity>` (e.g. `gpu0:power_w`, `i0-2g.20gb:sm_active_pct`,
`i3-1g.10gb:cpu_pct`); an empty cell is a reading that was not there. Written atomically; read
back as untrusted input (no link followed, size bounded, every header and cell checked).
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, SupportsFloat

from mlperf_mig._io import atomic_write_text, inside, read_small_text
from mlperf_mig.errors import SettingsError, UntrustedPathError
from mlperf_mig.telemetry.summary import CSV_FILE

CSV_LIMIT = 64 << 20  # 10 Hz for an hour with 100 columns is about 40 MB
MAX_COLUMNS = 2000
_COLUMN = re.compile(r"[A-Za-z0-9_+@=][A-Za-z0-9._+@=,-]{0,127}:[a-z0-9_]{1,40}")


def _cell(value: SupportsFloat | None) -> str:
    if value is None:
        return ""
    return repr(round(float(value), 6))


def write_series(
    folder: str | Path, rows: Sequence[Mapping[str, Any]], columns: Sequence[str]
) -> Path:
    """Write `rows` as `folder`/telemetry.csv (atomically); returns the path."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["t", *columns])
    for row in rows:
        writer.writerow([f"{row['t']:.3f}", *(_cell(row.get(c)) for c in columns)])
    return atomic_write_text(Path(folder) / CSV_FILE, buffer.getvalue())


def read_series(folder: str | Path) -> tuple[list[str], list[list[float | None]]]:
    """The columns (after `t`) and rows of `folder`/telemetry.csv, each value checked.

    UntrustedPathError names the file, the line and what was wrong: a link, a file too large, a
    header that is not a column name, a cell that is not a finite number, a ragged row.
    """
    path = inside(folder, CSV_FILE, "telemetry series")
    try:
        text = read_small_text(path, CSV_LIMIT)
    except SettingsError as exc:
        raise UntrustedPathError(f"{str(path)!r}: {exc}; write the run again") from None
    lines = list(csv.reader(io.StringIO(text)))
    if not lines or not lines[0] or lines[0][0] != "t":
        raise UntrustedPathError(
            f"{str(path)!r}: the first column is not 't'; the file is not a telemetry series of mlperf-mig"
        )
    header = lines[0][1:]
    if len(header) > MAX_COLUMNS or len(set(header)) != len(header):
        raise UntrustedPathError(
            f"{str(path)!r}: {len(header)} columns, or repeated ones; write the run again"
        )
    for name in header:
        if not _COLUMN.fullmatch(name) or ".." in name:
            raise UntrustedPathError(
                f"{str(path)!r}: column {name!r} is not '<gpuN or instance>:<quantity>'; write the run again"
            )
    rows: list[list[float | None]] = []
    for number, line in enumerate(lines[1:], start=2):
        if len(line) != len(header) + 1:
            raise UntrustedPathError(
                f"{str(path)!r} line {number}: {len(line)} cells for {len(header) + 1} columns; write the run again"
            )
        rows.append(
            [
                _number(cell, path, number, first)
                for first, cell in zip([True] + [False] * len(header), line)
            ]
        )
    return header, rows


def _number(cell: str, path: Path, line: int, required: bool) -> float | None:
    if cell == "" and not required:
        return None
    try:
        value = float(cell)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or abs(value) > 1e12:
        raise UntrustedPathError(
            f"{str(path)!r} line {line}: {cell!r} is not a finite number; write the run again"
        )
    return value
