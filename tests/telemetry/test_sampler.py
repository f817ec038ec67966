"""The sampler thread: rows at its rate, a broken source counted, never fatal."""

from __future__ import annotations

import time

import pytest

from mlperf_mig.telemetry.sampler import Sampler


class Counter:
    def __init__(self) -> None:
        self.calls = 0

    def columns(self) -> list[str]:
        return ["x:n"]

    def read(self) -> dict[str, float | None]:
        self.calls += 1
        return {"x:n": float(self.calls)}


class Broken:
    def columns(self) -> list[str]:
        return ["y:n"]

    def read(self) -> dict[str, float | None]:
        raise OSError("gone")


def test_the_thread_samples_until_stopped_and_takes_a_last_row():
    """Between start and stop there are rows in time order, the last one taken at the stop."""
    source = Counter()
    sampler = Sampler([source], interval_s=0.01)
    sampler.start()
    deadline = time.monotonic() + 5
    while source.calls < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    sampler.stop()
    times = [r["t"] for r in sampler.rows]
    assert len(times) >= 3 and times == sorted(times)
    assert sampler.rows[-1]["x:n"] == source.calls


def test_a_broken_source_is_counted_and_the_others_still_read():
    """A source that raises leaves its cells empty; the others' readings are kept."""
    sampler = Sampler([Broken(), Counter()], interval_s=0.01)
    row = sampler.sample_once()
    assert row["x:n"] == 1.0 and "y:n" not in row and sampler.failures == 1


def test_a_rate_that_is_not_positive_is_refused():
    """interval_s must be positive."""
    with pytest.raises(ValueError, match="interval_s"):
        Sampler([Counter()], interval_s=0)
