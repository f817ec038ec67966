"""The advisor ranks the layouts of a generative workload by tokens/s."""

from __future__ import annotations

from pathlib import Path

import pytest

import mlperf_mig
from mlperf_mig import api, cli
from mlperf_mig.study.advisor import advise_from, measurements_from


@pytest.mark.slow  # runs a sweep
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


@pytest.mark.parametrize(
    ("benchmark", "objective", "named"),
    [("llama3.1-8b", "samples_per_joule", "tokens_per_joule"),
     ("resnet50", "tokens_per_joule", "samples_per_joule")],
)  # fmt: skip
def test_the_wrong_energy_objective_is_refused_before_any_sweep(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], benchmark: str,
    objective: str, named: str,
) -> None:  # fmt: skip
    """`advise --benchmark B --objective O` without --from measures first: an energy objective
    of the other kind of workload is one line naming the right one, and no sweep starts."""
    swept: list[object] = []
    monkeypatch.setattr(api, "sweep", lambda *args, **kwargs: swept.append(kwargs))
    argv = ["advise", "--benchmark", benchmark, "--objective", objective, "--backend", "null"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"--objective {named}" in err and swept == []
