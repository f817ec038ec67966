"""The one clock of a round, local or across a cluster: its deadlines and the words of its endings.

A round has two deadlines: until every instance is at the start barrier (`ready_s`), then, once
the barrier is released, until all have ended (`run_s`). A round with a lead job (unified mode's
LoadGen coordinator) has a third: once the lead has ended, the others have `follow_s` to end too.
Whichever passes first decides; every instance still running then is hung and killed, with
`overdue()`'s words. The local supervisor (worker processes) and cluster/rounds.py (Ray actors)
both keep time with it, so a round ends the same way wherever it runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

FOLLOW_GRACE_S = 10.0  # how long the other instances may run on once the lead job has ended


class RoundTimeouts(Protocol):
    """A round's two limits (supervisor.Timeouts)."""

    @property
    def ready_s(self) -> float: ...

    @property
    def run_s(self) -> float: ...


class RoundClock:
    """The deadlines of one round, started when the round starts."""

    def __init__(
        self,
        timeouts: RoundTimeouts,
        *,
        lead: str | None = None,
        follow_s: float = FOLLOW_GRACE_S,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ready_s = timeouts.ready_s
        self._run_s = timeouts.run_s
        self._lead = lead
        self._follow_s = follow_s
        self._now = now
        self._ready_deadline = now() + self._ready_s
        self._run_deadline: float | None = None
        self._follow_deadline: float | None = None

    @property
    def released(self) -> bool:
        """True once the start barrier has been released."""
        return self._run_deadline is not None

    def release(self) -> None:
        """The start barrier was released: the run's deadline counts from now."""
        if self._run_deadline is None:
            self._run_deadline = self._now() + self._run_s

    def lead_ended(self) -> None:
        """The lead job ended: the others must end within `follow_s` of the first call."""
        if self._follow_deadline is None:
            self._follow_deadline = self._now() + self._follow_s

    def _deadline(self) -> float:
        return self._ready_deadline if self._run_deadline is None else self._run_deadline

    def _follow_first(self) -> bool:
        return self._follow_deadline is not None and self._follow_deadline <= self._deadline()

    def remaining(self) -> float:
        """Seconds until the first deadline passes (zero or less: the round is overdue)."""
        deadline = self._follow_deadline if self._follow_first() else self._deadline()
        assert deadline is not None
        return deadline - self._now()

    def overdue(self) -> str:
        """The `hung` error of every instance still running once `remaining()` reached zero."""
        if self._follow_first():
            return f"no result within {self._follow_s:g} s after {self._lead} ended; killed"
        if self._run_deadline is None:
            return f"no result within {self._ready_s:g} s before the start barrier; killed"
        return f"no result within {self._run_s:g} s; killed"


def interrupted_error(why: str | None = None) -> str:
    """The `interrupted` error of an instance stopped before it finished (`why`: the signal)."""
    return f"stopped by {why} before it finished" if why else "stopped before it finished"
