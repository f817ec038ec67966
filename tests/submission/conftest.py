"""Run folders for the submission tests, with genuine LoadGen logs from a trivial SUT.

Each folder has the runner's layout (results.json, one folder per instance with performance/,
accuracy/ and user.conf); the logs come from real LoadGen tests, one per spawned process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from mlperf_mig.engines.backend import DeviceReport
from mlperf_mig.harness.compliance import AuditVerdict
from mlperf_mig.harness.result import AccuracyReport, InstanceResult
from mlperf_mig.runner.results import InstanceRun, RunResult
from mlperf_mig.submission import hostinfo, rules, write_submission

LOADGEN_RUN = Path(__file__).with_name("loadgen_run.py")
GPU = "A100-SXM4-80GB"
LAYOUT = "2g.20gb+1g.10gb"
PROFILES = ("2g.20gb", "1g.10gb")
HOST = {
    "host_processor_model_name": "AMD EPYC 7763 64-Core Processor",
    "host_processors_per_node": 2,
    "host_processor_core_count": 64,
    "host_memory_capacity": "1008 GiB",
    "host_storage_capacity": "15.4 TiB",
    "host_storage_type": "NVMe SSD",
    "host_network_card_count": 2,
    "host_networking": "Ethernet: eth0 (100 Gb/s), eth1 (100 Gb/s)",
    "operating_system": "Ubuntu 22.04.4 LTS (kernel 5.15.0)",
}


def run_loadgen(
    folders: list[Path],
    scenario: str = "Offline",
    modes: tuple[str, ...] = ("performance", "accuracy"),
) -> None:
    """LoadGen runs of `modes` (performance, accuracy, or audits) for every folder, in parallel
    processes."""
    processes = [
        subprocess.Popen(
            [sys.executable, str(LOADGEN_RUN), str(folder), mode, scenario],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for folder in folders
        for mode in modes
    ]
    codes = [p.wait(timeout=60) for p in processes]
    assert codes == [0] * len(codes), f"LoadGen helper failed: {codes}"


def instance_result(
    folder: Path, mode: str, *, synthetic: bool, scenario: str = "Offline"
) -> InstanceResult:
    report = None
    if mode == "accuracy":
        report = AccuracyReport(
            metric="top1",
            value=0.1 if synthetic else 76.0,
            target=75.6954,
            meaningful=not synthetic,
            passed=None if synthetic else True,
            sample_count=1024,
            note="synthetic weights: the model is not trained" if synthetic else "",
        )
    return InstanceResult(
        benchmark="resnet50",
        loadgen_scenario=scenario,
        mode=mode,
        valid=False,
        validity="INVALID" if mode == "performance" else "",
        invalid_reasons=("min duration not met",) if mode == "performance" else (),
        throughput=120.0 if mode == "performance" else None,
        throughput_unit="samples/s",
        latency_ns={"99.00": 1_000_000},
        effective_settings={},
        device=DeviceReport(
            backend="onnxruntime", provider="CPUExecutionProvider", device="cpu", version="1.19.2"
        ),
        log_dir=str(folder / mode),
        user_conf=str(folder / "user.conf"),
        target_source="user.conf",
        samples_completed=1024,
        failed_samples=0,
        error=None,
        synthetic_data=synthetic,
        accuracy=report,
        wall_s=1.0,
    )


def make_run(
    outdir: Path,
    mode: str,
    *,
    synthetic: bool = True,
    partitioning: str = "emulated",
    scenario: str = "Offline",
) -> Path:
    """A complete run folder of the two-instance layout in `mode`, in LoadGen `scenario`."""
    names = ["layout"] if mode == "unified" else [f"i{i}-{p}" for i, p in enumerate(PROFILES)]
    run_loadgen([outdir / n for n in names], scenario)
    if scenario != "Offline":
        drop_early_end(outdir)
    results = {
        n: {
            m: instance_result(outdir / n, m, synthetic=synthetic, scenario=scenario)
            for m in ("performance", "accuracy")
        }
        for n in names
    }
    instances = [
        InstanceRun(
            name=f"i{i}-{profile}",
            index=i,
            profile=profile,
            compute_slices=int(profile[0]),
            device="cpu",
            status="ok",
            performance=None if mode == "unified" else results[f"i{i}-{profile}"]["performance"],
            accuracy=None if mode == "unified" else results[f"i{i}-{profile}"]["accuracy"],
            dispatched_samples=512 if mode == "unified" else None,
        )
        for i, profile in enumerate(PROFILES)
    ]
    layout = results.get("layout", {})
    run = RunResult(
        gpu=GPU,
        layout=LAYOUT,
        system_id=f"{GPU}_{LAYOUT}",
        scenario=None,
        partitioning=partitioning,
        mode=mode,
        benchmark="resnet50",
        loadgen_scenario=scenario,
        backend="onnxruntime",
        device="cpu",
        precision="fp32",
        variant="tiny",
        preset="quick",
        synthetic_weights=synthetic,
        synthetic_data=synthetic,
        outdir=str(outdir),
        settings_key="test",
        started_at="2026-11-30T08:00:00Z",
        duration_s=2.0,
        instances=instances,
        layout_result=layout.get("performance"),
        layout_accuracy=layout.get("accuracy"),
        layout_status="ok" if mode == "unified" else None,
    )
    run.save(outdir)
    return outdir


def runner_run(outdir: Path, mode: str) -> Path:
    """A real run of the tiny ResNet50 on the emulated two-instance layout."""
    import mlperf_mig

    mlperf_mig.run(
        scenario=LAYOUT,
        benchmark="resnet50",
        backend="onnxruntime",
        preset="quick",
        mode=mode,
        outdir=outdir,
        progress=False,
        variant="tiny",
        emulate=True,
        settings=rules.short_run_settings("resnet"),
    )
    return outdir


@pytest.fixture(name="runs", scope="session")
def fixture_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An independent and a unified run of the tiny model by the runner, made once per session."""
    base = tmp_path_factory.mktemp("runs")
    return {mode: runner_run(base / mode, mode) for mode in ("independent", "unified")}


