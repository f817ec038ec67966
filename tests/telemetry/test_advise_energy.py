"""advise --objective samples_per_joule (tokens_per_joule for an LLM) on runs of replayed H200
states with telemetry."""

from __future__ import annotations

import json

import pytest

import mlperf_mig
from mlperf_mig import cli
from mlperf_mig.errors import SettingsError
from mlperf_mig.study.advisor import advise_from, energy_note, measurements_from
from mlperf_mig.study.report_html import report_html
from mlperf_mig.telemetry.replay import RecordedTelemetry

from .conftest import load_state

pytestmark = pytest.mark.slow  # starts the runner's workers

QUICK = {
    "backend": "null",
    "accuracy": False,
    "progress": False,
    "settings": {"min_duration": 1500},
}
LAYOUTS = {"1x7g": "7g.141gb", "1x1g": "1g.18gb", "1x3g": "3g.71gb", "7x1g": "7x1g.18gb"}


@pytest.fixture(name="h200_runs", scope="module")
def fixture_h200_runs(tmp_path_factory):
    """One run per layout, each on a replayed H200 holding that layout."""
    root = tmp_path_factory.mktemp("h200-sweep")
    return [
        mlperf_mig.run(
            layout,
            nvml_source=RecordedTelemetry(load_state(f"h200-layout-{name}-telemetry")),
            outdir=root / name,
            **QUICK,
        )
        for name, layout in LAYOUTS.items()
    ]


def test_every_run_measured_energy_and_idle_power(h200_runs):
    """Each replayed run has board energy over its window and idle power before it."""
    for run in h200_runs:
        assert run.ok, run.table()  # a worker lost on a crowded machine says so here
        assert run.telemetry.energy_j > 0 and run.telemetry.idle_power_w > 0, run.telemetry.notes


def test_the_ranking_is_by_predicted_samples_per_joule(h200_runs):
    """Layouts are ranked by samples/J, best first, each with its prediction and the energy note."""
    advice = advise_from(measurements_from(h200_runs, 7), objective="samples_per_joule", top=50)
    values = [p.per_joule for p in advice.ranking]
    assert all(v is not None and v > 0 for v in values) and values == sorted(values, reverse=True)
    assert "samples/J" in advice.columns() and energy_note(advice.unit) in advice.notes()
    assert "samples/J predicted" in energy_note(advice.unit)


def test_samples_per_joule_is_total_over_idle_plus_instance_power(h200_runs):
    """A single-profile layout's prediction is its rate over idle power plus its power above idle."""
    measurements = measurements_from(h200_runs, 7)
    advice = advise_from(measurements, objective="samples_per_joule", top=50)
    one = next(p for p in advice.ranking if p.layout == "7g.141gb")
    idle = sum(measurements.idle_power_w) / len(measurements.idle_power_w)
    power = measurements.profiles["7g.141gb"].power_alone
    assert one.per_joule == pytest.approx(one.total / (idle + sum(power) / len(power)))


def test_runs_without_energy_are_refused_for_this_objective(tmp_path):
    """Emulated runs on a machine without RAPL carry no energy: one line saying what is needed."""
    runs = [
        mlperf_mig.run(layout, emulate=True, gpu="H200", outdir=tmp_path / name, **QUICK)
        for name, layout in (("a", "7g.141gb"), ("b", "1g.18gb"))
    ]
    if any(r.telemetry.energy_j is not None for r in runs):
        pytest.skip("this machine exposes RAPL package energy")
    with pytest.raises(
        SettingsError, match="samples_per_joule' needs runs whose telemetry measured energy"
    ):
        advise_from(measurements_from(runs, 7), objective="samples_per_joule")


def test_tokens_per_joule_is_refused_for_a_workload_without_tokens(h200_runs):
    """ResNet50 answers samples: tokens_per_joule is one line naming samples_per_joule."""
    with pytest.raises(SettingsError, match="pass objective 'samples_per_joule'") as caught:
        advise_from(measurements_from(h200_runs, 7), objective="tokens_per_joule")
    assert "\n" not in str(caught.value) and "resnet50 generates no tokens" in str(caught.value)


