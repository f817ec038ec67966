"""The notebook API surface: cheap import, plan without running, the plan command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import mlperf_mig
from mlperf_mig import cli


def test_import_is_cheap() -> None:
    """`import mlperf_mig` and reaching `run` import neither onnxruntime nor LoadGen."""
    code = (
        "import sys, mlperf_mig; mlperf_mig.run, mlperf_mig.sweep, mlperf_mig.plan; "
        "heavy = {'onnxruntime', 'mlperf_loadgen', 'onnx', 'matplotlib'} & set(sys.modules); "
        "print(sorted(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_plan_writes_nothing(tmp_path: Path) -> None:
    """plan() resolves instances, devices and the output folder without creating it."""
    plan = mlperf_mig.plan(6, backend="null", emulate=True, outdir=tmp_path / "run")
    assert [s.name for s in plan.slots] == ["i0-4g.40gb", "i1-2g.20gb", "i2-1g.10gb"]
    assert not (tmp_path / "run").exists()


def test_plan_command_json(capsys: pytest.CaptureFixture[str]) -> None:
    """`mlperf-mig plan --json` prints the instances, engines and settings key."""
    assert cli.main(["plan", "--scenario", "7", "--emulate", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["partitioning"] == "emulated" and len(data["instances"]) == 4
    assert [e["key"] for e in data["engines"]] == ["cpu"]


def test_settings_key_separates_audited_runs(tmp_path: Path) -> None:
    """Asking for the compliance audits changes the settings key (a sweep never resumes an
    unaudited run for an audited one); the same options give the same key."""
    same = {"backend": "null", "outdir": tmp_path / "run"}
    plain = mlperf_mig.plan(7, **same).settings_key
    assert mlperf_mig.plan(7, **same).settings_key == plain
    assert mlperf_mig.plan(7, compliance=True, **same).settings_key != plain
