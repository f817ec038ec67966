"""What a user of an LLM run sees of its tokens/s: one total per run (`RunResult.tokens_per_second`)
in the tables, the repeats' per-GPU subtotals, and figures 1 and 2 of the HTML report charted in
tokens/s; every expected value is computed from the runs' own results."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import attrs
import pytest

import mlperf_mig
from mlperf_mig.runner.results import RunResult
from mlperf_mig.study.chart import chart_bar, charted_rate, gpu_bars
from mlperf_mig.study.report_html import NO_TOKEN_BASELINE, change_points, report_html
from mlperf_mig.study.sweep import SweepResult
from mlperf_mig.study.tokens import gpu_tokens_per_s, run_token_values

from .conftest import QUICK_NULL

pytestmark = pytest.mark.slow  # starts the runner's workers

FIXTURES = Path(__file__).parent / "fixtures"
LLM = {
    **QUICK_NULL,
    "benchmark": "llama3.1-8b",
    "loadgen_scenario": "Offline",
    "telemetry": False,
    "settings": {"min_duration": 300, "max_tokens": 4},
}


def _own_tokens(run: RunResult, names: Any = None) -> float:
    """The sum of the tokens/s the instances' own LoadGen results report (those named)."""
    return sum(
        i.performance.tokens.tokens_per_second
        for i in run.instances
        if names is None or i.name in names
    )


def _number(cell: Any) -> float:
    """The mean of a table cell ('1,234.50 (range ...)' or a number)."""
    return cell if isinstance(cell, float) else float(str(cell).split(" ")[0].replace(",", ""))


@pytest.fixture(name="sweep", scope="module")
def fixture_sweep(tmp_path_factory: pytest.TempPathFactory) -> SweepResult:
    """llama3.1-8b Offline on MIG scenarios 1 and 7, independent mode."""
    outdir = tmp_path_factory.mktemp("llm-report") / "sweep"
    return mlperf_mig.sweep([1, 7], outdir=outdir, chart=False, **LLM)


