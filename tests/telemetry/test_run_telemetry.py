"""Telemetry in whole runs: a replayed MIG GPU with GPM, an A100 without, emulated, and off."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import mlperf_mig
from mlperf_mig.runner.results import RunResult
from mlperf_mig.telemetry import BOARD_ENERGY_LABEL
from mlperf_mig.telemetry.replay import RecordedTelemetry
from mlperf_mig.telemetry.summary import SHARE_LABEL

from .conftest import load_state

pytestmark = pytest.mark.slow  # starts the runner's workers

QUICK = {
    "backend": "null",
    "accuracy": False,
    "progress": False,
    "settings": {"min_duration": 1500},
}


@pytest.fixture(name="h200_run", scope="module")
def fixture_h200_run(tmp_path_factory):
    """Scenario 8 (7x 1g) on a replayed H200 with GPM and a throttle episode."""
    outdir = tmp_path_factory.mktemp("h200") / "run"
    source = RecordedTelemetry(load_state("h200-7x1g-telemetry"))
    return mlperf_mig.run(8, nvml_source=source, outdir=outdir, **QUICK)


def test_a_mig_run_records_energy_and_samples_per_joule(h200_run):
    """The GPU's board energy over the timed window gives the layout's samples per joule."""
    gpu = h200_run.telemetry.gpus[0]
    assert gpu.energy_j > 0 and gpu.energy_source == "NVML total energy counter"
    assert h200_run.samples_per_joule == pytest.approx(
        h200_run.total_throughput / h200_run.telemetry.power_mean_w
    )
    assert h200_run.telemetry.energy_label == BOARD_ENERGY_LABEL


def test_each_instance_has_its_gpm_activity_and_memory(h200_run):
    """Every MIG instance has a mean SM activity and a peak memory."""
    for instance in h200_run.telemetry.instances:
        assert 0 < instance.util_mean_pct <= 100 and instance.memory_peak_mib > 0


def test_the_table_shows_util_and_samples_per_joule(h200_run):
    """The run's table has util % and samples/J columns and says what energy it is."""
    table = h200_run.table()
    assert "util %" in table and "samples/J" in table and BOARD_ENERGY_LABEL in table


def test_telemetry_csv_and_results_json_agree(h200_run):
    """telemetry.csv beside results.json holds the series; results.json reads back equal."""
    folder = h200_run.outdir
    from mlperf_mig.telemetry.series import read_series

    columns, rows = read_series(folder)
    assert "gpu0:power_w" in columns and len(rows) == h200_run.telemetry.samples
    assert RunResult.load(folder).telemetry == h200_run.telemetry


def test_an_a100_run_says_activity_was_not_measured(tmp_path):
    """Without GPM the instances' util % is empty and the reason is in the notes."""
    source = RecordedTelemetry(load_state("a100-80gb-scenario7-telemetry"))
    result = mlperf_mig.run(7, nvml_source=source, outdir=tmp_path / "run", **QUICK)
    assert all(i.util_mean_pct is None for i in result.telemetry.instances)
    assert "GPM not supported" in result.telemetry.instances[0].util_metric
    assert result.telemetry.gpus[0].energy_j is not None


def test_telemetry_false_writes_no_series(tmp_path):
    """telemetry=False: no sampler, no telemetry.csv, telemetry null in results.json."""
    result = mlperf_mig.run(7, emulate=True, telemetry=False, outdir=tmp_path / "run", **QUICK)
    assert result.telemetry is None and not (tmp_path / "run" / "telemetry.csv").exists()
    assert json.loads((tmp_path / "run" / "results.json").read_text())["telemetry"] is None


