"""write_submission: the tree of independent and unified runs, labels, refusals, one error."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from mlperf_mig.errors import SubmissionError
from mlperf_mig.submission import check_submission, rules, write_submission
from mlperf_mig.submission.sysdesc import NOT_REPORTED

pytestmark = pytest.mark.usefixtures("fixed_host")

OVERRIDES = {
    "cooling": "air-cooled",
    "host_memory_configuration": "16x 64 GiB DDR4-3200",
    "accelerator_host_interconnect": "PCIe Gen4 x16",
}


def _results(tree_root: Path) -> list[Path]:
    return sorted(tree_root.glob("*/*/results/*/*/*"))


def _system(tree_root: Path, folder: Path) -> dict:
    system = folder.parent.parent.name
    return json.loads(next(tree_root.glob(f"*/*/systems/{system}.json")).read_text())


@pytest.fixture(name="overrides_file")
def fixture_overrides_file(tmp_path: Path) -> Path:
    path = tmp_path / "overrides.json"
    path.write_text(json.dumps(OVERRIDES))
    return path


@pytest.mark.slow
def test_independent_run_is_one_system_per_instance(runs: dict[str, Path], tmp_path: Path) -> None:
    """Each instance of an independent run becomes its own system, named with its profile."""
    tree = write_submission(
        [runs["independent"]], division="open", submitter="Acme", outdir=tmp_path
    )
    assert [s.split("_i")[0] for s in tree.systems] == [
        "A100-SXM4-80GB-MIG_2g.20gb",
        "A100-SXM4-80GB-MIG_1g.10gb",
    ]
    assert [p.relative_to(tmp_path).parts[-2:] for p in tree.results] == [
        ("resnet50", "Offline")
    ] * 2


@pytest.mark.slow
def test_tree_of_both_modes_passes_our_checker(runs: dict[str, Path], tmp_path: Path) -> None:
    """A tree written from an independent and a unified run has no problem our checker knows."""
    write_submission(list(runs.values()), division="open", submitter="Acme", outdir=tmp_path)
    assert check_submission(tmp_path) == ()
    assert len(_results(tmp_path)) == 3


@pytest.mark.slow
def test_unified_run_is_one_result_for_the_layout(runs: dict[str, Path], tmp_path: Path) -> None:
    """A unified run is one system whose name and accelerator show the whole MIG layout."""
    tree = write_submission([runs["unified"]], division="open", submitter="Acme", outdir=tmp_path)
    (folder,) = tree.results
    system = _system(tmp_path, folder)
    assert tree.systems == ("A100-SXM4-80GB-MIG_2g.20gb_1g.10gb_ORT_emulated",)
    assert "MIG 2g.20gb+1g.10gb" in system["system_name"]
    assert "MIG 2g.20gb+1g.10gb" in system["accelerator_model_name"]
    assert "NOT an MLPerf result" not in (folder / "README.md").read_text()


@pytest.mark.slow
def test_independent_readme_says_the_sum_is_not_a_result(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    """Every independent-mode result README states that the instances' sum is not an MLPerf result."""
    tree = write_submission(
        [runs["independent"]], division="open", submitter="Acme", outdir=tmp_path
    )
    for folder in tree.results:
        assert (
            "sum of the instances' results is an engineering metric and NOT an MLPerf result"
            in ((folder / "README.md").read_text())
        )


@pytest.mark.slow
def test_emulated_run_is_labelled(runs: dict[str, Path], tmp_path: Path) -> None:
    """An emulated run says so in system_name, the accelerator, hw_notes and the README."""
    tree = write_submission([runs["unified"]], division="open", submitter="Acme", outdir=tmp_path)
    system = _system(tmp_path, tree.results[0])
    assert system["system_name"].startswith("Emulated (CPU): ")
    assert system["accelerator_model_name"].startswith(
        "None: CPU emulation of NVIDIA A100-SXM4-80GB"
    )
    assert system["accelerators_per_node"] == "0"
    assert "EMULATED" in system["hw_notes"]
    assert "EMULATED: no GPU was used" in (tree.results[0] / "README.md").read_text()


@pytest.mark.slow
def test_system_description_has_all_fields(runs: dict[str, Path], tmp_path: Path) -> None:
    """The system description holds the 35 checker fields, meaningful ones non-empty."""
    tree = write_submission([runs["unified"]], division="open", submitter="Acme", outdir=tmp_path)
    system = _system(tmp_path, tree.results[0])
    assert list(system) == list(rules.SYSTEM_FIELDS)
    assert all(system[k] for k in rules.MEANINGFUL_SYSTEM_FIELDS)
    assert system["host_processor_model_name"] == "AMD EPYC 7763 64-Core Processor"


