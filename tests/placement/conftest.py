"""Shared fixtures of the placement tests: the recorded NVML states, and no user systems path."""

from __future__ import annotations

from pathlib import Path

import pytest

NVML_STATES = Path(__file__).parent.parent / "registry" / "fixtures"


@pytest.fixture(autouse=True, name="no_user_systems_path")
def fixture_no_user_systems_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep a user's MLPERF_MIG_SYSTEMS_PATH out of the tests."""
    monkeypatch.delenv("MLPERF_MIG_SYSTEMS_PATH", raising=False)
