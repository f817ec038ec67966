"""The advisor ranks the layouts of a generative workload by tokens/s."""

from __future__ import annotations

from pathlib import Path

import pytest

import mlperf_mig
from mlperf_mig.study.advisor import advise_from, measurements_from

pytestmark = pytest.mark.slow  # runs a sweep


def test_an_llm_sweep_is_ranked_by_tokens_per_second(tmp_path: Path) -> None:
    sweep = mlperf_mig.sweep(
        scenarios=[1, 7], benchmark="llama3.1-8b-edge", backend="null", accuracy=False,
        telemetry=False, settings={"max_tokens": 4}, outdir=tmp_path / "sweep", progress=False,
    )  # fmt: skip
    measurements = measurements_from(sweep.layouts, 7)
    assert measurements.unit == "tokens/s"
    for layout in sweep.layouts:
        run = layout.first
        tokens = sum(i.performance.tokens.tokens_per_second for i in run.instances)
        assert measurements.measured[run.layout] == (pytest.approx(tokens),)
        assert tokens == pytest.approx(run.total_throughput * 4, rel=0.02)  # 4 tokens a sample
    advice = advise_from(measurements)
    assert "throughput in tokens/s" in advice.table()
