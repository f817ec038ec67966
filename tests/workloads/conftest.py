"""Fixtures of the workload tests: a private model cache folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlperf_mig.engines.cache import CACHE_ENV


@pytest.fixture(name="cache_dir")
def fixture_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh cache folder; MLPERF_MIG_CACHE points there too, so nothing lands in ~/.cache."""
    folder = tmp_path / "cache"
    monkeypatch.setenv(CACHE_ENV, str(folder))
    return folder
