"""Shared fixtures of the runner tests: quick null-backend settings and runs reused by many tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
NVML_STATES = HERE.parent / "registry" / "fixtures"
# Null backend, short LoadGen tests: about 600 samples per instance in 0.3 s.
QUICK_NULL: dict[str, Any] = {
    "backend": "null",
    "settings": {"min_duration": 300, "target_qps": 2000},
    "progress": False,
}


@pytest.fixture(autouse=True, scope="session", name="importable_entries")
def fixture_importable_targets() -> Iterator[None]:
    """Spawned workers import `fault_entries` by name: put this folder on the path they inherit."""
    sys.path.insert(0, str(HERE))
    yield
    sys.path.remove(str(HERE))


@pytest.fixture(autouse=True, name="no_user_systems_path")
def fixture_no_user_systems_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep a user's MLPERF_MIG_SYSTEMS_PATH out of the tests."""
    monkeypatch.delenv("MLPERF_MIG_SYSTEMS_PATH", raising=False)


@pytest.fixture(scope="session", name="good_run")
def fixture_good_run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A finished independent run of two emulated instances, performance and accuracy."""
    import mlperf_mig

    outdir = tmp_path_factory.mktemp("good") / "run"
    return mlperf_mig.run("2g.20gb+1g.10gb", outdir=outdir, **QUICK_NULL)


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def recorded_pids(outdir: Path) -> list[int]:
    """Every pid the fault targets recorded: the workers' and their children's."""
    return [int(p.read_text()) for p in (outdir / "pids").iterdir()]
