"""The options record and the Python API's checks: types and ranges are refused with one line
naming the argument, before anything runs or is written."""

from __future__ import annotations

import inspect
import pydoc
from pathlib import Path
from typing import Any

import attrs
import pytest

import mlperf_mig
from mlperf_mig import api
from mlperf_mig.errors import MlperfMigError, OutputDirError, SettingsError
from mlperf_mig.runner.options import RunOptions

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


def test_help_lists_every_option_with_its_type() -> None:
    """run, plan and sweep take every field of RunOptions as a typed keyword argument."""
    fields = {f.name for f in attrs.fields(RunOptions)}
    for function in (api.run, api.plan, api.sweep):
        parameters = inspect.signature(function).parameters
        expected = fields - {"scenario"} if function is api.sweep else fields
        assert expected <= set(parameters)
        assert all(parameters[name].annotation is not inspect.Parameter.empty for name in expected)
        assert "timeout_s: 'float | None' = None" in pydoc.plain(pydoc.render_doc(function))


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
