"""Harness test helpers: every LoadGen test runs in its own spawned process (traps 1 and 2)."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pytest

CHILD_TIMEOUT_S = 120


def call_in_child(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call `function` in a fresh spawned process and return (or raise) what it did."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        return pool.submit(function, *args, **kwargs).result(timeout=CHILD_TIMEOUT_S)


@pytest.fixture(name="in_child")
def fixture_in_child() -> Callable[..., Any]:
    """`in_child(function, *args)` runs one LoadGen test in a spawned process."""
    return call_in_child


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
