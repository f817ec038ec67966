"""Test-suite wide configuration: `gpu`-marked tests run only where NVML finds a GPU."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path

import pytest


@functools.cache
def gpu_present() -> bool:
    """True when the NVIDIA driver is loaded and reports at least one GPU."""
    try:
        import pynvml
    except ImportError:
        return False
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    try:
        return pynvml.nvmlDeviceGetCount() > 0
    finally:
        pynvml.nvmlShutdown()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if gpu_present():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU; NVML finds none on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(name="session_engine_cache", autouse=True, scope="session")
def fixture_session_engine_cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Generated models and engines go to a folder of this test session, never to ~/.cache."""
    folder = str(tmp_path_factory.mktemp("engine-cache"))
    os.environ["MLPERF_MIG_CACHE"] = folder  # spawned workers inherit it
    return folder


def _live_children() -> set[int]:
    """Live (not zombie) child processes of this test process."""
    me = str(os.getpid())
    found = set()
    for entry in Path("/proc").iterdir():
        if not (entry.name.isascii() and entry.name.isdigit()):
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me and fields[0] != "Z":
            found.add(int(entry.name))
    return found


@pytest.fixture(name="live_children")
def fixture_live_children() -> Callable[[], set[int]]:
    """A function that lists this test process's live children (to assert none was left)."""
    return _live_children
