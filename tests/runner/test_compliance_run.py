"""Runs with compliance audits: each audit a round of fresh processes after the accuracy round,
per instance in independent mode and once for the layout in unified mode; a failed audit is a
result (its row says why, exit 1), not a crash."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import mlperf_mig
from mlperf_mig.cli import main
from mlperf_mig.errors import SettingsError
from mlperf_mig.runner.results import RunResult

LAYOUT = "2g.20gb+1g.10gb"
SETTINGS = {"min_duration": 300, "target_qps": 2000}
# The paced run measures its target (the quick preset's calibration, which its audits repeat):
# about 0.3 s of samples at 2 ms a sample.
PACED = {"min_duration": 300}


@pytest.fixture(name="audited", scope="module")
def fixture_audited(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, RunResult, str]:
    """`mlperf-mig run --compliance` on two instances at 2 ms per sample; i0 caches answers."""
    outdir = tmp_path_factory.mktemp("audited") / "run"
    argv = [
        "run", "--scenario", LAYOUT, "--backend", "null", "--compliance", "--outdir", str(outdir),
        "--worker-entry", "audit_entries:paced_or_caching",
        *(f"--set={key}={value}" for key, value in PACED.items()),
    ]  # fmt: skip
    code = main(argv)
    return code, RunResult.load(outdir), str(outdir)


def _verdicts(run: RunResult, name: str) -> dict[str, Any]:
    (instance,) = [i for i in run.instances if i.name == name]
    return {v.audit: v for v in instance.compliance}


@pytest.mark.slow
def test_failed_audit_is_a_result_with_exit_code_1(audited: tuple[int, RunResult, str]) -> None:
    """The caching instance fails TEST04; every worker ended normally and the exit code is 1."""
    code, run, _ = audited
    assert code == 1
    assert run.ok
    assert run.compliance_passed is False
    test04 = _verdicts(run, "i0-2g.20gb")["TEST04"]
    assert not test04.passed and "faster than the performance run" in test04.reason


@pytest.mark.slow
def test_failed_audit_in_a_sweep_exits_1(tmp_path: Path) -> None:
    """A sweep whose layout fails an audit exits 1, as a single run does."""
    argv = [
        "sweep", "--scenarios", LAYOUT, "--backend", "null", "--compliance", "--outdir", str(tmp_path / "sweep"),
        "--worker-entry", "audit_entries:paced_or_caching",
        *(f"--set={key}={value}" for key, value in PACED.items()),
    ]  # fmt: skip
    assert main(argv) == 1


@pytest.mark.slow
def test_computing_instance_passes_test04(audited: tuple[int, RunResult, str]) -> None:
    """The instance that computes every sample never fails TEST04 (its repeated sample is no
    faster): PASS, or inconclusive where the machine's measured noise exceeds the 10% band."""
    _, run, _ = audited
    verdict = _verdicts(run, "i1-1g.10gb")["TEST04"]
    assert verdict.passed or verdict.inconclusive, verdict.reason


@pytest.mark.slow
def test_table_names_the_failed_audit(audited: tuple[int, RunResult, str]) -> None:
    """The table has a compliance column naming each verdict, short audits labelled."""
    _, run, _ = audited
    table = run.table()
    assert "compliance" in table
    assert "TEST04 FAIL (short):" in table
    assert "quick-preset audits" in table


@pytest.mark.slow
def test_audit_logs_and_verify_files_per_instance(audited: tuple[int, RunResult, str]) -> None:
    """Each instance folder holds its audits' logs, user.conf and verify files, and no
    audit.config is left anywhere."""
    _, run, outdir = audited
    for instance in run.instances:
        folder = Path(outdir) / instance.name
        for audit, verify in (
            ("TEST01", "verify_accuracy.txt"),
            ("TEST04", "verify_performance.txt"),
        ):
            assert (folder / audit / "mlperf_log_detail.txt").is_file()
            assert (folder / audit / verify).is_file()
    assert list(Path(outdir).rglob("audit.config")) == []


@pytest.mark.slow
def test_accuracy_run_covers_every_sample(audited: tuple[int, RunResult, str]) -> None:
    """With audits, the accuracy run scores every loaded sample (not the quick preset's 64), so
    that TEST01's sampled responses can be compared with it."""
    _, run, _ = audited
    assert [i.accuracy.accuracy.sample_count for i in run.instances] == [1024, 1024]
    assert all(
        v.matched == v.sampled for i in run.instances for v in i.compliance if v.audit == "TEST01"
    )


@pytest.mark.slow
def test_audits_run_with_the_performance_runs_settings(audited: tuple[int, RunResult, str]) -> None:
    """An audit's user.conf is its performance run's (its measured target included), which
    stays in the instance folder."""
    _, run, outdir = audited
    folder = Path(outdir) / run.instances[0].name
    performance_conf = (folder / "user.conf").read_text()
    assert run.instances[0].performance.target_source == "calibration"
    assert "resnet50.Offline.target_qps = " in performance_conf
    assert (folder / "TEST04" / "user.conf").read_text() == performance_conf


@pytest.mark.slow
def test_verdicts_survive_results_json(audited: tuple[int, RunResult, str]) -> None:
    """results.json keeps every verdict and the aggregate compliance flag."""
    _, run, outdir = audited
    again = RunResult.load(outdir)
    assert [i.compliance for i in again.instances] == [i.compliance for i in run.instances]
    assert again.to_dict()["aggregate"]["compliance_passed"] is False


@pytest.mark.slow
def test_unified_run_audits_the_layout_once(tmp_path: Path) -> None:
    """Unified mode audits the layout's one LoadGen: verdicts and logs under layout/ only."""
    run = mlperf_mig.run(
        LAYOUT, mode="unified", backend="null", compliance=True, outdir=tmp_path / "run",
        settings=SETTINGS, progress=False,
    )  # fmt: skip
    assert [v.audit for v in run.layout_compliance] == ["TEST01", "TEST04"]
    assert all(i.compliance == () for i in run.instances)
    assert (tmp_path / "run" / "layout" / "TEST04" / "verify_performance.txt").is_file()
    assert list((tmp_path / "run").rglob("audit.config")) == []


def test_compliance_needs_the_accuracy_run() -> None:
    """compliance=True with accuracy=False is refused before anything runs."""
    with pytest.raises(SettingsError, match="compliance=True needs the accuracy run"):
        mlperf_mig.plan(LAYOUT, backend="null", compliance=True, accuracy=False)
