"""Issue 33, findings 1 and 7: every JSON file read back is read with bounds (a regular file, not
a link, a size and a nesting cap, each listed folder once), and the baseline search after a
run skips a sibling it cannot read with a note instead of ending the run."""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

import mlperf_mig
from mlperf_mig import cli
from mlperf_mig._io import JSON_DEPTH_LIMIT, JSON_LIMITS, read_bounded, read_json
from mlperf_mig.errors import DataFileError

from .conftest import QUICK_NULL

DEEP = "[" * 100_000 + "]" * 100_000


def _hostile(folder: Path, kind: str) -> Path:
    """`folder/results.json` made hostile: 'deep' (100,000 levels), 'fifo' or 'huge' (a sparse
    1 GB file, which takes no disk)."""
    folder.mkdir(parents=True)
    path = folder / "results.json"
    if kind == "deep":
        path.write_text(DEEP)
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        with path.open("wb") as handle:
            handle.truncate(1 << 30)
    return path


@pytest.mark.parametrize("kind", ["deep", "fifo", "huge"])
def test_reader_refuses_in_one_line_naming_the_file(tmp_path: Path, kind: str) -> None:
    """A deep, FIFO or 1 GB file is one DataFileError naming it, at once (no wait, no read)."""
    path = _hostile(tmp_path / "x", kind)
    started = time.monotonic()
    with pytest.raises(DataFileError) as caught:
        read_json(path, "results")
    assert time.monotonic() - started < 5
    message = str(caught.value)
    assert repr(str(path)) in message and "\n" not in message
    assert {"deep": f"deeper than {JSON_DEPTH_LIMIT}", "fifo": "not a regular file"}.get(
        kind, f"more than the {JSON_LIMITS['results']}"
    ) in message


def test_reader_refuses_a_link(tmp_path: Path) -> None:
    """A results.json that is a symbolic link is refused, not followed."""
    (tmp_path / "real.json").write_text("{}")
    (tmp_path / "results.json").symlink_to(tmp_path / "real.json")
    with pytest.raises(DataFileError, match="symbolic link"):
        read_json(tmp_path / "results.json", "results")


def test_reader_refuses_moderate_nesting_below_the_recursion_limit(tmp_path: Path) -> None:
    """Nesting under Python's recursion limit but over the cap is refused too."""
    path = tmp_path / "x.json"
    path.write_text("[" * 200 + "]" * 200)
    with pytest.raises(DataFileError, match="deeper than"):
        read_json(path, "index")


def test_hostile_siblings_do_not_spoil_a_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A deep, FIFO and 1 GB sibling results.json are skipped with a note each; the run ends,
    its results.json is complete (not interrupted) and names no baseline."""
    parent = tmp_path / "runs"
    hostile = {kind: _hostile(parent / kind, kind) for kind in ("deep", "fifo", "huge")}
    with caplog.at_level(logging.WARNING):
        result = mlperf_mig.run("1g.10gb", outdir=parent / "mine", **QUICK_NULL)
    saved = json.loads((parent / "mine" / "results.json").read_text())
    assert result.ok and saved["interrupted"] is False and saved["baseline_source"] is None
    notes = [r.getMessage() for r in caplog.records if "baseline search" in r.getMessage()]
    for path in hostile.values():
        assert any(str(path) in note for note in notes), notes
    assert os.path.getsize(hostile["huge"]) == 1 << 30  # nothing of theirs was touched


@pytest.mark.parametrize("kind", ["deep", "fifo", "huge"])
def test_report_refuses_a_hostile_results_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """`report` on a deep, FIFO or 1 GB results.json: exit 2, one line naming it, no wait."""
    path = _hostile(tmp_path / "run", kind)
    started = time.monotonic()
    assert cli.main(["report", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert time.monotonic() - started < 10
    assert str(path) in err and "\n" not in err and "Traceback" not in err


def test_report_reads_a_run_listed_a_million_times_not_once_each(
    good_run: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A sweep.json listing one run 10^6 times is refused in one line before any run is read."""
    sweep = tmp_path / "sweep"
    shutil.copytree(good_run.outdir, sweep / "run", ignore=shutil.ignore_patterns("*.lock"))
    (sweep / "sweep.json").write_text(json.dumps({"runs": ["run"] * 1_000_000}))
    started = time.monotonic()
    assert cli.main(["report", str(sweep)]) == 2
    err = capsys.readouterr().err.strip()
    assert time.monotonic() - started < 30
    assert "listed again" in err and "sweep.json" in err and "\n" not in err


@pytest.mark.parametrize("index", ["repeats.json", "sweep.json"])
@pytest.mark.parametrize("kind", ["deep", "fifo", "huge"])
def test_report_refuses_a_hostile_index(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], index: str, kind: str
) -> None:
    """`report` on a deep, FIFO or 1 GB repeats.json or sweep.json: exit 2, one line naming it."""
    path = _hostile(tmp_path / "study", kind).rename(tmp_path / "study" / index)
    started = time.monotonic()
    assert cli.main(["report", str(tmp_path / "study")]) == 2
    err = capsys.readouterr().err.strip()
    assert time.monotonic() - started < 10
    assert str(path) in err and "\n" not in err and "Traceback" not in err


# --- the one bounded reader under read_json, read_small_text, the dataset and the tokenizer ----
def test_read_bounded_follows_a_link_only_when_told(tmp_path: Path) -> None:
    """A file read back through a link is refused unread; a file the user named through a link
    (a Hugging Face cache links its files) is read."""
    target = tmp_path / "target.json"
    target.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    with pytest.raises(DataFileError, match="a symbolic link"):
        read_bounded(link, 100, DataFileError)
    assert read_bounded(link, 100, DataFileError, follow_links=True) == b"{}"


@pytest.mark.parametrize("kind", ["fifo", "huge"])
def test_read_bounded_refuses_a_fifo_or_a_large_file_without_reading_it(
    tmp_path: Path, kind: str
) -> None:
    """A FIFO is refused without waiting on it, and a file over the limit by its size, even
    when links are followed; a missing file is FileNotFoundError, for the caller to word."""
    path = _hostile(tmp_path / "run", kind)
    why = {"fifo": "not a regular file", "huge": f"{1 << 30} bytes, more than the 64 a log"}
    with pytest.raises(DataFileError, match=why[kind]):
        read_bounded(path, 64, DataFileError, kind="log", follow_links=True)
    with pytest.raises(FileNotFoundError):
        read_bounded(tmp_path / "missing", 64, DataFileError)
