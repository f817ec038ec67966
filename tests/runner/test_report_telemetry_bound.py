"""Issue 33, finding 8 (telemetry): the HTML report's time-series figure reads only the columns
and at most the rows it draws, so a telemetry.csv within its own size limit (63 MiB) does not
make `report --html` hold the whole file as Python objects (1.9 GB before)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mlperf_mig.telemetry.figure import MAX_ROWS, series_for_figure
from mlperf_mig.telemetry.series import CSV_LIMIT

FILLER_COLUMNS = 1500


def _huge_series(good_run: Any, folder: Path) -> Path:
    """A copy of a finished run whose telemetry.csv is ~63 MiB: its own columns plus
    FILLER_COLUMNS more, over enough rows to reach the size."""
    shutil.copytree(good_run.outdir, folder, ignore=shutil.ignore_patterns("*.lock"))
    csv = folder / "telemetry.csv"
    header = csv.read_text().splitlines()[0].split(",")
    filler = [f"gpu0:fill_{k}" for k in range(FILLER_COLUMNS)]
    cells = ",".join(["1.5"] * (len(header) - 1 + FILLER_COLUMNS))
    row_bytes = len(cells) + 16
    count = (63 << 20) // row_bytes
    t0 = 1_700_000_000.0
    body = "".join(f"{t0 + k * 0.1:.3f},{cells}\n" for k in range(count))
    csv.write_text(",".join([*header, *filler]) + "\n" + body)
    assert (62 << 20) < csv.stat().st_size <= CSV_LIMIT
    return folder


def test_figure_keeps_only_what_it_draws(good_run: Any, tmp_path: Path) -> None:
    """The figure's data has at most MAX_ROWS rows and only its own lines' columns."""
    if good_run.telemetry is None:
        pytest.skip("the run recorded no telemetry")
    folder = _huge_series(good_run, tmp_path / "run")
    data = series_for_figure(folder, good_run.telemetry)
    assert 0 < len(data["t"]) <= MAX_ROWS
    assert not any("fill" in name for name in [*data["util"], *data["power"]])


def test_report_html_of_a_63_mib_series_stays_small(good_run: Any, tmp_path: Path) -> None:
    """`report --html` on the 63 MiB series finishes, draws the figure and peaks under 700 MB
    of resident memory (the interpreter, numpy and matplotlib included)."""
    if good_run.telemetry is None:
        pytest.skip("the run recorded no telemetry")
    folder = _huge_series(good_run, tmp_path / "run")
    page = tmp_path / "report.html"
    probe = (
        "import resource, sys\n"
        "from mlperf_mig import cli\n"
        f"code = cli.main(['report', {str(folder)!r}, '--html', {str(page)!r}])\n"
        "peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024\n"
        "print('peak-mib', peak)\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    peak = int(done.stdout.split("peak-mib")[1].split()[0])
    assert peak < 700, peak
    assert "Time series of" in page.read_text() and "<svg" in page.read_text()
