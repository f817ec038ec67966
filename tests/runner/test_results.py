"""Results as data: JSON round trip, tables, pandas, baseline change, report and aggregate."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest

from mlperf_mig import cli
from mlperf_mig.api import aggregate
from mlperf_mig.errors import SettingsError, UntrustedPathError
from mlperf_mig.runner.results import RunResult


@pytest.mark.slow
def test_json_round_trip(good_run: Any) -> None:
    """to_json / from_json gives back an equal RunResult, instances and LoadGen results included."""
    again = RunResult.from_json(good_run.to_json())
    assert again == good_run
    assert again.instances[0].performance == good_run.instances[0].performance


@pytest.mark.slow
def test_results_file_is_the_record(good_run: Any) -> None:
    """results.json on disk loads to the returned RunResult."""
    assert RunResult.load(good_run.outdir) == good_run


@pytest.mark.slow
def test_results_of_schema_1_still_load(good_run: Any) -> None:
    """A results.json written with schema 1, which named the partitioning "target", loads with
    the same partitioning."""
    data = json.loads(good_run.to_json())
    data["schema"] = 1
    data["target"] = data.pop("partitioning")
    assert RunResult.from_dict(data) == good_run


@pytest.mark.slow
def test_markdown_and_html_carry_the_labels(good_run: Any) -> None:
    """Markdown and notebook HTML both say emulated and engineering metric."""
    for text in (good_run.to_markdown(), good_run._repr_html_()):
        assert "emulated" in text and "not an MLPerf result" in text


@pytest.mark.slow
def test_to_pandas_without_pandas_says_how_to_get_it(
    good_run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without pandas (hidden from the import system here, as the test extra installs it),
    to_pandas raises ImportError naming the install command."""
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match="pip install pandas"):
        good_run.to_pandas()


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("pandas") is None, reason="pandas is not installed")
def test_to_pandas_has_one_row_per_instance(good_run: Any) -> None:
    """to_pandas gives one row per instance with the run's columns."""
    frame = good_run.to_pandas()
    assert len(frame) == len(good_run.instances) and "layout" in frame.columns


@pytest.mark.slow
def test_change_against_scenario_1(good_run: Any) -> None:
    """With a baseline, the change is total / baseline - 1 and the table shows it as a ratio."""
    half = attrs.evolve(
        good_run, baseline_throughput=good_run.total_throughput / 2, baseline_source="x"
    )
    assert half.change_vs_baseline == pytest.approx(1.0)
    assert "x2.000" in half.table()


