"""The GPU test tiers skip what the machine cannot run, each with its reason: NVML answering
without a usable CUDA runs the `nvml` tier and skips the `gpu` (CUDA) tier."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest


@pytest.fixture(name="conftest", scope="module")
def fixture_conftest() -> ModuleType:
    """tests/conftest.py as a module of its own (pytest loads it as a plugin)."""
    spec = importlib.util.spec_from_file_location(
        "conftest_under_test", Path(__file__).with_name("conftest.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_nvml_without_cuda_runs_the_nvml_tier_only(conftest: ModuleType) -> None:
    """NVML finds a GPU but no CUDA context can be made: the gpu tier skips, saying why."""
    skips = conftest.tier_skips(True, "cuda-python is not installed (the gpu extra)")
    assert list(skips) == ["gpu"]
    assert (
        skips["gpu"]
        == "needs CUDA to create a context on a GPU: cuda-python is not installed (the gpu extra)"
    )


def test_no_nvml_skips_both_tiers(conftest: ModuleType) -> None:
    """Without a GPU both tiers skip, the NVML tier saying NVML finds none."""
    skips = conftest.tier_skips(False, "NVML finds no GPU")
    assert set(skips) == {"nvml", "gpu"}
    assert "NVML finds none" in skips["nvml"]


def test_a_usable_gpu_skips_nothing(conftest: ModuleType) -> None:
    """NVML answers and CUDA makes a context: both tiers run."""
    assert conftest.tier_skips(True, None) == {}
