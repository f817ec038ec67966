"""The sampler: a thread in the runner process that reads every source at a fixed rate.

It never runs in a worker, so it takes nothing from a worker's timed path but CPU time on the
runner's side (benchmarks/telemetry_overhead.py measures what that costs). A source is anything
with `columns()` and `read() -> {column: number or None}`; one that raises is counted and its
row left empty, never allowed to stop the run.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 0.1  # 10 Hz


class Source(Protocol):
    def columns(self) -> list[str]: ...

    def read(self) -> dict[str, float | None]: ...


Row = dict[str, Any]


class Sampler:
    """Reads `sources` every `interval_s` seconds on its own thread between `start` and `stop`.

    Each row holds `t` (wall-clock seconds, `clock`: the LoadGen logs' own clock, so that the
    timed window they record can be cut out of the series) and one value per column.
    """

    def __init__(
        self,
        sources: Sequence[Source],
        interval_s: float = DEFAULT_INTERVAL_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be a positive number of seconds, got {interval_s!r}")
        self._sources = list(sources)
        self.interval_s = interval_s
        self._clock = clock
        self.rows: list[Row] = []
        self.failures = 0
        self.busy_s = 0.0  # CPU time the sampler's thread spent reading
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def columns(self) -> list[str]:
        return [c for source in self._sources for c in source.columns()]

    def sample_once(self) -> Row:
        """Read every source once and keep the row."""
        row: Row = {"t": self._clock()}
        for source in self._sources:
            try:
                row.update(source.read())
            except Exception:  # a broken source must not stop the run; it is counted and said
                self.failures += 1
                log.exception("telemetry source %s failed", type(source).__name__)
        self.rows.append(row)
        return row

    def start(self) -> None:
        """Start sampling on a daemon thread (a first row is read at once)."""
        if self._thread is not None:
            raise RuntimeError("the sampler is running already")
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="mlperf-mig-telemetry", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            began = time.thread_time()
            self.sample_once()
            self.busy_s += time.thread_time() - began
            next_at += self.interval_s
            now = time.monotonic()
            if next_at <= now:  # fell behind (a slow reading, a busy machine): skip the missed
                next_at = now + self.interval_s  # ticks rather than catch up in a burst
            self._stop.wait(next_at - now)

    def stop(self) -> None:
        """Stop the thread after a last row, so that the series covers the moment of the stop."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        self.sample_once()

    def measure(self, seconds: float) -> list[Row]:
        """Sample in this thread for `seconds` (the idle readings before a run); the rows."""
        first = len(self.rows)
        deadline = time.monotonic() + seconds
        while True:
            self.sample_once()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            time.sleep(min(self.interval_s, remaining))
        return self.rows[first:]
