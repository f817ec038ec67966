"""telemetry.csv: written atomically, read back as untrusted input."""

from __future__ import annotations

import itertools
import os

import pytest

from mlperf_mig.errors import UntrustedPathError
from mlperf_mig.telemetry.series import read_series, write_series

COLUMNS = ["gpu0:power_w", "i0-2g.20gb:sm_active_pct"]


def test_series_round_trips(tmp_path):
    """Rows written are read back, empty readings as None."""
    write_series(
        tmp_path,
        [
            {"t": 1.5, "gpu0:power_w": 250.0},
            {"t": 1.6, "gpu0:power_w": None, "i0-2g.20gb:sm_active_pct": 80.5},
        ],
        COLUMNS,
    )
    assert read_series(tmp_path) == (COLUMNS, [[1.5, 250.0, None], [1.6, None, 80.5]])


@pytest.mark.parametrize(
    "text",
    [
        "t,gpu0:power_w\n1.0,nan\n",
        "t,../x:power_w\n1.0,2\n",
        "t,gpu0:power_w\n1.0\n",
        "x,gpu0:power_w\n1,2\n",
        "t,gpu0:power_w\n,2\n",
        "t,gpu0:power_w,gpu0:power_w\n1,2,3\n",
    ],
)
def test_a_malformed_series_is_refused_naming_the_file(tmp_path, text):
    """NaN, a path in a column name, a ragged row, a wrong first column, a missing time or a
    repeated column is one UntrustedPathError naming the file."""
    (tmp_path / "telemetry.csv").write_text(text)
    with pytest.raises(UntrustedPathError, match=r"telemetry\.csv"):
        read_series(tmp_path)


def test_a_linked_series_is_not_followed(tmp_path):
    """telemetry.csv as a symlink is refused, not read."""
    (tmp_path / "elsewhere.csv").write_text("t,gpu0:power_w\n1,2\n")
    os.symlink(tmp_path / "elsewhere.csv", tmp_path / "telemetry.csv")
    with pytest.raises(UntrustedPathError, match="symbolic link"):
        read_series(tmp_path)


@pytest.mark.parametrize("kind", ["fifo", "not-utf8", "huge-cell", "empty"])
def test_a_hostile_series_is_refused_without_waiting(tmp_path, kind):
    """A FIFO, bytes that are not UTF-8, a cell beyond the CSV field limit or an empty file is
    one UntrustedPathError naming the file (a FIFO is not waited on)."""
    path = tmp_path / "telemetry.csv"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "not-utf8":
        path.write_bytes(b"t,gpu0:power_w\n1,\xff\xfe\n")
    elif kind == "huge-cell":
        path.write_text("t,gpu0:power_w\n1," + "9" * 200_000 + "\n")
    else:
        path.write_text("")
    with pytest.raises(UntrustedPathError, match=r"telemetry\.csv"):
        read_series(tmp_path)


def test_only_the_wanted_columns_and_at_most_max_rows_are_kept(tmp_path):
    """read_series(wanted, max_rows) keeps those columns, and rows evenly spaced, the first kept."""
    rows = [
        {"t": float(k), "gpu0:power_w": k * 2.0, "i0-2g.20gb:sm_active_pct": 1.0}
        for k in range(1000)
    ]
    write_series(tmp_path, rows, COLUMNS)
    columns, kept = read_series(tmp_path, ["gpu0:power_w", "gpu9:power_w"], max_rows=100)
    assert columns == ["gpu0:power_w"]
    assert 50 <= len(kept) <= 100 and kept[0] == [0.0, 0.0]
    steps = {b[0] - a[0] for a, b in itertools.pairwise(kept)}
    assert len(steps) == 1  # evenly spaced
