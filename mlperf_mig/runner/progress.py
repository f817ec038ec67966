"""Live per-instance progress on stderr: completed samples, elapsed and expected time, status.

On a terminal the block of lines is redrawn in place; elsewhere (logs, CI) a line is printed per
state change and a progress line now and then.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import TextIO

_PLAIN_INTERVAL_S = 10.0
_TTY_INTERVAL_S = 0.5


class ProgressDisplay:
    """Shows one line per worker of a round (a phase such as 'performance' or 'accuracy')."""

    def __init__(
        self,
        names: Sequence[str],
        *,
        phase: str,
        expected_s: float | None,
        stream: TextIO | None = None,
    ) -> None:
        self._stream = stream or sys.stderr
        self._tty = self._stream.isatty()
        self._phase = phase
        self._expected_s = expected_s
        self._names = list(names)
        self._state = dict.fromkeys(self._names, "starting")
        self._completed = dict.fromkeys(self._names, 0)
        self._released: float | None = None
        self._started = time.monotonic()
        self._drawn_lines = 0
        self._last_draw = self._started

    def event(self, name: str, what: str) -> None:
        """A worker changed state: started, ready, ok, raised, crashed, hung, interrupted."""
        self._state[name] = what
        if what == "ready" and all(s != "starting" and s != "started" for s in self._state.values()):
            self._released = time.monotonic()
        if not self._tty and what != "started":
            self._print(f"[{self._phase}] {name}: {what}")
        self._draw(force=True)

    def progress(self, name: str, completed: int) -> None:
        self._completed[name] = completed
        if self._released is None:
            self._released = time.monotonic()
        self._state[name] = "running"
        self._draw()

    def tick(self) -> None:
        self._draw()

    def close(self) -> None:
        self._draw(force=True)
        if not self._tty:
            self._print(f"[{self._phase}] done in {time.monotonic() - self._started:.1f} s")

    def _lines(self) -> list[str]:
        now = time.monotonic()
        run_s = 0.0 if self._released is None else now - self._released
        expected = f" / ~{self._expected_s:.0f} s expected" if self._expected_s else ""
        width = max(len(n) for n in self._names)
        return [
            f"[{self._phase}] {name.ljust(width)}  {self._state[name]:<11}  "
            f"{self._completed[name]:>8} samples  {run_s:6.1f} s{expected}"
            for name in self._names
        ]

    def _draw(self, force: bool = False) -> None:
        now = time.monotonic()
        interval = _TTY_INTERVAL_S if self._tty else _PLAIN_INTERVAL_S
        if not force and now - self._last_draw < interval:
            return
        if not self._tty and force:
            return
        self._last_draw = now
        lines = self._lines()
        if self._tty:
            up = f"\x1b[{self._drawn_lines}F" if self._drawn_lines else ""
            self._stream.write(up + "".join(f"\x1b[2K{line}\n" for line in lines))
            self._stream.flush()
            self._drawn_lines = len(lines)
        else:
            for line in lines:
                self._print(line)

    def _print(self, line: str) -> None:
        self._stream.write(line + "\n")
        self._stream.flush()