EARLY_END = "Ending early: Max test duration reached"


def drop_early_end(run: Path) -> None:
    """Stand in for a 600 s run: a run cut short by max_duration ends with LoadGen's 'Ending
    early' error record, which a full run does not have; every other record is LoadGen's own.
    (Accuracy runs issue every sample once and end on their own.)"""
    for detail in run.glob("*/performance/mlperf_log_detail.txt"):
        lines = detail.read_text().splitlines(keepends=True)
        kept = [line for line in lines if EARLY_END not in line]
        assert len(kept) == len(lines) - 1, f"{detail}: expected one early-end record"
        detail.write_text("".join(kept))


def mark_valid(run: Path, logs: str = "*/performance/mlperf_log_detail.txt") -> None:
    """Stand in for a 10-minute run: a VALID result needs the full 600 s of LoadGen time."""
    for detail in run.glob(logs):
        text = detail.read_text().replace(
            '"result_validity", "value": "INVALID"', '"result_validity", "value": "VALID"'
        )
        detail.write_text(text)


@pytest.fixture(name="real_run", scope="session")
def fixture_real_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A VALID unified run on a (pretend) MIG GPU with official weights and data: closed input."""
    run = make_run(
        tmp_path_factory.mktemp("real") / "run", "unified", synthetic=False, partitioning="mig"
    )
    mark_valid(run)
    return run


# The system-description values a closed tree needs that detection cannot read here.
CLOSED_OVERRIDES = {
    "host_memory_configuration": "16x 64 GiB DDR4-3200",
    "accelerator_host_interconnect": "PCIe Gen4 x16",
    "cooling": "air-cooled",
}


def audit_verdict(folder: Path, audit: str) -> AuditVerdict:
    """A passing verdict with plausible numbers, its verify files written next to the logs."""
    test01 = audit == "TEST01"
    verdict = AuditVerdict(
        audit=audit, passed=True, reason="", short=False, log_dir=str(folder / audit),
        reference_score=100.0, test_score=101.0, score_unit="samples/s", performance_passed=True,
        accuracy_passed=True if test01 else None, sampled=300 if test01 else 0,
        matched=300 if test01 else 0,
    )  # fmt: skip
    verdict.write_files(folder / audit)
    return verdict


@pytest.fixture(name="audited_run", scope="session")
def fixture_audited_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The closed-ready unified run of `real_run`, with genuine TEST01 and TEST04 audit logs and
    passing verdicts."""
    run_dir = make_run(
        tmp_path_factory.mktemp("audited") / "run", "unified", synthetic=False, partitioning="mig"
    )
    folder = run_dir / "layout"
    run_loadgen([folder], modes=("TEST01", "TEST04"))
    mark_valid(run_dir)
    mark_valid(run_dir, "*/TEST0*/mlperf_log_detail.txt")  # stand in for 10-minute audits too
    verdicts = tuple(audit_verdict(folder, audit) for audit in ("TEST01", "TEST04"))
    attrs.evolve(RunResult.load(run_dir), layout_compliance=verdicts).save(run_dir)
    return run_dir


