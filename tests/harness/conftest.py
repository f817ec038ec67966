"""Harness test helpers: every LoadGen test runs in its own spawned process (traps 1 and 2),
within a bound of seconds: a SUT that drops or never completes a sample makes LoadGen wait
forever, so the child is killed at the bound and the test fails then, not at an outer timeout."""

from __future__ import annotations

import multiprocessing
import traceback
from collections.abc import Callable
from typing import Any

import pytest

CHILD_TIMEOUT_S = (
    60  # one LoadGen test of the quick preset takes a few seconds, even on 2 busy cores
)


class ChildTimeout(AssertionError):
    """A LoadGen test did not end within its bound (its process was killed)."""


def _child_main(conn: Any, function: Callable[..., Any], args: tuple, kwargs: dict) -> None:
    try:
        conn.send((True, function(*args, **kwargs)))
    except BaseException as exc:
        try:
            conn.send((False, (exc, traceback.format_exc())))
        except Exception:  # an exception that does not pickle: its text still goes back
            conn.send((False, (RuntimeError(repr(exc)), traceback.format_exc())))
    finally:
        conn.close()


def call_in_child(
    function: Callable[..., Any], *args: Any, bound_s: float = CHILD_TIMEOUT_S, **kwargs: Any
) -> Any:
    """Call `function` in a fresh spawned process and return (or raise) what it did; past
    `bound_s` seconds the process is killed and ChildTimeout raised."""
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_child_main, args=(send, function, args, kwargs), daemon=True)
    child.start()
    send.close()
    try:
        if not receive.poll(bound_s):
            raise ChildTimeout(f"{function.__name__} did not end within {bound_s:g} s: killed")
        try:
            ok, value = receive.recv()
        except EOFError:
            child.join(5)
            raise AssertionError(
                f"{function.__name__}: the child died (exit code {child.exitcode})"
            ) from None
    finally:
        if child.is_alive():
            child.kill()
        child.join(5)
        receive.close()
    if not ok:
        exc, text = value
        raise exc from RuntimeError(f"in the child process:\n{text}")
    return value


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
