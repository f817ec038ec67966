"""Issue 33, finding 6 (report's part): every string `report` prints from results.json,
repeats.json or sweep.json reaches the terminal and the HTML page with its control characters
escaped (mlperf_mig._text.printable), and in HTML escaped for HTML too."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from mlperf_mig import cli

# sets the window title, rings the bell, clears the screen, and a tag for the page
CRAFTED = "\x1b]0;pwned\x07\x1b[2J<script>x</script>"
RAW = ("\x1b", "\x07")
ESCAPED = "\\x1b]0;pwned\\x07\\x1b[2J"


def _crafted_run(good_run: Any, folder: Path) -> Path:
    """A copy of a finished run whose read-back texts all carry CRAFTED."""
    shutil.copytree(good_run.outdir, folder, ignore=shutil.ignore_patterns("*.lock"))
    path = folder / "results.json"
    data = json.loads(path.read_text())
    data["device"] = f"cpu {CRAFTED}"
    data["layout_error"] = f"layout {CRAFTED}"
    data["host_notes"] = [f"host {CRAFTED}"]
    data["emulation_notes"] = [f"emulation {CRAFTED}"]
    data["gpus"][0]["gpu"] = f"A100 {CRAFTED}"
    for instance in data["instances"]:
        instance["device"] = f"dev {CRAFTED}"
        instance["error"] = f"error {CRAFTED}"
    path.write_text(json.dumps(data))
    return folder


def _report(folder: Path, capsys: pytest.CaptureFixture[str], *forms: str) -> str:
    assert cli.main(["report", str(folder), *forms]) == 0
    return capsys.readouterr().out


def _assert_escaped(text: str, expected: list[str]) -> None:
    for raw in RAW:
        assert raw not in text
    for word in expected:
        assert f"{word} {ESCAPED}" in text, word


@pytest.mark.parametrize("form", [[], ["--markdown"]])
def test_run_report_prints_no_raw_escape(
    good_run: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], form: list[str]
) -> None:
    """device, error, host_notes, emulation_notes, layout_error: each shown escaped."""
    folder = _crafted_run(good_run, tmp_path / "run")
    out = _report(folder, capsys, *form)
    _assert_escaped(out, ["dev", "error", "host", "emulation", "layout"])


def test_html_report_holds_no_raw_escape_and_no_tag(
    good_run: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """In the HTML report the same texts are escaped for the terminal and for HTML."""
    folder = _crafted_run(good_run, tmp_path / "run")
    page = tmp_path / "report.html"
    _report(folder, capsys, "--html", str(page))
    text = page.read_text()
    for raw in RAW:
        assert raw not in text
    assert "<script>" not in text and "&lt;script&gt;" in text
    assert f"dev {ESCAPED}" in text and f"host {ESCAPED}" in text


def test_study_and_sweep_reports_print_no_raw_escape(
    good_run: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """repeats.json's baseline_source and a sweep's runs are shown escaped in text and HTML."""
    study = tmp_path / "study"
    for k in (1, 2):
        _crafted_run(good_run, study / f"repeat-{k}")
    (study / "repeats.json").write_text(
        json.dumps(
            {
                "schema": 2,
                "runs": ["repeat-1", "repeat-2"],
                "baseline_totals": [1.0],
                "baseline_source": f"base {CRAFTED}",
            }
        )
    )
    _assert_escaped(_report(study, capsys), ["base", "dev", "host"])
    page = tmp_path / "study.html"
    _report(study, capsys, "--html", str(page))
    assert not any(raw in page.read_text() for raw in RAW)
    sweep = tmp_path / "sweep"
    _crafted_run(good_run, sweep / "a")
    (sweep / "sweep.json").write_text(json.dumps({"runs": ["a"], "chart_note": CRAFTED}))
    out = _report(sweep, capsys)
    assert not any(raw in out for raw in RAW)
    page = tmp_path / "sweep.html"
    _report(sweep, capsys, "--html", str(page))
    assert not any(raw in page.read_text() for raw in RAW)