@pytest.mark.slow
def test_open_division_marks_undetectable_fields(runs: dict[str, Path], tmp_path: Path) -> None:
    """In the open division, fields no source fills are written as not reported and listed."""
    tree = write_submission([runs["unified"]], division="open", submitter="Acme", outdir=tmp_path)
    system = _system(tmp_path, tree.results[0])
    assert system["cooling"] == NOT_REPORTED
    assert (
        "Not reported (not detectable on the host): host_memory_configuration, cooling"
        in system["hw_notes"]
    )


@pytest.mark.slow
def test_synthetic_run_is_marked_for_open(runs: dict[str, Path], tmp_path: Path) -> None:
    """Synthetic weights/data: README says so and accuracy.txt has no accuracy figure, only the hash."""
    tree = write_submission([runs["unified"]], division="open", submitter="Acme", outdir=tmp_path)
    folder = tree.results[0]
    assert "SYNTHETIC WEIGHTS AND DATA" in (folder / "README.md").read_text()
    lines = (folder / "accuracy" / "accuracy.txt").read_text().splitlines()
    assert lines[0].startswith("# accuracy not reported: synthetic")
    assert rules.HASH_LINE.match(lines[-1])
    assert not any(rules.accuracy_pattern("resnet").match(line) for line in lines)


def test_accuracy_log_is_truncated_with_hash_of_full_log(real_run: Path, tmp_path: Path) -> None:
    """The tree's accuracy log is at most 10 KiB and accuracy.txt holds the full log's SHA-256."""
    tree = write_submission([real_run], division="open", submitter="Acme", outdir=tmp_path)
    full = (real_run / "layout" / "accuracy" / "mlperf_log_accuracy.json").read_bytes()
    kept = (tree.results[0] / "accuracy" / "mlperf_log_accuracy.json").read_bytes()
    assert len(full) > rules.MAX_ACCURACY_LOG_SIZE >= len(kept)
    assert kept.startswith(full[:4096]) and kept.endswith(full[-4096:])
    digest = hashlib.sha256(full).hexdigest()
    assert f"hash={digest}" in (tree.results[0] / "accuracy" / "accuracy.txt").read_text()


@pytest.mark.slow
def test_closed_division_refuses_synthetic_runs(runs: dict[str, Path], tmp_path: Path) -> None:
    """The closed division refuses runs with synthetic weights or data, writing nothing."""
    with pytest.raises(
        SubmissionError, match="closed division refuses runs with synthetic"
    ) as excinfo:
        write_submission(
            [runs["unified"]], division="closed", submitter="Acme", outdir=tmp_path / "S"
        )
    assert "below the closed-division target" not in str(excinfo.value)
    assert not (tmp_path / "S").exists()


def test_closed_division_refuses_accuracy_below_target(
    real_run: Path, tmp_path: Path, overrides_file: Path
) -> None:
    """A real-weights run whose accuracy failed its target is refused for the closed division."""
    run = tmp_path / "run"
    shutil.copytree(real_run, run)
    results = json.loads((run / "results.json").read_text())
    report = results["layout_accuracy"]["accuracy"]
    report.update(value=70.0, passed=False)
    (run / "results.json").write_text(json.dumps(results))
    with pytest.raises(
        SubmissionError, match=r"accuracy 70\.0 is below the closed-division target 75\.695"
    ):
        write_submission(
            [run],
            division="closed",
            submitter="Acme",
            outdir=tmp_path / "S",
            overrides=overrides_file,
        )


def test_missing_values_are_listed_in_one_error(real_run: Path, tmp_path: Path) -> None:
    """Closed division: every missing system-description value is named in one error."""
    with pytest.raises(SubmissionError) as excinfo:
        write_submission([real_run], division="closed", submitter="Acme", outdir=tmp_path / "S")
    message = str(excinfo.value)
    assert "\n" not in message
    for field in ("host_memory_configuration", "accelerator_host_interconnect", "cooling"):
        assert field in message
    assert not (tmp_path / "S").exists()


