"""A `--compliance --repeats` study killed (kill -9) during a TEST01 audit leaves the
audit.config it wrote in the audit's folder; resuming the study replaces it, so the repeat's
TEST01 is judged on its merits (PASS for a backend that computes every sample) and no
audit.config is left. A user's own audit.config there is refused and kept."""

from __future__ import annotations

from pathlib import Path

import pytest

import mlperf_mig
from mlperf_mig.harness.compliance import audit_config_text

from .conftest import alive

pytestmark = pytest.mark.slow  # starts the runner's workers

# a single instance at 2 ms a computed sample (tests/runner/paced_entries.py); its target is
# measured, as the quick preset does, and its audits repeat it
INSTANCE = "i0-1g.10gb"
STUDY = {
    "backend": "null", "compliance": True, "settings": {"min_duration": 300}, "repeats": 2,
    "progress": False, "worker_entry": "paced_entries:paced",
}  # fmt: skip


def _workers_left(study: Path) -> list[int]:
    """The workers of the study (their recorded pids) still alive."""
    pids = [int(p.name) for p in study.glob(f"*/{INSTANCE}/pids/*")]
    assert pids
    return [pid for pid in pids if alive(pid)]


def _killed_in_test01(study: Path, repeat: str, text: str) -> Path:
    """What kill -9 during `repeat`'s TEST01 leaves for this test: the audit's folder with the
    audit.config the killed test wrote, and no results.json for that repeat."""
    folder = study / repeat / INSTANCE / "TEST01"
    folder.mkdir(parents=True)
    (folder / "audit.config").write_text(text)
    return folder / "audit.config"


def test_resumed_study_replaces_its_own_leftover_audit_config(tmp_path: Path) -> None:
    """Leftovers of the audit.config we write (as now, and without the marker line as before)
    are replaced: neither repeat's TEST01 fails (PASS, or inconclusive where the machine's noise
    exceeds the band), no audit.config is left, no worker outlives it."""
    study = tmp_path / "study"
    _killed_in_test01(study, "repeat-1", audit_config_text("TEST01"))
    legacy = "".join(audit_config_text("TEST01").splitlines(keepends=True)[1:])
    _killed_in_test01(study, "repeat-2", legacy)
    result = mlperf_mig.run("1g.10gb", outdir=study, **STUDY)
    verdicts = [v for run in result.runs for i in run.instances for v in i.compliance]
    test01 = [v for v in verdicts if v.audit == "TEST01"]
    assert len(test01) == 2
    assert all(v.passed or v.inconclusive for v in test01), [v.reason for v in test01]
    assert list(study.rglob("audit.config")) == []
    assert _workers_left(study) == []


def test_users_audit_config_is_refused_and_kept(tmp_path: Path) -> None:
    """A user's audit.config in a repeat's TEST01 folder is not ours: that TEST01 FAILs saying
    the file is not removed, and the file is still there byte for byte."""
    study = tmp_path / "study"
    users = "# mine\n*.*.accuracy_log_sampling_target = 9\n"
    path = _killed_in_test01(study, "repeat-1", users)
    result = mlperf_mig.run("1g.10gb", outdir=study, **{**STUDY, "repeats": 2})
    first = {v.audit: v for v in result.runs[0].instances[0].compliance}
    assert not first["TEST01"].passed
    assert "it is not removed" in first["TEST01"].reason
    assert path.read_text() == users
    assert _workers_left(study) == []
