"""advise --objective samples_per_joule on runs of replayed H200 states with telemetry."""

from __future__ import annotations

import pytest

import mlperf_mig
from mlperf_mig.errors import SettingsError
from mlperf_mig.study.advisor import ENERGY_NOTE, advise_from, measurements_from
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
    values = [p.samples_per_joule for p in advice.ranking]
    assert all(v is not None and v > 0 for v in values) and values == sorted(values, reverse=True)
    assert "samples/J" in advice.columns() and ENERGY_NOTE in advice.notes()


def test_samples_per_joule_is_total_over_idle_plus_instance_power(h200_runs):
    """A single-profile layout's prediction is its rate over idle power plus its power above idle."""
    measurements = measurements_from(h200_runs, 7)
    advice = advise_from(measurements, objective="samples_per_joule", top=50)
    one = next(p for p in advice.ranking if p.layout == "7g.141gb")
    idle = sum(measurements.idle_power_w) / len(measurements.idle_power_w)
    power = measurements.profiles["7g.141gb"].power_alone
    assert one.samples_per_joule == pytest.approx(one.total / (idle + sum(power) / len(power)))


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