def test_closed_tree_with_overrides(
    audited_run: Path, tmp_path: Path, overrides_file: Path
) -> None:
    """With the overrides file, a real-weights run with its compliance audits is written with the
    reference accuracy line."""
    tree = write_submission(
        [audited_run],
        division="closed",
        submitter="Acme",
        outdir=tmp_path / "S",
        overrides=overrides_file,
    )
    system = _system(tmp_path / "S", tree.results[0])
    assert system["cooling"] == "air-cooled"
    assert system["accelerator_model_name"] == "NVIDIA A100-SXM4-80GB (MIG 2g.20gb+1g.10gb)"
    accuracy_txt = (tree.results[0] / "accuracy" / "accuracy.txt").read_text()
    assert accuracy_txt.startswith("accuracy=76.000%, good=778, total=1024\n")
    problems = [p.message for p in check_submission(tmp_path / "S")]
    assert problems == ["closed division needs the scenarios SingleStream, MultiStream as well"]


@pytest.mark.slow
def test_closed_division_refuses_invalid_results(runs: dict[str, Path], tmp_path: Path) -> None:
    """A LoadGen result that is not VALID is refused for the closed division."""
    with pytest.raises(SubmissionError, match="closed division needs a VALID LoadGen result"):
        write_submission(
            [runs["unified"]], division="closed", submitter="Acme", outdir=tmp_path / "S"
        )


@pytest.mark.slow
def test_host_description_fills_undetectable_fields(runs: dict[str, Path], tmp_path: Path) -> None:
    """A host description that matches the host fills cooling and networking."""
    hosts = tmp_path / "hosts"
    hosts.mkdir()
    (hosts / "lab.json").write_text(
        json.dumps(
            {
                "name": "lab server",
                "match": {"host_processor_model_name": "EPYC 7763", "gpu": "A100"},
                "fields": {"cooling": "liquid", "accelerator_host_interconnect": "PCIe Gen4 x16"},
            }
        )
    )
    tree = write_submission(
        [runs["unified"]], division="open", submitter="Acme", outdir=tmp_path / "S", hosts=[hosts]
    )
    system = _system(tmp_path / "S", tree.results[0])
    assert system["cooling"] == "liquid"
    assert system["accelerator_host_interconnect"].startswith("N/A (emulated")


@pytest.mark.slow
def test_unknown_override_field_is_refused(runs: dict[str, Path], tmp_path: Path) -> None:
    """An overrides file naming a field the checker does not know is refused."""
    path = tmp_path / "overrides.json"
    path.write_text(json.dumps({"colling": "air"}))
    with pytest.raises(SubmissionError, match="unknown fields colling"):
        write_submission(
            [runs["unified"]], division="open", submitter="Acme", outdir=tmp_path, overrides=path
        )


@pytest.mark.slow
def test_quick_preset_logs_are_refused(runs: dict[str, Path], tmp_path: Path) -> None:
    """Logs the MLCommons checker would reject (short duration, few samples) are refused up front."""
    run = shutil.copytree(runs["unified"], tmp_path / "run")
    detail = run / "layout" / "performance" / "mlperf_log_detail.txt"
    text = detail.read_text()
    text = text.replace(
        '"effective_min_duration_ms", "value": 600000', '"effective_min_duration_ms", "value": 2000'
    )
    text = text.replace(
        '"effective_performance_sample_count", "value": 1024',
        '"effective_performance_sample_count", "value": 64',
    )
    detail.write_text(text)
    with pytest.raises(SubmissionError) as excinfo:
        write_submission([run], division="open", submitter="Acme", outdir=tmp_path / "S")
    assert "min_duration is 2000 ms" in str(excinfo.value)
    assert "performance_sample_count is 64" in str(excinfo.value)
    assert "--set min_duration=600000 --set performance_sample_count_override=1024" in str(
        excinfo.value
    )


@pytest.mark.slow
def test_rewriting_a_result_replaces_it(runs: dict[str, Path], tmp_path: Path) -> None:
    """Writing the same run twice into one tree leaves one clean result folder."""
    write_submission([runs["unified"]], division="open", submitter="Acme", outdir=tmp_path)
    write_submission([runs["unified"]], division="open", submitter="Acme", outdir=tmp_path)
    assert check_submission(tmp_path) == ()


@pytest.mark.slow
def test_same_result_twice_is_refused(runs: dict[str, Path], tmp_path: Path) -> None:
    """Two runs that would write the same result folder are refused."""
    with pytest.raises(SubmissionError, match="both give"):
        write_submission([runs["unified"]] * 2, division="open", submitter="Acme", outdir=tmp_path)