def test_the_cli_prints_util_per_instance_and_no_telemetry_turns_it_off(tmp_path):
    """`run` prints a util % per instance; `--no-telemetry` leaves it out."""
    base = [
        sys.executable,
        "-m",
        "mlperf_mig",
        "run",
        "--scenario",
        "7",
        "--emulate",
        "--backend",
        "null",
        "--no-accuracy",
        "--set",
        "min_duration=1000",
    ]
    on = subprocess.run(
        [*base, "--outdir", str(tmp_path / "on")], capture_output=True, text=True, timeout=600
    )
    off = subprocess.run(
        [*base, "--no-telemetry", "--outdir", str(tmp_path / "off")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert on.returncode == 0, on.stderr
    assert "util %" in on.stdout and (tmp_path / "on" / "telemetry.csv").is_file()
    assert off.returncode == 0 and "util %" not in off.stdout


def test_the_system_description_notes_carry_the_telemetry(h200_run):
    """A submission's hw_notes say the mean power, samples/J and that it is not MLPerf Power."""
    from mlperf_mig.submission.readme import system_notes

    notes = system_notes(h200_run, h200_run.instances[0])
    line = next(n for n in notes if n.startswith("Telemetry over the timed window"))
    assert (
        "not an MLPerf Power measurement" in line
        and "samples/J" in line
        and BOARD_ENERGY_LABEL in line
    )
    assert h200_run.instances[0].name in line


def test_the_html_report_has_the_time_series_figure(h200_run, tmp_path):
    """report --html draws each run's activity and power over time, and samples/J per layout."""
    from mlperf_mig.study.report_html import report_html

    text = report_html(h200_run)
    assert "Time series of" in text and "samples per joule per layout" in text
    assert text.count("<svg") >= 3


def _two_gpu_state() -> dict:
    """The A100 + H200 host of the fleet fixtures, each GPU with its own telemetry."""
    import json
    from pathlib import Path

    state = json.loads(
        (
            Path(__file__).parent.parent / "registry" / "fixtures" / "two-models-a100-h200.json"
        ).read_text()
    )
    a100, h200 = (
        load_state("a100-80gb-scenario7-telemetry")["telemetry"],
        load_state("h200-7x1g-telemetry")["telemetry"],
    )
    devices = [m["uuid"] for g in state["gpus"] for m in g["mig_devices"]]
    series = list(a100["mig_devices"].values()) + list(h200["mig_devices"].values())
    state["telemetry"] = {
        "interval_s": 0.1,
        "gpus": {"0": a100["gpus"]["0"], "1": h200["gpus"]["0"]},
        "mig_devices": dict(zip(devices, series)),
    }
    return state


def test_a_run_over_two_gpus_has_telemetry_per_gpu_by_index(tmp_path):
    """Per-GPU telemetry is keyed by NVML index; the layout's energy is their sum."""
    result = mlperf_mig.run(
        7,
        layouts={1: 8},
        gpus="all",
        nvml_source=RecordedTelemetry(_two_gpu_state()),
        outdir=tmp_path / "run",
        **QUICK,
    )
    gpus = {g.index: g for g in result.telemetry.gpus}
    assert (
        set(gpus) == {0, 1}
        and gpus[1].gpm == "supported"
        and gpus[0].gpm.startswith("not supported")
    )
    assert result.telemetry.energy_j == pytest.approx(gpus[0].energy_j + gpus[1].energy_j, abs=0.01)
    assert {i.gpu_index for i in result.telemetry.instances} == {0, 1}


def test_a_generative_run_reports_tokens_per_joule(tmp_path):
    """llama3.1-8b-edge on a replayed H200 (7x 1g.18gb): tokens/J is the layout's tokens/s over
    the board's mean power in the timed window, beside samples/J."""
    source = RecordedTelemetry(load_state("h200-7x1g-telemetry"))
    result = mlperf_mig.run(
        8, benchmark="llama3.1-8b-edge", nvml_source=source, outdir=tmp_path / "run",
        **{**QUICK, "settings": {"min_duration": 1500, "max_tokens": 4}},
    )  # fmt: skip
    tokens = sum(i.performance.tokens.tokens_per_second for i in result.instances)
    assert result.tokens_per_joule == pytest.approx(tokens / result.telemetry.power_mean_w)
    assert "tokens/J" in result.table().splitlines()[1]
    notes = result.notes()
    total = [n for n in notes if n.startswith("telemetry: tokens/J ") and "instance" not in n]
    assert (
        len(total) == 1
        and f"tokens/J {result.tokens_per_joule:.4g} = tokens/s / mean power (" in total[0]
    )
    assert BOARD_ENERGY_LABEL in total[0]
    (per_instance,) = [n for n in notes if n.startswith("telemetry: tokens/J per instance")]
    assert SHARE_LABEL in per_instance
    window = result.telemetry.window.duration_s
    for instance in result.instances:
        share = result.telemetry.instance(instance.name).energy_share_j
        expected = instance.performance.tokens.tokens_per_second * window / share
        assert f"{instance.name} {expected:.4g}" in per_instance
    assert any(n.startswith("telemetry: samples/J ") for n in notes)


def test_a_run_that_answers_samples_prints_no_tokens_per_joule(h200_run):
    """ResNet50's telemetry notes keep samples/J = throughput / mean power, and no tokens/J."""
    notes = h200_run.notes()
    (line,) = [n for n in notes if n.startswith("telemetry: samples/J ")]
    assert line.startswith(
        f"telemetry: samples/J {h200_run.samples_per_joule:.4g} = throughput / mean power ("
    )
    assert not any("tokens/J" in n for n in notes)
