"""Shared fixtures of the study tests: one small repeated sweep with isolation on the null backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

# Null backend, short LoadGen tests (about 0.3 s of samples per instance).
QUICK_NULL: dict[str, Any] = {
    "backend": "null",
    "settings": {"min_duration": 300, "target_qps": 2000},
    "progress": False,
    "accuracy": False,
}


@pytest.fixture(autouse=True, name="no_user_systems_path")
def fixture_no_user_systems_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep a user's MLPERF_MIG_SYSTEMS_PATH out of the tests."""
    monkeypatch.delenv("MLPERF_MIG_SYSTEMS_PATH", raising=False)


@pytest.fixture(scope="session", name="study_dir")
def fixture_study_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("study") / "sweep"


@pytest.fixture(scope="session", name="studied")
def fixture_studied(study_dir: Path) -> Any:
    """Study layout 5 (one 1g.10gb) and 2g.20gb+1g.10gb, two repeats each, with isolation."""
    import mlperf_mig

    return mlperf_mig.sweep(
        [5, "2g.20gb+1g.10gb"], outdir=study_dir, repeats=2, isolation=True, **QUICK_NULL
    )
