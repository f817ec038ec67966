"""The one round clock: which deadline passes first and the words of a hung or stopped instance."""

from __future__ import annotations

from mlperf_mig.runner.round_clock import RoundClock, interrupted_error
from mlperf_mig.runner.supervisor import Timeouts


class FakeTime:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _clock(time: FakeTime, lead: str | None = None, follow_s: float = 10.0) -> RoundClock:
    return RoundClock(Timeouts(ready_s=30.0, run_s=60.0), lead=lead, follow_s=follow_s, now=time)


def test_before_the_barrier_the_ready_limit_counts() -> None:
    """Until the barrier is released, the round is overdue ready_s after it started, before the barrier."""
    time = FakeTime()
    clock = _clock(time)
    time.now += 29.0
    assert clock.remaining() == 1.0
    time.now += 1.0
    assert clock.remaining() <= 0
    assert clock.overdue() == "no result within 30 s before the start barrier; killed"


def test_the_run_limit_counts_from_the_release() -> None:
    """Once released, the round has run_s from the release, whatever the ready time left."""
    time = FakeTime()
    clock = _clock(time)
    time.now += 20.0
    clock.release()
    clock.release()  # a second release does not move the deadline
    time.now += 59.0
    assert clock.released and clock.remaining() == 1.0
    time.now += 1.0
    assert clock.overdue() == "no result within 60 s; killed"


def test_the_lead_grace_ends_the_round_when_it_comes_first() -> None:
    """After the lead job ended, the others have follow_s, counted from the first notice."""
    time = FakeTime()
    clock = _clock(time, lead="layout", follow_s=10.0)
    clock.release()
    clock.lead_ended()
    time.now += 5.0
    clock.lead_ended()  # noticed again on the next turn: the grace still counts from the first
    assert clock.remaining() == 5.0
    assert clock.overdue() == "no result within 10 s after layout ended; killed"


def test_the_run_limit_wins_over_a_later_lead_grace() -> None:
    """A lead grace that would end after the run's deadline leaves the run's deadline in force."""
    time = FakeTime()
    clock = _clock(time, lead="layout", follow_s=10.0)
    clock.release()
    time.now += 55.0
    clock.lead_ended()
    assert clock.remaining() == 5.0
    assert clock.overdue() == "no result within 60 s; killed"


def test_an_interrupted_instance_says_what_stopped_it() -> None:
    """The interrupted words name the signal where one is known."""
    assert interrupted_error("SIGTERM") == "stopped by SIGTERM before it finished"
    assert interrupted_error() == "stopped before it finished"
