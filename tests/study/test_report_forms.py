"""Every form of every report read back from folders written before the one layout result and
the one report base: the text, Markdown and HTML tables, the JSON, the DataFrames, the chart's
bars, the change figure's points, the HTML report's sections and the advice are unchanged.

`fixtures/reports/` holds the results.json, repeats.json, sweep.json and telemetry.csv of a run
of two emulated GPUs (independent and unified), a study (2 repeats with isolation), a sweep and a
sweep of 3 repeats, all on the null backend; `fixtures/reports_expected.json` is what the code
before the change made of them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import attrs
import pytest

from mlperf_mig.runner.results import RunResult
from mlperf_mig.study.advisor import advise_from, measurements_from
from mlperf_mig.study.chart import chart_bar, gpu_bars
from mlperf_mig.study.report_html import _layout_sections, change_points
from mlperf_mig.study.sweep import load_report

FIXTURES = Path(__file__).parent / "fixtures"
FOLDERS = ("system", "unified", "study", "sweep", "sweep3", "sweep/scenario-5", "study/repeat-1")


def _advice(report: Any) -> Any:
    try:
        advice = advise_from(measurements_from(report.layouts, 7, report.capacities))
    except Exception as exc:  # what the advisor said of these runs, error included
        return f"{type(exc).__name__}: {exc}"
    return [advice.table(), advice.to_markdown(), advice._repr_html_()]


def _forms(report: Any) -> dict[str, Any]:
    layouts = list(report.layouts)
    return {
        "table": report.table(),
        "str": str(report),
        "markdown": report.to_markdown(),
        "html": report._repr_html_(),
        "dict": report.to_dict(),
        "pandas": report.to_pandas().to_dict(orient="list"),
        "bars": [None if b is None else attrs.asdict(b) for b in map(chart_bar, layouts)],
        "gpu_bars": [[attrs.asdict(b) for b in gpu_bars(layout)] for layout in layouts],
        "change_points": change_points(layouts),
        "sections": _layout_sections(layouts),
        "advice": _advice(report),
    }


def _snapshot(root: Path) -> dict[str, Any]:
    found = {name: _forms(load_report(root / name)) for name in FOLDERS}
    found["system.results.json"] = RunResult.load(root / "system").to_dict()
    text = json.dumps(found, default=str).replace(str(root), "<tree>")
    return json.loads(text)


@pytest.fixture(scope="module", name="snapshot")
def fixture_snapshot(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The forms of every fixture folder, read from a copy (outdirs named `<tree>`)."""
    pytest.importorskip("pandas")
    root = tmp_path_factory.mktemp("forms") / "reports"
    shutil.copytree(FIXTURES / "reports", root)
    return _snapshot(root)


@pytest.fixture(scope="module", name="expected")
def fixture_expected() -> dict[str, Any]:
    return json.loads((FIXTURES / "reports_expected.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_form_of_a_report_is_unchanged(
    folder: str, snapshot: dict[str, Any], expected: dict[str, Any]
) -> None:
    """Each form of the report of `folder` is what it was before the report base."""
    for form, value in expected[folder].items():
        assert snapshot[folder][form] == value, form


def test_results_json_is_unchanged(snapshot: dict[str, Any], expected: dict[str, Any]) -> None:
    """A run of two GPUs read back writes the same results.json: per-GPU records included."""
    assert snapshot["system.results.json"] == expected["system.results.json"]
    original = json.loads((FIXTURES / "reports" / "system" / "results.json").read_text())
    again = RunResult.load(FIXTURES / "reports" / "system").to_dict()
    assert json.dumps(again, indent=2) == json.dumps(original, indent=2)
