"""The options record and the Python API's checks: types and ranges are refused with one line
naming the argument, before anything runs or is written."""

from __future__ import annotations

import argparse
import inspect
import pydoc
from pathlib import Path
from typing import Any

import attrs
import pytest

import mlperf_mig
from mlperf_mig import api
from mlperf_mig._cli_args import LAYOUT, RUN, STUDY, add_flags, flag_values
from mlperf_mig.errors import MlperfMigError, OutputDirError, SettingsError
from mlperf_mig.runner.options import RUN_OPTIONS, RunOptions, run_options

from .conftest import QUICK_NULL


@pytest.mark.parametrize(
    ("options", "argument"),
    [
        ({"scenario": 7.5}, "scenario"),
        ({"scenario": None}, "scenario"),
        ({"scenario": []}, "scenario"),
        ({"benchmark": None}, "benchmark"),
        ({"loadgen_scenario": 3}, "loadgen_scenario"),
        ({"backend": ["null"]}, "backend"),
        ({"timeout_s": "10"}, "timeout_s"),
        ({"timeout_s": float("inf")}, "timeout_s"),
        ({"accuracy": "no"}, "accuracy"),
        ({"emulate": 1}, "emulate"),
        ({"settings": [("min_duration", 5)]}, "settings"),
        ({"settings": {"min_duration": float("nan")}}, "min_duration"),
        ({"settings": {"min_duration": 1e26}}, "64-bit"),
        ({"sample_count": 10**20}, "sample_count"),
        ({"batch_size": 2.0}, "batch_size"),
        ({"cpus": []}, "cpus"),
        ({"cpus": ["0"]}, "cpus"),
        ({"outdir": 5}, "outdir"),
        ({"outdir": ""}, "outdir"),
        ({"dataset": ""}, "dataset"),
        ({"worker_entry": "no-colon"}, "worker_entry"),
        ({"cluster": ""}, "cluster"),
        ({"mode": "both"}, "mode"),
    ],
)
def test_wrong_type_or_range_names_the_argument(options: dict[str, Any], argument: str) -> None:
    """plan() refuses a wrong type or range with a library error naming the argument."""
    with pytest.raises(MlperfMigError, match=argument):
        mlperf_mig.plan(**{"backend": "null", "emulate": True, **options})


def test_cpus_this_process_cannot_use() -> None:
    """cpus naming a CPU outside this process's affinity is refused, naming it."""
    with pytest.raises(SettingsError, match="999"):
        mlperf_mig.plan(7, backend="null", emulate=True, cpus=[999])


def test_progress_of_the_wrong_type(tmp_path: Path) -> None:
    """run(progress="yes") is refused before the run folder exists."""
    with pytest.raises(SettingsError, match="progress"):
        mlperf_mig.run(5, backend="null", progress="yes", outdir=tmp_path / "run")  # type: ignore[arg-type]
    assert not (tmp_path / "run").exists()


def test_missing_baseline_is_refused_before_running(tmp_path: Path) -> None:
    """run(baseline="/nonexistent") fails before any worker starts and writes nothing."""
    with pytest.raises(OutputDirError, match="/nonexistent"):
        mlperf_mig.run(5, outdir=tmp_path / "run", baseline="/nonexistent", **QUICK_NULL)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_baseline_of_another_benchmark_is_refused_before_running(
    tmp_path: Path, good_run: Any
) -> None:
    """A baseline of another benchmark is refused before the run starts."""
    with pytest.raises(SettingsError, match="baseline is resnet50"):
        mlperf_mig.run(
            5, benchmark="bert", outdir=tmp_path / "run", baseline=good_run, **QUICK_NULL
        )
    assert not (tmp_path / "run").exists()


def test_empty_sweep_is_refused(tmp_path: Path) -> None:
    """sweep(scenarios=[]) is refused and creates no folder."""
    with pytest.raises(SettingsError, match="scenarios is empty"):
        mlperf_mig.sweep(scenarios=[], outdir=tmp_path / "sweep", **QUICK_NULL)
    assert not (tmp_path / "sweep").exists()


