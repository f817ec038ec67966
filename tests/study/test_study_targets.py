"""Issue 33, finding 2: a study measures what it compares. Every repeat and alone run of a
Server study calibrates its own target (none reuses the one an earlier run kept in the cache),
and a study whose runs did reuse one (an older study, resumed) says which in its table, its
HTML report, a sweep's table and the advisor, and computes no interval over them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import mlperf_mig
from mlperf_mig import cli
from mlperf_mig.study.repeats import RepeatedRun

# every test here reads a study that runs workers (3 repeats and the isolated runs)
pytestmark = pytest.mark.slow

# a Server study of onnxruntime's tiny ResNet50 (a backend whose targets the cache keeps; the
# null backend's are never kept), calibrating its target: no target_qps is set
SERVER_STUDY: dict[str, Any] = {
    "loadgen_scenario": "Server",
    "backend": "onnxruntime",
    "variant": "tiny",
    "settings": {"min_duration": 300, "min_query_count": 16},
    "progress": False,
    "accuracy": False,
    "telemetry": False,
}


@pytest.fixture(scope="module", name="server_study")
def fixture_server_study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`--repeats 3 --isolation` of 2g.20gb+1g.10gb in Server, into a fresh cache."""
    root = tmp_path_factory.mktemp("targets")
    mlperf_mig.run(
        "2g.20gb+1g.10gb",
        outdir=root / "study",
        repeats=3,
        isolation=True,
        cache_dir=root / "cache",
        **SERVER_STUDY,
    )
    return root / "study"


def _instance_runs(study: Path) -> list[tuple[str, dict[str, Any]]]:
    """(folder/instance, performance) of every instance run of the study, read from disk."""
    found = []
    for results in sorted(study.glob("**/results.json")):
        for instance in json.loads(results.read_text())["instances"]:
            where = results.parent.relative_to(study)
            found.append((f"{where}/{instance['name']}", instance["performance"]))
    return found


def test_every_instance_run_of_a_study_measured_its_own_target(server_study: Path) -> None:
    """All 12 instance runs (3 repeats of 2 instances, 3 alone runs of each of 2 profiles)
    calibrated their target; none is labelled as an earlier run's."""
    runs = _instance_runs(server_study)
    assert len(runs) == 12
    sources = {where: performance["target_source"] for where, performance in runs}
    assert set(sources.values()) == {"calibration"}, sources
    study = RepeatedRun.load(server_study)
    assert study.reused_targets() == [] and study.reuse_note() is None


def test_a_study_with_a_reused_target_says_so_everywhere(
    server_study: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Runs that reused a target (repeat-2's i0, as an older study wrote it): the report names
    them, shows ranges without a 95% interval, and so do the HTML report and the advisor."""
    study = tmp_path / "study"
    shutil.copytree(server_study, study, ignore=shutil.ignore_patterns("*.lock"))
    results = study / "repeat-2" / "results.json"
    data = json.loads(results.read_text())
    data["instances"][0]["performance"]["target_source"] = "cached calibration"
    results.write_text(json.dumps(data))
    assert cli.main(["report", str(study)]) == 0
    out = capsys.readouterr().out
    assert "REUSED TARGETS: 1 of 12 instance runs" in out and "repeat-2/i0" in out
    assert "±" not in out and "(range " in out
    loaded = RepeatedRun.load(study)
    assert loaded.total is not None and not loaded.total.shows_interval
    assert all(not change.shows_interval for change in loaded.changes())
    page = tmp_path / "report.html"
    assert cli.main(["report", str(study), "--html", str(page)]) == 0
    capsys.readouterr()
    assert "REUSED TARGETS" in page.read_text() and "repeat-2/i0" in page.read_text()
    assert cli.main(["advise", "--from", str(study)]) == 0
    assert "repeat-2/i0" in capsys.readouterr().out


def test_sweep_table_counts_reused_targets(server_study: Path, tmp_path: Path) -> None:
    """A sweep of studies shows a 'reused targets' column and note when one of them reused."""
    from mlperf_mig.study.sweep import SweepResult

    sweep = tmp_path / "sweep"
    shutil.copytree(server_study, sweep / "layout", ignore=shutil.ignore_patterns("*.lock"))
    results = sweep / "layout" / "alone-1g.10gb" / "repeat-1" / "results.json"
    data = json.loads(results.read_text())
    data["instances"][0]["performance"]["target_source"] = "cached calibration"
    results.write_text(json.dumps(data))
    (sweep / "sweep.json").write_text(
        json.dumps({"runs": ["layout/repeat-1"], "studies": ["layout"]})
    )
    table = SweepResult.load(sweep).table()
    assert "reused targets" in table and "1 of 12" in table