@pytest.fixture(name="unified", scope="module")
def fixture_unified(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    """llama3.1-8b Offline on MIG scenario 7, one LoadGen for the layout."""
    outdir = tmp_path_factory.mktemp("llm-report") / "unified"
    return mlperf_mig.run(7, mode="unified", outdir=outdir, **LLM)


@pytest.fixture(name="system", scope="module")
def fixture_system(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """llama3.1-8b Offline, 1g.10gb+1g.10gb on each of two emulated GPUs, two repeats."""
    outdir = tmp_path_factory.mktemp("llm-report") / "system"
    return mlperf_mig.run(
        "1g.10gb+1g.10gb", repeats=2, gpu_count=2, emulate=True, outdir=outdir, **LLM
    )


# --- one total tokens/s ----------------------------------------------------------------------------
def test_an_independent_runs_tokens_per_second_is_the_sum_of_its_instances(
    sweep: SweepResult,
) -> None:
    """Independent: the total is the sum of the instances' own tokens/s, and the results table's
    total row, the study's row and the advisor's rate all show that one figure."""
    for run in sweep.runs:
        assert run.ok, run.table()
        assert run.tokens_per_second == pytest.approx(_own_tokens(run))
        total_row = run.instance_rows()[-1]
        assert total_row["tokens/s"] == run.tokens_per_second
        assert run_token_values(run)["tokens/s"] == run.tokens_per_second


def test_a_unified_runs_tokens_per_second_is_its_loadgens(unified: RunResult) -> None:
    """Unified: the total is the layout's LoadGen's tokens/s."""
    assert unified.ok, unified.table()
    assert unified.tokens_per_second == unified.layout_result.tokens.tokens_per_second
    assert unified.instance_rows()[-1]["tokens/s"] == unified.tokens_per_second


def test_an_instance_without_tokens_leaves_the_total_unknown(sweep: SweepResult) -> None:
    """A failed instance (no result) makes the total None, not the sum of the others."""
    run = sweep.runs[1]
    broken = attrs.evolve(
        run, instances=[attrs.evolve(run.instances[0], performance=None), *run.instances[1:]]
    )
    assert broken.tokens_per_second is None and broken.tokens_per_joule is None


def test_a_workload_that_answers_samples_has_no_tokens_per_second() -> None:
    """ResNet50 runs (the report fixtures) have no tokens/s, and their table no column for it."""
    run = RunResult.load(FIXTURES / "reports" / "system")
    assert run.total_throughput and run.tokens_per_second is None
    assert "tokens/s" not in run.columns()


# --- repeats on several GPUs -----------------------------------------------------------------------
def test_repeats_gpu_subtotal_rows_carry_each_gpus_tokens_per_second(system: Any) -> None:
    """Each GPU subtotal row of a repeated system: the mean over the repeats of the sum of that
    GPU's instances' tokens/s, with the range of the two repeats."""
    rows = {r["instance"]: r for r in system.instance_rows()}
    for gpu in system.first.gpu_rows():
        cell = rows[f"GPU {gpu.index} subtotal"]["tokens/s"]
        values = [_own_tokens(run, gpu.instances) for run in system.runs]
        assert _number(cell) == pytest.approx(sum(values) / len(values), rel=1e-3)
        assert "(range" in cell
    assert "tokens/s" in system.columns()


def test_a_gpu_keeps_its_tokens_per_second_when_another_gpus_instance_failed(system: Any) -> None:
    """GPU 0's tokens/s is its own instances' sum even where an instance of GPU 1 has no result."""
    run = system.first
    gpus = run.gpu_rows()
    failed = gpus[1].instances[0]
    broken = attrs.evolve(
        run,
        instances=[
            attrs.evolve(i, performance=None) if i.name == failed else i for i in run.instances
        ],
    )
    assert gpu_tokens_per_s(broken, 0) == pytest.approx(_own_tokens(run, gpus[0].instances))
    assert gpu_tokens_per_s(broken, 1) is None and broken.tokens_per_second is None


def test_a_unified_systems_gpus_share_the_tokens_by_samples_served(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Unified over two GPUs: each GPU's tokens/s is the LoadGen's shared by the samples its
    instances served, as its throughput subtotal is."""
    outdir = tmp_path_factory.mktemp("llm-report") / "unified-system"
    run = mlperf_mig.run(
        "1g.10gb+1g.10gb", mode="unified", gpu_count=2, emulate=True, outdir=outdir, **LLM
    )
    assert run.ok, run.table()
    served_all = sum(i.dispatched_samples for i in run.instances)
    for position, gpu in enumerate(run.gpu_rows()):
        served = sum(i.dispatched_samples for i in run.instances if i.name in gpu.instances)
        expected = run.tokens_per_second * served / served_all
        assert gpu_tokens_per_s(run, position) == pytest.approx(expected)
        assert gpu_bars(run)[position].total == pytest.approx(expected)
    # the run's own table: each GPU's subtotal row carries the same share
    subtotals = [r for r in run.instance_rows() if str(r["instance"]).endswith("subtotal")]
    assert [r["tokens/s"] for r in subtotals] == pytest.approx(
        [gpu_tokens_per_s(run, k) for k in range(len(subtotals))]
    )
    assert sum(r["tokens/s"] for r in subtotals) == pytest.approx(run.tokens_per_second)


# --- figures 1 and 2 -------------------------------------------------------------------------------
def test_figure_1_bars_of_an_llm_are_tokens_per_second(sweep: SweepResult) -> None:
    """Each layout's bar is its total tokens/s, stacked by its instances' own tokens/s."""
    rate = charted_rate(sweep.layouts)
    assert rate.tokens and rate.unit == "tokens/s"
    for layout in sweep.layouts:
        bar = chart_bar(layout, rate)
        run = layout.first
        assert bar.total == pytest.approx(_own_tokens(run))
        assert [v for _, v in bar.stack] == pytest.approx(
            [i.performance.tokens.tokens_per_second for i in run.instances]
        )


def test_figure_2_of_an_llm_is_the_ratio_of_tokens_per_second(sweep: SweepResult) -> None:
    """Scenario 7's point is its tokens/s over scenario 1's, not its samples/s ratio."""
    one, seven = sweep.runs
    ((name, ratio, _bar, _interval),) = change_points(sweep.layouts, charted_rate(sweep.layouts))
    assert name == "S7" and ratio == pytest.approx(_own_tokens(seven) / _own_tokens(one))


def test_a_unified_llm_bar_shares_the_tokens_by_samples_served(unified: RunResult) -> None:
    """Unified: the stack is the LoadGen's tokens/s shared by the samples each instance served."""
    bar = chart_bar(unified)
    served = [i.dispatched_samples for i in unified.instances]
    expected = [unified.tokens_per_second * s / sum(served) for s in served]
    assert bar.total == pytest.approx(unified.tokens_per_second)
    assert [v for _, v in bar.stack] == pytest.approx(expected)


def test_per_gpu_bars_of_an_llm_are_each_gpus_tokens_per_second(system: Any) -> None:
    """A system's per-GPU bars: each GPU's mean tokens/s over the repeats."""
    for bar, gpu in zip(gpu_bars(system), system.first.gpu_rows(), strict=True):
        values = [_own_tokens(run, gpu.instances) for run in system.runs]
        assert bar.total == pytest.approx(sum(values) / len(values))


def _svg_texts(page: str, heading: str) -> list[str]:
    """The texts matplotlib drew in the figure under `heading` (its SVG comments)."""
    part = page.split(heading, 1)[1].split("</svg>", 1)[0]
    return re.findall(r"<!-- (.*?) -->", part)


def test_the_html_figures_of_an_llm_chart_tokens_per_second(sweep: SweepResult) -> None:
    """Figures 1 and 2 of an LLM sweep say tokens/s on their axes and draw its values."""
    pytest.importorskip("matplotlib")
    page = report_html(sweep)
    assert "Figure 1: total tokens/s per layout" in page
    assert "Figure 2: change against MIG scenario 1 (tokens/s)" in page
    one = _svg_texts(page, "Figure 1:")
    assert "tokens/s" in one and "samples/s" not in one
    for run in sweep.runs:
        assert f"{_own_tokens(run):,.0f}" in one
    two = _svg_texts(page, "Figure 2:")
    assert "tokens/s / MIG scenario 1's tokens/s (log scale)" in two


def test_figure_2_without_scenario_1s_tokens_says_why(sweep: SweepResult) -> None:
    """A lone LLM run compared with a scenario 1 in samples/s: no figure 2, one line saying why."""
    pytest.importorskip("matplotlib")
    run = attrs.evolve(sweep.runs[1], baseline_throughput=sweep.runs[0].total_throughput)
    assert run.change_vs_baseline is not None
    page = report_html(run)
    assert "<h2>Figure 2" not in page and f"<p>{html.escape(NO_TOKEN_BASELINE)}</p>" in page


def test_names_read_back_reach_the_llm_figures_escaped(sweep: SweepResult) -> None:
    """A GPU name and layout holding markup are drawn as text: escaped on the page, never markup."""
    pytest.importorskip("matplotlib")
    crafted = "<script>alert(1)</script>&"
    run = attrs.evolve(sweep.runs[1], gpu=crafted, layout=f"1g+{crafted}")
    page = report_html(run)
    assert "<script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&amp;" in page


def test_a_resnet_report_still_charts_samples_per_second() -> None:
    """ResNet50 (the report fixtures): figure 1 says throughput in samples/s, no tokens/s."""
    pytest.importorskip("matplotlib")
    run = RunResult.load(FIXTURES / "reports" / "system")
    page = report_html(run)
    assert "Figure 1: total throughput per layout" in page
    one = _svg_texts(page, "Figure 1:")
    assert run.throughput_unit in one and "tokens/s" not in one
