"""The completion count every SUT keeps, and its progress report at most once an interval."""

from __future__ import annotations

from mlperf_mig.harness.progress import PROGRESS_INTERVAL_S, CompletionCounter


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_count_is_reported_at_most_once_an_interval() -> None:
    """Completions within one interval are counted but reported once, with the total so far."""
    clock, reports = Clock(), []
    counter = CompletionCounter(reports.append, clock=clock)
    counter.add(3)
    clock.now += PROGRESS_INTERVAL_S
    counter.add(2)
    clock.now += PROGRESS_INTERVAL_S / 2
    counter.add(4)
    clock.now += PROGRESS_INTERVAL_S / 2
    counter.add(1)
    assert counter.completed == 10
    assert reports == [5, 10]


def test_without_a_callback_completions_are_still_counted() -> None:
    """A counter without a progress callback counts every completion."""
    counter = CompletionCounter(None)
    counter.add(7)
    counter.add(1)
    assert counter.completed == 8
