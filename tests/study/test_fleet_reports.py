"""Reports of whole systems show the per-GPU level: sweep and repeats tables, the HTML figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mlperf_mig.study.chart import gpu_bars

from .conftest import QUICK_NULL

pytestmark = pytest.mark.slow  # starts the runner's workers

SYSTEM = {"gpu_count": 2, "emulate": True, "telemetry": False}


@pytest.fixture(scope="module", name="sweep")
def fixture_sweep(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Two layouts, each on two emulated GPUs."""
    import mlperf_mig

    return mlperf_mig.sweep(
        ["1g.10gb+1g.10gb", "2g.20gb"],
        outdir=tmp_path_factory.mktemp("fleet") / "sweep",
        chart=False,
        **SYSTEM,
        **QUICK_NULL,
    )


@pytest.fixture(scope="module", name="repeated")
def fixture_repeated(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One layout on two emulated GPUs, run twice."""
    import mlperf_mig

    return mlperf_mig.run(
        "1g.10gb+1g.10gb",
        repeats=2,
        outdir=tmp_path_factory.mktemp("fleet") / "study",
        **SYSTEM,
        **QUICK_NULL,
    )


def test_sweep_table_has_each_gpus_subtotal(sweep: Any) -> None:
    """The sweep's table has a per-GPU column naming both GPUs of each layout."""
    assert "per GPU" in sweep.columns()
    for row in sweep.rows():
        assert "GPU 0 " in row["per GPU"] and "GPU 1 " in row["per GPU"]


def test_repeats_table_has_gpu_subtotal_rows(repeated: Any) -> None:
    """A repeated system's table has one subtotal row per GPU, with its repeats' range."""
    rows = {r["instance"]: r for r in repeated.instance_rows()}
    assert rows["GPU 0 subtotal"]["min-max"] is not None
    assert "GPU 1 subtotal" in repeated.table()


def test_repeated_gpu_subtotals_are_the_runs_subtotals(repeated: Any) -> None:
    """Each GPU's summary is over the subtotals each repeat measured."""
    values = [run.gpu_rows()[1].subtotal for run in repeated.runs]
    summary = repeated.gpu_subtotals(1)
    assert summary.min == pytest.approx(min(values)) and summary.max == pytest.approx(max(values))


def test_gpu_bars_stack_each_gpus_instances(sweep: Any) -> None:
    """One bar per GPU, stacked by its instances, topped by its subtotal."""
    run = sweep.runs[0]
    bars = gpu_bars(run)
    assert [b.label.split("\n")[0] for b in bars] == ["GPU 0", "GPU 1"]
    for bar, row in zip(bars, run.gpu_rows()):
        assert len(bar.stack) == 2 and bar.total == pytest.approx(row.subtotal)
        assert sum(v for _, v in bar.stack) == pytest.approx(row.subtotal)


def test_html_report_draws_a_chart_per_gpu(sweep: Any, tmp_path: Path) -> None:
    """The HTML report has a per-GPU figure for each system."""
    pytest.importorskip("matplotlib")
    from mlperf_mig.study.report_html import report_html

    page = report_html(sweep)
    assert page.count("<h2>Per GPU:") == 2


@pytest.fixture(scope="module", name="single_profiles")
def fixture_single_profiles(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Five emulated GPUs carrying study layouts 1-5 (one profile each), measured at once."""
    import mlperf_mig

    return mlperf_mig.run(
        1,
        gpus="all",
        layouts={1: 2, 2: 3, 3: 4, 4: 5},
        outdir=tmp_path_factory.mktemp("fleet") / "run",
        **{**SYSTEM, "gpu_count": 5},
        **QUICK_NULL,
    )


def test_advise_reads_each_gpu_of_a_system(single_profiles: Any) -> None:
    """advise on a system run ranks layouts of one GPU from each GPU's instances, and says so."""
    from mlperf_mig import advise

    advice = advise(from_dir=single_profiles.outdir, progress=False)
    assert advice.ranking
    assert any("the advice is per GPU" in label and "GPU 4" in label for label in advice.labels)


def test_advise_refuses_a_unified_system(sweep: Any, tmp_path: Path) -> None:
    """A unified system run has no per-GPU measurement: advise says so in one line."""
    import attrs

    from mlperf_mig.errors import SettingsError

    unified = attrs.evolve(sweep.runs[0], mode="unified")
    with pytest.raises(SettingsError, match="independent mode to measure each GPU"):
        unified.gpu_runs()
