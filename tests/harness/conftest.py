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