@pytest.mark.slow
def test_report_prints_a_run(good_run: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """`mlperf-mig report DIR` prints the run's table."""
    assert cli.main(["report", good_run.outdir]) == 0
    assert "total (sum)" in capsys.readouterr().out


def _copy_as_host(good_run: Any, folder: Path, host: str) -> Path:
    shutil.copytree(good_run.outdir, folder)
    data = json.loads((folder / "results.json").read_text())
    data["hosts"] = [host]
    data["outdir"] = str(folder)
    (folder / "results.json").write_text(json.dumps(data))
    return folder


@pytest.mark.slow
def test_aggregate_combines_hosts(good_run: Any, tmp_path: Path) -> None:
    """Two hosts' folders combine into one run: instances renumbered, totals added."""
    first = _copy_as_host(good_run, tmp_path / "vm1", "vm1")
    second = _copy_as_host(good_run, tmp_path / "vm2", "vm2")
    combined = aggregate([first, second], outdir=tmp_path / "all")
    assert [i.name for i in combined.instances] == [
        "i0-2g.20gb",
        "i1-1g.10gb",
        "i2-2g.20gb",
        "i3-1g.10gb",
    ]
    assert combined.layout == "2x2g.20gb+2x1g.10gb"
    assert combined.hosts == ("vm1", "vm2")
    assert combined.total_throughput == pytest.approx(2 * good_run.total_throughput)
    assert RunResult.load(tmp_path / "all") == combined


@pytest.mark.slow
def test_aggregate_refuses_other_benchmarks(good_run: Any, tmp_path: Path) -> None:
    """Folders of different benchmarks cannot be summed."""
    other = _copy_as_host(good_run, tmp_path / "vm2", "vm2")
    data = json.loads((other / "results.json").read_text())
    data["benchmark"] = "bert"
    (other / "results.json").write_text(json.dumps(data))
    with pytest.raises(SettingsError, match="benchmark"):
        aggregate([good_run.outdir, other])


@pytest.mark.slow
def test_aggregate_cli(good_run: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`mlperf-mig aggregate DIR DIR` prints the combined table."""
    first = _copy_as_host(good_run, tmp_path / "vm1", "vm1")
    assert cli.main(["aggregate", str(first), good_run.outdir]) == 0
    assert "i3-1g.10gb" in capsys.readouterr().out


@pytest.mark.slow
def test_report_and_aggregate_json(
    good_run: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`report --json` prints the run's results.json as read, and `aggregate --json` the combined
    result, with both hosts' instances."""
    assert cli.main(["report", good_run.outdir, "--json"]) == 0
    assert RunResult.from_json(capsys.readouterr().out) == good_run
    first = _copy_as_host(good_run, tmp_path / "vm1", "vm1")
    assert cli.main(["aggregate", str(first), good_run.outdir, "--json"]) == 0
    combined = RunResult.from_json(capsys.readouterr().out)
    assert len(combined.instances) == 2 * len(good_run.instances)
    assert set(combined.hosts) == {"vm1", *good_run.hosts}


@pytest.mark.slow
def test_aggregate_outdir_that_is_an_input_is_refused(
    good_run: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--outdir naming one of the run folders would overwrite its results.json: one line, exit 2."""
    first = _copy_as_host(good_run, tmp_path / "vm1", "vm1")
    before = (first / "results.json").read_bytes()
    assert cli.main(["aggregate", str(first), good_run.outdir, "--outdir", str(first)]) == 2
    err = capsys.readouterr().err.strip()
    assert "is one of the run folders" in err and "\n" not in err
    assert (first / "results.json").read_bytes() == before


@pytest.mark.slow
def test_aggregate_outdir_not_writable(
    good_run: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An --outdir that cannot be created: one line, exit 2, no traceback."""
    first = _copy_as_host(good_run, tmp_path / "vm1", "vm1")
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert (
        cli.main(["aggregate", str(first), good_run.outdir, "--outdir", str(blocker / "all")]) == 2
    )
    err = capsys.readouterr().err.strip()
    assert "cannot be written" in err and "\n" not in err


def _short_by_design(good_run: Any) -> RunResult:
    """good_run as if every instance were a quick-preset Offline run, INVALID by design."""
    instances = [
        attrs.evolve(
            i, performance=attrs.evolve(i.performance, valid=False, invalid_by_design=True)
        )
        for i in good_run.instances
    ]
    return attrs.evolve(good_run, instances=instances)


@pytest.mark.slow
def test_quick_offline_invalid_by_design_is_labelled(good_run: Any) -> None:
    """The valid column and a note say a quick run's INVALID is by design, not a failure."""
    run = _short_by_design(good_run)
    assert run.ok and not run.all_valid and run.invalid_by_design
    assert {row["valid"] for row in run.instance_rows()} == {"no (quick preset)"}
    assert "by design, not a failure" in run.table()


@pytest.mark.slow
def test_real_invalid_is_not_by_design(good_run: Any) -> None:
    """One instance INVALID for another reason makes the total a plain NO."""
    run = _short_by_design(good_run)
    first = run.instances[0]
    plain = attrs.evolve(
        first, performance=attrs.evolve(first.performance, invalid_by_design=False)
    )
    run = attrs.evolve(run, instances=[plain, *run.instances[1:]])
    assert not run.invalid_by_design
    assert run.instance_rows()[-1]["valid"] == "NO"


@pytest.mark.slow
def test_aggregate_refuses_one_run_twice(good_run: Any) -> None:
    """The same folder twice would count its instances twice."""
    with pytest.raises(SettingsError, match="passed twice"):
        aggregate([good_run.outdir, good_run.outdir])


@pytest.mark.slow
def test_aggregate_refuses_more_than_one_gpu_holds(good_run: Any, tmp_path: Path) -> None:
    """Three hosts' 2g+1g do not fit one A100 (9 of 7 compute slices): LayoutError."""
    from mlperf_mig.errors import LayoutError

    folders = [_copy_as_host(good_run, tmp_path / f"vm{n}", f"vm{n}") for n in range(3)]
    with pytest.raises(LayoutError):
        aggregate(folders)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("results.json", '{"schema": 1}'),
        ("results.json", "[]"),
        ("results.json", '{"instances": [1]}'),
        ("sweep.json", '{"x": 1}'),
        ("sweep.json", "[]"),
        ("sweep.json", '{"runs": [1]}'),
    ],
)
def test_report_of_a_malformed_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, text: str
) -> None:
    """A results.json or sweep.json that is not ours: one line, exit 2, no traceback."""
    (tmp_path / name).write_text(text)
    assert cli.main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mlperf-mig: error:") and "\n" not in err


