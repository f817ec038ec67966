"""Shared fixtures of the registry tests: the shipped catalog, its GPUs and recorded NVML states."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mlperf_mig.registry import Catalog, Gpu, load_catalog

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(name="catalog", scope="session")
def fixture_catalog() -> Catalog:
    """The shipped catalog, without the user's search path."""
    return load_catalog()


@pytest.fixture(name="a100_80", scope="session")
def fixture_a100_80(catalog: Catalog) -> Gpu:
    return catalog.get("A100-80GB")


@pytest.fixture(name="a100_40", scope="session")
def fixture_a100_40(catalog: Catalog) -> Gpu:
    return catalog.get("A100-40GB")


@pytest.fixture(name="a30", scope="session")
def fixture_a30(catalog: Catalog) -> Gpu:
    return catalog.get("A30")


@pytest.fixture(name="h100", scope="session")
def fixture_h100(catalog: Catalog) -> Gpu:
    return catalog.get("H100-80GB")


@pytest.fixture(name="h200", scope="session")
def fixture_h200(catalog: Catalog) -> Gpu:
    return catalog.get("H200")


@pytest.fixture(name="load_state")
def fixture_load_state():
    """Return a function that reads one recorded NVML state as a fresh dict (safe to edit)."""

    def load(name: str) -> dict[str, Any]:
        return json.loads((FIXTURES / f"{name}.json").read_text())

    return load


@pytest.fixture(autouse=True, name="no_user_systems_path")
def fixture_no_user_systems_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep a user's MLPERF_MIG_SYSTEMS_PATH out of the tests."""
    monkeypatch.delenv("MLPERF_MIG_SYSTEMS_PATH", raising=False)
