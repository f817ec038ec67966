"""Repeats, sweeps and the HTML report of an LLM (llama3.1-8b, null backend) show tokens/s and the
p99 TTFT and TPOT, each computed from the runs' own results."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import mlperf_mig
from mlperf_mig.runner.results import RunResult
from mlperf_mig.study.sweep import SweepResult

pytestmark = pytest.mark.slow  # runs LoadGen Server tests of the token workload

SERVER = {
    "benchmark": "llama3.1-8b",
    "loadgen_scenario": "Server",
    "backend": "null",
    "variant": "tiny",
    "accuracy": False,
    "telemetry": False,
    "progress": False,
    "settings": {"max_tokens": 8, "min_duration": 300, "target_qps": 200},
}


@pytest.fixture(name="repeated", scope="module")
def fixture_repeated(tmp_path_factory: pytest.TempPathFactory) -> SweepResult:
    """Layouts 1g.10gb and 2x1g.10gb, two repeats each."""
    outdir = tmp_path_factory.mktemp("llm") / "repeated"
    return mlperf_mig.sweep([5, "2x1g.10gb"], repeats=2, outdir=outdir, **SERVER)


@pytest.fixture(name="single", scope="module")
def fixture_single(tmp_path_factory: pytest.TempPathFactory) -> SweepResult:
    """The same layouts run once each."""
    outdir = tmp_path_factory.mktemp("llm") / "single"
    return mlperf_mig.sweep([5, "2x1g.10gb"], outdir=outdir, **SERVER)


def _p99_ms(run: RunResult, which: str) -> list[float]:
    """Each instance's p99 TTFT or TPOT (ms), from its own result."""
    values = [getattr(i.performance.tokens, f"{which}_ns")["99.00"] for i in run.instances]
    return [v / 1e6 for v in values]


def _tokens(run: RunResult) -> float:
    return sum(i.performance.tokens.tokens_per_second for i in run.instances)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _number(cell: Any) -> float:
    """The mean of a table cell ('1,234.50 (range ...)' or a number)."""
    return cell if isinstance(cell, float) else float(str(cell).split(" ")[0].replace(",", ""))


def test_a_sweep_of_single_runs_shows_tokens_and_the_worst_ttft_and_tpot(
    single: SweepResult,
) -> None:
    """Each layout's row: its tokens/s summed over the instances, and the worst instance's TTFT
    and TPOT p99; the columns sit after the unit and a note says what they are."""
    columns = list(single.columns())
    assert columns[columns.index("unit") + 1 :][:3] == ["tokens/s", "TTFT p99 ms", "TPOT p99 ms"]
    for row, layout in zip(single.rows(), single.layouts):
        run = layout.first
        assert run.ok, run.table()
        assert row["tokens/s"] == pytest.approx(_tokens(run))
        assert row["TTFT p99 ms"] == pytest.approx(max(_p99_ms(run, "ttft")))
        assert row["TPOT p99 ms"] == pytest.approx(max(_p99_ms(run, "tpot")))
    assert any(n.startswith("tokens/s: the layout's total") for n in single.notes())


def test_a_sweep_of_repeats_shows_the_mean_tokens_over_the_repeats(repeated: SweepResult) -> None:
    """A repeated layout's row: the mean over its repeats of the total tokens/s and of the worst
    TTFT and TPOT p99, with the range of the two repeats."""
    for row, layout in zip(repeated.rows(), repeated.layouts):
        runs = layout.runs
        assert len(runs) == 2 and all(r.ok for r in runs)
        assert _number(row["tokens/s"]) == pytest.approx(_mean([_tokens(r) for r in runs]), 1e-3)
        worst = [max(_p99_ms(r, "ttft")) for r in runs]
        assert _number(row["TTFT p99 ms"]) == pytest.approx(_mean(worst), abs=0.01)
        assert "(range" in row["tokens/s"]
    assert {"tokens/s", "TTFT p99 ms", "TPOT p99 ms"} <= set(repeated.columns())


def test_a_repeated_layout_shows_each_instances_tokens_ttft_and_tpot(
    repeated: SweepResult,
) -> None:
    """The per-instance table of a repeated layout: tokens/s, TTFT and TPOT p99 of each
    instance over its repeats, the total's tokens/s, and each repeat's token-limit verdicts."""
    study = repeated.studies[1]
    columns = study.columns()
    assert columns[columns.index("p99 ms") + 1 :][:3] == ["tokens/s", "TTFT p99 ms", "TPOT p99 ms"]
    rows = study.instance_rows()
    for index in range(2):
        ttft = [_p99_ms(r, "ttft")[index] for r in study.runs]
        assert _number(rows[index]["TTFT p99 ms"]) == pytest.approx(_mean(ttft), abs=0.01)
    assert _number(rows[-1]["tokens/s"]) == pytest.approx(
        _mean([_tokens(r) for r in study.runs]), 1e-3
    )
    notes = study.notes()
    for repeat in ("repeat-1", "repeat-2"):  # each repeat's own verdicts, named
        verdicts = [n for n in notes if n.startswith(f"{repeat}: ") and "token limits (p99)" in n]
        assert len(verdicts) == 1 and "TTFT" in verdicts[0] and "TPOT" in verdicts[0]
    summary = json.loads(Path(study.outdir, "repeats.json").read_text())["summary"]
    assert summary["total_tokens_per_s"]["mean"] == pytest.approx(
        _mean([_tokens(r) for r in study.runs])
    )


def test_the_html_report_shows_tokens_ttft_and_tpot(repeated: SweepResult, tmp_path: Path) -> None:
    """The sweep's HTML report: the layouts' table and each layout's section carry tokens/s,
    TTFT p99 and TPOT p99."""
    page = repeated.to_html(tmp_path / "report.html")
    layouts = page.split("<h2>Layouts</h2>", 1)[1].split("</table>", 1)[0]
    sections = page.split("<h2>Per-instance results and isolation</h2>", 1)[1]
    for part in (layouts, sections):
        for column in ("tokens/s", "TTFT p99 ms", "TPOT p99 ms"):
            assert f"<th>{column}</th>" in part
    assert "token limits (p99)" in sections
