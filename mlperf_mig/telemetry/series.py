"""telemetry.csv: the sampled time series beside results.json, one row per sample.

Column `t` is wall-clock seconds since 1970 (UTC, the LoadGen logs' clock); every other column is
`<gpuN or instance>:<quantity>` (e.g. `gpu0:power_w`, `i0-2g.20gb:sm_active_pct`,
`i3-1g.10gb:cpu_pct`); an empty cell is a reading that was not there. Written atomically; read
back as untrusted input (no link followed, size bounded, every header and cell checked).
"""

from __future__ import annotations

import contextlib
import csv
import errno
import io
import math
import os
import re
import stat
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, SupportsFloat

from mlperf_mig._io import atomic_write_text, inside
from mlperf_mig.errors import UntrustedPathError
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


def read_series(
    folder: str | Path, wanted: Sequence[str] | None = None, max_rows: int | None = None
) -> tuple[list[str], list[list[float | None]]]:
    """The columns (after `t`) and rows of `folder`/telemetry.csv, each value checked.

    `wanted`: only these columns are kept (in their order; every header is still checked);
    `max_rows`: at most this many rows are kept, evenly spaced (every 2nd, 4th, ... row as the
    file grows), so that a chart holds what it can draw, never the whole file. The file is read
    a line at a time. UntrustedPathError names the file, the line and what was wrong: a link, a
    file too large, a header that is not a column name, a cell that is not a finite number, a
    ragged row.
    """
    path = inside(folder, CSV_FILE, "telemetry series")
    with _opened(path) as handle:
        lines = csv.reader(handle)
        try:
            first = next(lines, None)
            if not first or first[0] != "t":
                raise UntrustedPathError(
                    f"{str(path)!r}: the first column is not 't'; the file is not a telemetry "
                    "series of mlperf-mig"
                )
            header = _checked_header(first[1:], path)
            keep = list(header) if wanted is None else [c for c in wanted if c in header]
            positions = [0, *(1 + header.index(c) for c in keep)]
            rows: list[list[float | None]] = []
            stride = 1
            for index, line in enumerate(lines):
                number = index + 2
                if len(line) != len(header) + 1:
                    raise UntrustedPathError(
                        f"{str(path)!r} line {number}: {len(line)} cells for {len(header) + 1} "
                        "columns; write the run again"
                    )
                if index % stride:
                    continue
                rows.append([_number(line[k], path, number, k == 0) for k in positions])
                if max_rows is not None and len(rows) > max_rows:
                    rows = rows[::2]
                    stride *= 2
        except (UnicodeDecodeError, csv.Error) as exc:
            raise UntrustedPathError(
                f"{str(path)!r}: not a CSV file of UTF-8 text ({exc}); write the run again"
            ) from None
    return keep, rows


def read_columns(folder: str | Path) -> list[str]:
    """The checked column names (after `t`) of `folder`/telemetry.csv, from its first line."""
    path = inside(folder, CSV_FILE, "telemetry series")
    with _opened(path) as handle:
        try:
            first = next(csv.reader(handle), None)
        except (UnicodeDecodeError, csv.Error) as exc:
            raise UntrustedPathError(
                f"{str(path)!r}: not a CSV file of UTF-8 text ({exc}); write the run again"
            ) from None
    if not first or first[0] != "t":
        raise UntrustedPathError(
            f"{str(path)!r}: the first column is not 't'; the file is not a telemetry series of mlperf-mig"
        )
    return _checked_header(first[1:], path)


@contextlib.contextmanager
def _opened(path: Path) -> Iterator[io.TextIOWrapper]:
    """`path` open as UTF-8 text: a regular file reached without a link, at most CSV_LIMIT
    bytes (checked before reading), read a line at a time."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        why = (
            "a symbolic link" if exc.errno == errno.ELOOP else f"unreadable: {exc.strerror or exc}"
        )
        raise UntrustedPathError(f"{str(path)!r}: {why}; write the run again") from None
    handle = io.TextIOWrapper(os.fdopen(fd, "rb"), encoding="utf-8", newline="")
    with handle:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise UntrustedPathError(f"{str(path)!r}: not a regular file; write the run again")
        if status.st_size > CSV_LIMIT:
            raise UntrustedPathError(
                f"{str(path)!r}: larger than {CSV_LIMIT} bytes; write the run again"
            )
        yield handle


def _checked_header(header: list[str], path: Path) -> list[str]:
    if len(header) > MAX_COLUMNS or len(set(header)) != len(header):
        raise UntrustedPathError(
            f"{str(path)!r}: {len(header)} columns, or repeated ones; write the run again"
        )
    for name in header:
        if not _COLUMN.fullmatch(name) or ".." in name:
            raise UntrustedPathError(
                f"{str(path)!r}: column {name!r} is not '<gpuN or instance>:<quantity>'; write the run again"
            )
    return header


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