@pytest.mark.slow
def test_run_from_another_host_is_noted(runs: dict[str, Path], tmp_path: Path) -> None:
    """When the run ran on another host, hw_notes says where the host facts were detected."""
    run_dir = shutil.copytree(runs["unified"], tmp_path / "run")
    data = json.loads((run_dir / "results.json").read_text())
    data["hosts"] = ["vm-7"]
    (run_dir / "results.json").write_text(json.dumps(data))
    tree = write_submission([run_dir], division="open", submitter="Acme", outdir=tmp_path / "S")
    assert "the run ran on vm-7" in _system(tmp_path / "S", tree.results[0])["hw_notes"]


@pytest.mark.slow
def test_override_with_a_bad_status_is_refused(runs: dict[str, Path], tmp_path: Path) -> None:
    """An override that breaks a system-description rule is refused before writing."""
    path = tmp_path / "overrides.json"
    path.write_text(json.dumps({"status": "released"}))
    with pytest.raises(
        SubmissionError, match="status 'released' is not one of available, preview, rdi"
    ):
        write_submission(
            [runs["unified"]],
            division="open",
            submitter="Acme",
            outdir=tmp_path / "S",
            overrides=path,
        )


@pytest.mark.slow
def test_missing_logs_are_listed_with_other_problems(runs: dict[str, Path], tmp_path: Path) -> None:
    """A run folder without its performance logs is one of the problems of the one error."""
    run_dir = shutil.copytree(runs["unified"], tmp_path / "run")
    (run_dir / "layout" / "performance" / "mlperf_log_detail.txt").unlink()
    with pytest.raises(SubmissionError, match=r"lacks mlperf_log_detail\.txt") as excinfo:
        write_submission(
            [run_dir, tmp_path / "nothing"],
            division="open",
            submitter="Acme",
            outdir=tmp_path / "S",
        )
    assert "2 problem(s)" in str(excinfo.value)


def test_unknown_profile_memory_is_not_invented() -> None:
    """B200 3g/4g/7g have no memory size in the profile table: None, not a TypeError or a guess."""
    from mlperf_mig.submission.writer import _memory_gib

    assert _memory_gib("B200", "3g.90gb") is None
    assert _memory_gib("GH200-144GB", "7g.144gb") is None
    assert _memory_gib("B200", "1g.23gb") == 22.0
    assert _memory_gib("B200", None) == 180.0


def test_unknown_memory_is_said_not_known() -> None:
    """The system description leaves the memory empty (so it is never made up) and says why."""
    from mlperf_mig.submission.hostinfo import HostFacts
    from mlperf_mig.submission.sysdesc import Accelerator, describe_system

    accelerator = Accelerator(
        gpu="B200-180GB",
        partitioning="mig",
        layout="3g.90gb+4g.90gb",
        instance="3g.90gb, instance 0",
        memory_gib=None,
        framework="TensorRT 10.3.0",
        on_cuda=True,
    )
    fields, missing = describe_system(
        accelerator=accelerator,
        division="open",
        submitter="Acme",
        system_type="edge",
        loadgen_version="6.0.17",
        notes=[],
        host=HostFacts(fields={}),
        gpu=None,
        hosts=[],
        overrides={},
    )
    assert fields["accelerator_memory_capacity"] == ""
    assert "accelerator_memory_capacity" in missing
    assert "Accelerator memory capacity not known" in fields["hw_notes"]
    assert "3g.90gb, instance 0 of NVIDIA B200-180GB" in fields["hw_notes"]


def test_readme_says_why_loadgen_said_invalid() -> None:
    """A quick-preset run LoadGen marked INVALID says so plainly in the result README."""
    from types import SimpleNamespace

    from mlperf_mig.submission.readme import invalid_paragraph

    run = SimpleNamespace(preset="quick", loadgen_scenario="Offline")
    log = {
        "result_validity": "INVALID",
        "result_min_duration_met": False,
        "effective_min_duration_ms": 600000,
        "result_max_latency_ns": 3_200_000_000,
    }
    text = invalid_paragraph(run, log)
    assert text.startswith(
        "LoadGen marked this run INVALID because the quick preset ran it for about 3 s rather than "
        "the 600 s minimum duration"
    )
    assert "open division accepts" in text
    assert invalid_paragraph(run, {**log, "result_validity": "VALID"}) == ""


@pytest.mark.slow
def test_quick_run_readme_in_the_tree_says_invalid(good_tree: Path) -> None:
    """Every result README whose performance log says INVALID carries the plain statement."""
    for folder in _results(good_tree):
        detail = (folder / "performance" / "run_1" / "mlperf_log_detail.txt").read_text()
        invalid = '"result_validity", "value": "INVALID"' in detail
        assert ("LoadGen marked this run INVALID" in (folder / "README.md").read_text()) == invalid