LLM = {"benchmark": "llama3.1-8b-edge", "variant": "tiny", "backend": "null", "accuracy": False,
       "progress": False, "settings": {"min_duration": 1500, "max_tokens": 4}}  # fmt: skip


@pytest.fixture(name="h200_llm_runs", scope="module")
def fixture_h200_llm_runs(tmp_path_factory):
    """llama3.1-8b-edge Offline on a replayed H200 holding 7g.141gb, then one holding 1g.18gb."""
    root = tmp_path_factory.mktemp("h200-llm")
    return [
        mlperf_mig.run(
            layout,
            nvml_source=RecordedTelemetry(load_state(f"h200-layout-{name}-telemetry")),
            outdir=root / name,
            **LLM,
        )
        for name, layout in (("1x7g", "7g.141gb"), ("1x1g", "1g.18gb"))
    ]


def test_an_llm_is_ranked_by_predicted_tokens_per_joule(h200_llm_runs):
    """tokens_per_joule ranks an LLM's layouts by predicted tokens/J, so labelled in the table,
    the notes and the JSON: the prediction of 7g.141gb alone is its tokens/s over idle power plus
    its power above idle."""
    for run in h200_llm_runs:
        assert run.ok and run.tokens_per_joule is not None, run.table()
    measurements = measurements_from(h200_llm_runs, 7)
    advice = advise_from(measurements, objective="tokens_per_joule", top=50)
    assert advice.unit == "tokens/s" and "tokens/J" in advice.columns()
    assert "samples/J" not in advice.columns()
    assert any(
        n.startswith("tokens/J predicted = predicted total (tokens/s)") for n in advice.notes()
    )
    values = [p.per_joule for p in advice.ranking]
    assert all(v is not None and v > 0 for v in values) and values == sorted(values, reverse=True)
    one = next(p for p in advice.ranking if p.layout == "7g.141gb")
    idle = sum(measurements.idle_power_w) / len(measurements.idle_power_w)
    power = measurements.profiles["7g.141gb"].power_alone
    tokens = sum(i.performance.tokens.tokens_per_second for i in h200_llm_runs[0].instances)
    assert one.per_joule == pytest.approx(tokens / (idle + sum(power) / len(power)))
    data = advice.to_dict()
    assert data["unit"] == "tokens/s" and data["objective"] == "tokens_per_joule"
    assert all("tokens/J" in row and "samples/J" not in row for row in data["ranking"])
    assert "<th>tokens/J</th>" in report_html(h200_llm_runs[0], advice=advice)


def test_an_llm_runs_html_draws_tokens_per_joule(h200_llm_runs):
    """The HTML report's energy figure of an LLM run counts tokens per joule."""
    page = report_html(h200_llm_runs[0])
    assert "Figure 3: tokens per joule per layout" in page
    assert "Figure 3: samples per joule" not in page


def test_samples_per_joule_for_an_llm_is_one_line_naming_tokens_per_joule(h200_llm_runs):
    """An LLM's layouts are predicted in tokens/s: samples_per_joule is refused in one line."""
    with pytest.raises(SettingsError, match="pass objective 'tokens_per_joule'") as caught:
        advise_from(measurements_from(h200_llm_runs, 7), objective="samples_per_joule")
    assert "\n" not in str(caught.value) and "llama3.1-8b-edge generates tokens" in str(
        caught.value
    )


def test_advise_cli_prints_tokens_per_joule_for_an_llm(h200_llm_runs, capsys):
    """`advise --from <llm run> --objective tokens_per_joule`: the table's column and the JSON
    say tokens/J; `--objective samples_per_joule` exits 2 in one line naming tokens_per_joule."""
    folder = h200_llm_runs[0].outdir
    assert cli.main(["advise", "--from", folder, "--objective", "tokens_per_joule"]) == 0
    out = capsys.readouterr().out
    assert "tokens/J" in out.splitlines()[1] and "samples/J" not in out.splitlines()[1]
    assert cli.main(["advise", "--from", folder, "--objective", "tokens_per_joule", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ranking"][0]["tokens/J"] > 0
    assert cli.main(["advise", "--from", folder, "--objective", "samples_per_joule"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--objective tokens_per_joule" in err