@pytest.fixture(name="closed_audited_tree", scope="session")
def fixture_closed_audited_tree(
    audited_run: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The closed-division tree of `audited_run`."""
    root = tmp_path_factory.mktemp("closed-tree")
    overrides = root.parent / "closed-overrides.json"
    overrides.write_text(json.dumps(CLOSED_OVERRIDES))
    with pytest.MonkeyPatch.context() as patch:
        fix_host(patch)
        write_submission(
            [audited_run],
            division="closed",
            submitter="Org",
            outdir=root / "tree",
            overrides=overrides,
        )
    return root / "tree"


def fix_host(patch: pytest.MonkeyPatch) -> None:
    """Detection returns the same host everywhere, and no GPU."""
    patch.setattr(hostinfo.HostFacts, "detect", classmethod(lambda cls, root="/": cls(fields=HOST)))
    patch.setattr(hostinfo.GpuFacts, "detect", classmethod(lambda cls, name: None))


@pytest.fixture(name="fixed_host")
def fixture_fixed_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test sees the fixed host of HOST and no GPU."""
    fix_host(monkeypatch)


@pytest.fixture(name="scenario_trees", scope="session")
def fixture_scenario_trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Open-division trees of unified runs in Server, SingleStream and MultiStream, with genuine
    LoadGen logs; tests copy them before changing them."""
    base = tmp_path_factory.mktemp("scenario-trees")
    trees = {}
    with pytest.MonkeyPatch.context() as patch:
        fix_host(patch)
        for scenario in ("Server", "SingleStream", "MultiStream"):
            run = make_run(base / scenario / "run", "unified", scenario=scenario)
            trees[scenario] = base / scenario / "tree"
            write_submission([run], division="open", submitter="Acme", outdir=trees[scenario])
    return trees


@pytest.fixture(name="good_tree", scope="session")
def fixture_good_tree(runs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An open-division tree written from the unified run; tests copy it before changing it."""
    root = tmp_path_factory.mktemp("tree")
    with pytest.MonkeyPatch.context() as patch:
        fix_host(patch)
        write_submission([runs["unified"]], division="open", submitter="Acme", outdir=root)
    return root


@pytest.fixture(name="made_runs", scope="session")
def fixture_made_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A unified and an independent run folder of make_run that the open-division writer
    accepts; tests copy them before changing them."""
    base = tmp_path_factory.mktemp("made-runs")
    return {mode: make_run(base / mode, mode) for mode in ("unified", "independent")}
