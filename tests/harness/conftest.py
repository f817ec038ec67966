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
