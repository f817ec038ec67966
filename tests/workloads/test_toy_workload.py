"""A workload is one folder: a toy workload (its own interface, samples, dataset reader, scorer,
settings and checker facts, in tests/workloads/fixtures/toy/) runs end to end, from the plan
through both modes to a report and a submission tree the checker accepts, on the null backend,
with no file of the library changed."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import mlperf_mig
from mlperf_mig import workloads
from mlperf_mig.errors import WorkloadError
from mlperf_mig.submission import check_submission, write_submission

pytestmark = pytest.mark.slow

TOY_SOURCE = Path(__file__).with_name("fixtures") / "toy"
# what the checker needs of an open Offline result, in seconds on the null backend
CHECKER_SETTINGS = {
    "min_duration": 600000,
    "performance_sample_count_override": 8,
    "target_qps": 0.1,
}


def _forget_table() -> None:
    workloads._table.cache_clear()
    importlib.invalidate_caches()


@pytest.fixture(scope="module", name="toy")
def fixture_toy() -> Iterator[Any]:
    """The toy folder as mlperf_mig/workloads/toy/ while this module's tests run, then gone."""
    folder = Path(workloads.__file__).with_name("toy")
    assert not folder.exists(), f"{folder} is left from an earlier run: remove it"
    shutil.copytree(TOY_SOURCE, folder, ignore=shutil.ignore_patterns("__pycache__"))
    _forget_table()
    try:
        yield workloads.get_workload("toy")
    finally:
        shutil.rmtree(folder)
        for name in [m for m in sys.modules if m.startswith("mlperf_mig.workloads.toy")]:
            del sys.modules[name]
        _forget_table()


@pytest.fixture(scope="module", name="numbers")
def fixture_numbers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Eight lines of four numbers; the null backend answers 0, which is the sum of half."""
    path = tmp_path_factory.mktemp("toy-data") / "numbers.txt"
    rows = [
        "0 0 0 0",
        "1 2 3 4",
        "-1 1 -2 2",
        "5 5 5 5",
        "0 0 0 0",
        "2 2 2 2",
        "3 -3 0 0",
        "9 1 1 1",
    ]
    path.write_text("\n".join(rows) + "\n")
    return path


def _run(toy: Any, numbers: Path, outdir: Path, mode: str) -> Any:
    return mlperf_mig.run(
        "1g.10gb+1g.10gb",
        benchmark="toy",
        emulate=True,
        mode=mode,
        backend="null",
        dataset=numbers,
        settings=CHECKER_SETTINGS,
        telemetry=False,
        progress=False,
        outdir=outdir,
    )


@pytest.fixture(scope="module", name="runs")
def fixture_runs(toy: Any, numbers: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The toy layout measured in both modes."""
    root = tmp_path_factory.mktemp("toy-runs")
    return {mode: _run(toy, numbers, root / mode, mode) for mode in ("independent", "unified")}


def test_the_table_finds_the_folder(toy: Any) -> None:
    """The table lists the toy once it is a folder, and plans resolve the name to its object."""
    assert "toy" in workloads.workload_names()
    plan = mlperf_mig.plan("1g.10gb", benchmark="toy", emulate=True, backend="null")
    assert plan.benchmark is toy


@pytest.mark.parametrize("mode", ["independent", "unified"])
def test_both_modes_score_with_the_toys_scorer(runs: dict, mode: str) -> None:
    """Each accuracy run (every instance's; the layout's one in unified mode) is scored by the
    toy: the null backend's zeros are the sum of four of the eight lines."""
    run = runs[mode]
    assert run.benchmark == "toy"
    tests = [run.layout_accuracy] if mode == "unified" else [i.accuracy for i in run.instances]
    scored = [t.accuracy for t in tests if t is not None and t.accuracy is not None]
    assert scored and all(a.metric == "exact" and a.value == pytest.approx(50.0) for a in scored)


def test_report_and_submission_tree(runs: dict, tmp_path: Path) -> None:
    """The report names the toy, and the open submission tree of both runs passes the checker."""
    result = subprocess.run(
        [sys.executable, "-m", "mlperf_mig", "report", str(runs["unified"].outdir)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "toy" in result.stdout
    outdir = tmp_path / "submission"
    write_submission(
        [runs["independent"].outdir, runs["unified"].outdir],
        division="open",
        submitter="Toys",
        outdir=outdir,
    )
    results = list(
        (outdir / "open" / "Toys" / "results").glob("*/toy/Offline/accuracy/accuracy.txt")
    )
    assert len(results) == 3  # two instances and the unified layout
    assert check_submission(outdir) == ()


def test_the_checker_reads_the_toys_accuracy_line(toy: Any) -> None:
    """The accuracy line the writer takes from the toy is the one its checker pattern reads (the
    null backend's runs are not meaningful, so their accuracy.txt carries no figure)."""
    from mlperf_mig.submission import accuracy, rules

    figures = accuracy.AccuracyFigures(model="toy", values=toy.accuracy_figures(50.0, 8, {}))
    assert rules.accuracy_pattern("toy").match(figures.line()).group(1) == "50.000"


def test_a_response_kind_the_harness_cannot_give_is_refused(toy: Any) -> None:
    """A workload whose responses stream tokens is refused by name before LoadGen starts."""
    import attrs

    from mlperf_mig.harness.sut import payload_layout

    streaming = attrs.evolve(toy, response=attrs.evolve(toy.response, kind="token stream"))
    with pytest.raises(WorkloadError, match="token stream"):
        payload_layout(streaming)