@pytest.mark.slow
def test_report_of_a_bad_status_is_one_line(
    good_run: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A results.json with an unknown instance status: one line naming it, exit 2."""
    data = good_run.to_dict()
    data["instances"][0]["status"] = "weird"
    (tmp_path / "results.json").write_text(json.dumps(data))
    assert cli.main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "weird" in err and "\n" not in err


@pytest.mark.slow
def test_table_shows_each_accuracy_with_its_sample_count(good_run: Any) -> None:
    """Each instance's accuracy cell gives the metric, value and the samples it rests on."""
    rows = {r["instance"]: r for r in good_run.instance_rows()}
    report = good_run.instances[0].accuracy.accuracy
    assert rows[good_run.instances[0].name]["accuracy"] == f"top1 - ({report.sample_count} samples)"
    assert "accuracy" in good_run.table() and f"({report.sample_count} samples)" in good_run.table()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("field", "value"),
    [("loadgen_scenario", "../../x/victim"), ("benchmark", "resnet50/.."), ("mode", "unified\n")],
)
def test_report_refuses_a_hostile_name(
    good_run: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, value: str
) -> None:
    """A results.json whose LoadGen scenario, benchmark or mode is not one of the allowed values
    is refused on load with one line naming the field, the file left as it was."""
    folder = Path(shutil.copytree(good_run.outdir, tmp_path / "run"))
    data = json.loads((folder / "results.json").read_text())
    data[field] = value
    (folder / "results.json").write_text(json.dumps(data))
    before = (folder / "results.json").read_bytes()
    assert cli.main(["report", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{field} {value!r} is not one of" in err
    assert (folder / "results.json").read_bytes() == before


@pytest.mark.slow
def test_instance_name_with_a_slash_is_refused_on_load(good_run: Any, tmp_path: Path) -> None:
    """An instance name that climbs out of the run folder is refused by RunResult.load."""
    folder = Path(shutil.copytree(good_run.outdir, tmp_path / "run"))
    data = json.loads((folder / "results.json").read_text())
    data["instances"][0]["name"] = "../../victim"
    (folder / "results.json").write_text(json.dumps(data))
    with pytest.raises(
        UntrustedPathError, match=re.escape("instance name '../../victim' is not a plain name")
    ):
        RunResult.load(folder)


@pytest.mark.slow
def test_cached_calibration_is_labelled(good_run: Any) -> None:
    """A run whose target came from a cached calibration says so; a measured one does not."""
    assert not any("cached calibration" in label for label in good_run.labels())
    first = good_run.instances[0]
    cached = attrs.evolve(
        first, performance=attrs.evolve(first.performance, target_source="cached calibration")
    )
    run = attrs.evolve(good_run, instances=[cached, *good_run.instances[1:]])
    assert any("cached calibration" in label for label in run.labels())
    assert "cached calibration" in run.table()


def test_a_lone_run_is_a_layout_result_of_one_run(good_run: Any) -> None:
    """A RunResult is a LayoutResult whose runs are itself: its total is a mean of one value."""
    from mlperf_mig.runner.results import LayoutResult

    assert isinstance(good_run, LayoutResult)
    assert good_run.runs == (good_run,) and good_run.first is good_run
    assert good_run.alone == {} and not good_run.isolation and good_run.repeats == 1
    assert good_run.total.mean == pytest.approx(good_run.total_throughput)
    assert good_run.total.error_bar() is None


def test_a_repeated_run_of_one_run_reads_as_that_run(good_run: Any) -> None:
    """The values over the runs are the same for the run and for a repeated run holding it."""
    from mlperf_mig.study.chart import chart_bar
    from mlperf_mig.study.repeats import RepeatedRun

    repeated = RepeatedRun(outdir=good_run.outdir, runs=[good_run])
    assert repeated.total == good_run.total
    assert repeated.instance_values(1, "throughput") == good_run.instance_values(1, "throughput")
    assert chart_bar(repeated) == chart_bar(good_run)


def test_gpu_entry_with_a_non_text_host_is_refused(good_run: Any) -> None:
    """A results.json gpus entry whose host is not a text is one line naming the entry."""
    data = good_run.to_dict()
    data["gpus"] = [
        {"index": 0, "name": "A100-SXM4-80GB", "layout": "x", "instances": [], "host": 3}
    ]
    with pytest.raises(UntrustedPathError, match="gpus entry"):
        RunResult.from_dict(data)