@pytest.mark.parametrize("scenarios", [[1, 1], [1, "7g.80gb"], [2, 9]])
def test_sweep_refuses_before_running_any_layout(tmp_path: Path, scenarios: list[Any]) -> None:
    """A repeated layout (also spelled two ways) or one that does not resolve is refused before
    the first layout runs."""
    with pytest.raises((SettingsError, ValueError)):
        mlperf_mig.sweep(scenarios=scenarios, outdir=tmp_path / "sweep", **QUICK_NULL)
    assert not (tmp_path / "sweep").exists()


# the parameters of each public function that are its own, not run options
OWN_PARAMETERS = {
    api.plan: set(),
    api.run: {"progress", "baseline"},
    api.sweep: {"scenarios", "resume", "chart", "progress"},
}


@pytest.mark.parametrize("function", list(OWN_PARAMETERS), ids=lambda f: f.__name__)
def test_public_parameters_are_the_declared_options(function: Any) -> None:
    """run, plan and sweep take each declared option (sweep: all but scenario) as a keyword
    parameter with the declared type and default, and nothing else but their own parameters."""
    parameters = inspect.signature(function).parameters
    options = [o for o in RUN_OPTIONS if not (function is api.sweep and o.name == "scenario")]
    assert set(parameters) == {o.name for o in options} | OWN_PARAMETERS[function]
    for declared in options:
        parameter = parameters[declared.name]
        assert (parameter.annotation, parameter.default) == (declared.accepts, declared.default), (
            declared.name
        )


@pytest.mark.parametrize("function", list(OWN_PARAMETERS), ids=lambda f: f.__name__)
def test_help_lists_every_option_with_its_type(function: Any) -> None:
    """help() of run, plan and sweep shows each option's type and its declared description."""
    text = pydoc.plain(pydoc.render_doc(function))
    assert "timeout_s: 'float | None' = None" in text
    for declared in RUN_OPTIONS:
        if function is api.sweep and declared.name in ("scenario", "outdir"):
            continue
        assert f"{declared.name}:" in text and declared.doc.split()[-1] in text, declared.name


def test_every_flag_reads_back_as_its_option() -> None:
    """Each declared flag of `run` parses into the keyword argument of its option; without
    flags, the options are the declared defaults."""
    parser = argparse.ArgumentParser()
    add_flags(parser, RUN_OPTIONS, (RUN, LAYOUT, STUDY))
    defaults = flag_values(parser.parse_args([]), RUN_OPTIONS)
    assert set(defaults) == {o.name for o in RUN_OPTIONS if o.flag is not None}
    assert run_options(defaults) == RunOptions()
    given = flag_values(
        parser.parse_args(["--model", "m.onnx", "--no-accuracy", "--set", "min_duration=5"]),
        RUN_OPTIONS,
    )
    assert given["model_path"] == "m.onnx" and given["accuracy"] is False
    assert given["settings"] == {"min_duration": 5}


def test_options_record_is_frozen_and_converted() -> None:
    """The record converts path-likes and settings once and cannot be changed afterwards."""
    options = RunOptions(
        outdir=Path("x"), settings={"target_qps": 5, "min_duration": 300}, cpus=[0]
    )
    assert options.outdir == "x" and options.cpus == (0,)
    assert options.settings == (("min_duration", 300), ("target_qps", 5))
    assert attrs.evolve(options, scenario=1).settings == options.settings
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        options.mode = "unified"  # type: ignore[misc]


@pytest.mark.slow
def test_aggregate_refuses_an_outdir_holding_a_run(tmp_path: Path, good_run: Any) -> None:
    """aggregate into a folder that holds another run's results.json is refused; the file is kept."""
    other = tmp_path / "other"
    other.mkdir()
    (other / "results.json").write_text("{}")
    with pytest.raises(OutputDirError, match="already holds a run"):
        mlperf_mig.aggregate([good_run.outdir], outdir=other)
    assert (other / "results.json").read_text() == "{}"
