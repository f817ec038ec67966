"""The count of completed samples that every SUT keeps, and its throttled progress report.

A SUT completes up to tens of thousands of samples a second, while its progress callback crosses
a pipe to the parent process: the count goes out at most once every PROGRESS_INTERVAL_S. The
check is one clock read per completion call (a batch in Offline), so it sits on the hot path of
every SUT (BatchRunner for ResNet50 and BERT, TokenCompleter for the LLM) and stays that small.
"""

from __future__ import annotations

import time
from collections.abc import Callable

PROGRESS_INTERVAL_S = 0.5


class CompletionCounter:
    """Completed samples; `progress` (if any) is told the count at most once every
    PROGRESS_INTERVAL_S, the first time one interval after the counter was made."""

    __slots__ = ("_clock", "_next_report", "_progress", "completed")

    def __init__(
        self,
        progress: Callable[[int], None] | None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.completed = 0
        self._progress = progress
        self._clock = clock
        self._next_report = clock() + PROGRESS_INTERVAL_S

    def add(self, count: int) -> None:
        """Count `count` more completed samples; report the total if an interval has passed."""
        self.completed += count
        if self._progress is None:
            return
        now = self._clock()
        if now >= self._next_report:
            self._next_report = now + PROGRESS_INTERVAL_S
            self._progress(self.completed)