def test_short_singlestream_logs_hint_at_the_submission_preset() -> None:
    """The seconds-long Offline recipe is no hint for SingleStream: those runs need 600 s."""
    from types import SimpleNamespace

    from mlperf_mig.submission.writer import _short_run_hint

    source = SimpleNamespace(scenario="SingleStream", benchmark_folder="resnet50")
    hint = _short_run_hint(["x: min_duration is 2000 ms; ..."], [source])
    assert "--preset submission" in hint
    assert "target_qps" not in hint
    offline = SimpleNamespace(scenario="Offline", benchmark_folder="resnet50")
    assert "--set target_qps=0.1" in _short_run_hint(["x: min_duration is 2000 ms"], [offline])


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["independent", "unified"])
def test_failed_test_is_refused_with_its_reason(
    runs: dict[str, Path], tmp_path: Path, mode: str
) -> None:
    """A test that ran to the end but failed (samples completed without data) is refused, naming why."""
    run = tmp_path / "run"
    shutil.copytree(runs[mode], run)
    results = json.loads((run / "results.json").read_text())
    failed = (
        results["layout_result"] if mode == "unified" else results["instances"][0]["performance"]
    )
    failed["error"] = "DatasetError: cannot decode image 'x.JPEG'"
    (run / "results.json").write_text(json.dumps(results))
    with pytest.raises(SubmissionError, match=r"cannot decode image 'x\.JPEG'") as excinfo:
        write_submission([run], division="open", submitter="Acme", outdir=tmp_path / "S")
    assert "status 'ok'" not in str(excinfo.value)
    assert not (tmp_path / "S").exists()


def test_a_unified_layout_over_cluster_nodes_is_a_network_system() -> None:
    """A layout whose one LoadGen dispatched to three nodes is described as a three-node network system."""
    from mlperf_mig.submission.hostinfo import HostFacts
    from mlperf_mig.submission.sysdesc import Accelerator, describe_system

    def fields_of(nodes: int, network: bool) -> dict:
        accelerator = Accelerator(
            gpu="A100-SXM4-80GB",
            partitioning="emulated",
            layout="3x2g.20gb+1g.10gb",
            instance=None,
            memory_gib=80.0,
            framework="ONNX Runtime",
            nodes=nodes,
            network=network,
        )
        fields, _ = describe_system(
            accelerator=accelerator,
            division="open",
            submitter="Acme",
            system_type="edge",
            loadgen_version="6.0.17",
            notes=[],
            host=HostFacts(fields={}),
            gpu=None,
            hosts=[],
            overrides={},
        )
        return fields

    network = fields_of(3, True)
    assert network["number_of_nodes"] == 3
    assert "network system" in network["host_networking_topology"]
    assert network["system_name"].endswith("over 3 nodes (network)")
    single = fields_of(1, False)
    assert (
        single["number_of_nodes"] == 1 and single["host_networking_topology"] == "N/A (single node)"
    )


@pytest.mark.parametrize("backend", ["tensorrt", "onnxruntime"])
def test_cuda_version_goes_with_a_framework_that_runs_on_cuda(backend: str) -> None:
    """The framework field carries the CUDA version when the backend class says it runs on CUDA
    (TensorRT), and not for one that does not (ONNX Runtime's CPU wheel); both list the driver."""
    from mlperf_mig.engines import backend_class
    from mlperf_mig.submission.hostinfo import GpuFacts, HostFacts
    from mlperf_mig.submission.sysdesc import Accelerator, describe_system

    accelerator = Accelerator(
        gpu="A100-SXM4-80GB",
        partitioning="mig",
        layout="7g.80gb",
        instance=None,
        memory_gib=80.0,
        framework="X 1.0",
        on_cuda=backend_class(backend).needs_gpu,
    )
    gpu = GpuFacts(
        name="A100-SXM4-80GB",
        driver="550.54.15",
        cuda="12.4",
        pcie=None,
        max_sm_clock_mhz=None,
        memory_mib=81920,
    )
    fields, _ = describe_system(
        accelerator=accelerator,
        division="open",
        submitter="Acme",
        system_type="edge",
        loadgen_version="6.0.17",
        notes=[],
        host=HostFacts(fields={}),
        gpu=gpu,
        hosts=[],
        overrides={},
    )
    assert fields["framework"] == ("X 1.0, CUDA 12.4" if backend == "tensorrt" else "X 1.0")
    assert "NVIDIA driver 550.54.15, CUDA 12.4" in fields["other_software_stack"]
