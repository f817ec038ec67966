"""Live per-instance progress on stderr: completed samples, elapsed and expected time, status.

On a terminal, and in a Jupyter notebook, each instance has a line of its own drawn by tqdm
(`tqdm.auto`; below a study's overall bar, runner/overall.py, when there is one); elsewhere
(logs, CI) a line is printed per state change and a progress line now and then.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

_PLAIN_INTERVAL_S = 10.0
_TTY_INTERVAL_S = 0.5


def live_stream(stream: TextIO) -> bool:
    """Whether progress on `stream` is drawn live (a terminal, or a notebook's widgets)."""
    from tqdm.auto import tqdm

    in_notebook = any(cls.__module__ == "tqdm.notebook" for cls in tqdm.__mro__)
    return in_notebook or stream.isatty()


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
        self._tty = live_stream(self._stream)
        self._phase = phase
        self._expected_s = expected_s
        self._names = list(names)
        self._state = dict.fromkeys(self._names, "starting")
        self._completed = dict.fromkeys(self._names, 0)
        self._released: float | None = None
        self._started = time.monotonic()
        self._last_draw = self._started
        self._bars: list[Any] = []
        if self._tty:
            from tqdm.auto import tqdm

            self._bars = [
                tqdm(total=None, file=self._stream, bar_format="{desc}", leave=False, dynamic_ncols=True)
                for _ in self._names
            ]

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
        for bar in self._bars:
            bar.close()
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
            for bar, line in zip(self._bars, lines):
                bar.set_description_str(line, refresh=True)
        else:
            for line in lines:
                self._print(line)

    def _print(self, line: str) -> None:
        self._stream.write(line + "\n")
        self._stream.flush()
