"""Test-suite wide configuration: the GPU test tiers (`nvml`: NVML answers with a GPU; `gpu`:
CUDA creates a context on one), each skipped with its reason where it cannot run."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


@functools.cache
def nvml_finds_a_gpu() -> bool:
    """True when the NVIDIA driver's NVML answers and reports at least one GPU."""
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


_CUDA_PROBE = (
    "from cuda.bindings import runtime as rt\n"
    "(err,) = rt.cudaFree(0)\n"
    "raise SystemExit(0 if int(err) == 0 else 3)\n"
)


@functools.cache
def cuda_context_failure() -> str | None:
    """Why CUDA cannot create a context on device 0 here (None: it can). Asked once a session,
    in a child process, so that no context lives in the test process (workers fork from it)."""
    if not nvml_finds_a_gpu():
        return "NVML finds no GPU"
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CUDA_PROBE], capture_output=True, text=True, timeout=120
        )
    except subprocess.TimeoutExpired:
        return "creating a CUDA context took over 120 s"
    if done.returncode == 0:
        return None
    if "ModuleNotFoundError" in done.stderr:
        return "cuda-python is not installed (the gpu extra)"
    return f"cudaFree(0) failed (exit {done.returncode})"


def tier_skips(nvml_gpu: bool, cuda_failure: str | None) -> dict[str, str]:
    """Marker -> why its tests skip here: `nvml` tests need NVML to answer with a GPU, `gpu`
    tests need CUDA to create a context on one (NVML alone is not enough: a container with NVML
    only, a driver without a usable device)."""
    skips = {}
    if not nvml_gpu:
        skips["nvml"] = "needs NVML answering with a GPU; NVML finds none on this machine"
    if cuda_failure is not None:
        skips["gpu"] = f"needs CUDA to create a context on a GPU: {cuda_failure}"
    return skips


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    marked = [item for item in items if "gpu" in item.keywords or "nvml" in item.keywords]
    if not marked:
        return  # no probe (nor its child process) for a run that selects no GPU test
    skips = tier_skips(nvml_finds_a_gpu(), cuda_context_failure())
    for item in marked:
        for marker, reason in skips.items():
            if marker in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))


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


# --- small datasets of the workloads (tests/workloads, tests/harness and the runner's) ---
SQUAD_CONTEXT = "The quick brown fox jumped over the lazy dog in Paris in 1990."
SQUAD_QUESTIONS = (
    ("q1", "Where did the fox jump?", "Paris"),
    ("q2", "When did the fox jump over the dog?", "1990"),
    ("q3", "What did the fox jump over?", "the lazy dog"),
)
VOCAB = (
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "quick", "brown", "fox", "jump", "##ed",
    "over", "lazy", "dog", "in", "paris", "1990", "where", "did", "when", "what", "?", ".",
)  # fmt: skip


@pytest.fixture(name="squad_dir")
def fixture_squad_dir(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A SQuAD-v1.1-like folder: dev-v1.1.json with three questions and a tiny vocab.txt."""
    import json

    folder = tmp_path_factory.mktemp("squad")
    qas = [
        {"id": qid, "question": q, "answers": [{"text": a, "answer_start": SQUAD_CONTEXT.index(a)}]}
        for qid, q, a in SQUAD_QUESTIONS
    ]
    data = {
        "version": "1.1",
        "data": [{"title": "t", "paragraphs": [{"context": SQUAD_CONTEXT, "qas": qas}]}],
    }
    (folder / "dev-v1.1.json").write_text(json.dumps(data))
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    return folder


@pytest.fixture(name="imagenet_dir")
def fixture_imagenet_dir(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """An ImageNet-like folder: six small images of flat colours (JPEG and PPM) and val_map.txt."""
    from PIL import Image

    folder = tmp_path_factory.mktemp("imagenet")
    lines = []
    for index in range(6):
        name = f"ILSVRC2012_val_{index:08d}.{'JPEG' if index % 2 else 'ppm'}"
        colour = (40 * index, 255 - 40 * index, 100)
        Image.new("RGB", (300 + 10 * index, 260), colour).save(folder / name)
        lines.append(f"{name} {index * 100}")
    (folder / "val_map.txt").write_text("\n".join(lines) + "\n")
    return folder
