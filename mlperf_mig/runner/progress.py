"""Live per-instance progress on stderr: completed samples, elapsed and expected time, status.

Where it is shown decides how:
    terminal          one tqdm line per instance while the round runs; when it ends the lines
                      are cleared and the round's outcome is printed as plain lines, which stay
                      (the cursor back at column 0, so that what is printed next starts there)
    notebook          with ipywidgets (the `notebook` extra): tqdm's widgets; without it one
                      output area that is updated in place (no tqdm text bars, which a notebook
                      shows as a new stderr output per redraw)
    anything else     (logs, CI) a line per state change and a progress line now and then
"""

from __future__ import annotations

import html
import importlib.util
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

# tqdm ships no type information (pyproject's mypy overrides): its class and bars by name
TqdmClass = Any  # tqdm.std.tqdm or tqdm.notebook.tqdm
TqdmBar = Any  # a bar made by a TqdmClass

_PLAIN_INTERVAL_S = 10.0
_TTY_INTERVAL_S = 0.5
_NOTEBOOK_INTERVAL_S = 1.0
TERMINAL, WIDGETS, NOTEBOOK_LINE, PLAIN = "terminal", "widgets", "notebook line", "plain"


def _in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (IPython's ZMQ shell)."""
    ipython = sys.modules.get("IPython")
    shell = getattr(ipython, "get_ipython", lambda: None)() if ipython is not None else None
    return type(shell).__name__ == "ZMQInteractiveShell"


def display_kind(stream: TextIO) -> str:
    """How progress on `stream` is drawn: TERMINAL, WIDGETS, NOTEBOOK_LINE or PLAIN."""
    if stream in (sys.stderr, sys.stdout) and _in_notebook():
        return WIDGETS if importlib.util.find_spec("ipywidgets") is not None else NOTEBOOK_LINE
    isatty = getattr(stream, "isatty", None)
    return TERMINAL if callable(isatty) and isatty() else PLAIN


def live_stream(stream: TextIO) -> bool:
    """Whether tqdm bars are drawn on `stream` (a terminal, or a notebook with its widgets)."""
    return display_kind(stream) in (TERMINAL, WIDGETS)


def tqdm_class(stream: TextIO) -> TqdmClass:
    """tqdm's widget class in a notebook with ipywidgets, its text class elsewhere (never the
    text bars in a notebook, where each redraw would be an output of its own)."""
    if display_kind(stream) == WIDGETS:
        from tqdm.notebook import tqdm
    else:
        from tqdm.std import tqdm
    return tqdm


class _NotebookLines:
    """One output area of the notebook, replaced at each redraw (IPython's display_id)."""

    def __init__(self) -> None:
        from IPython.display import HTML, display

        self._html = HTML
        self._handle = display(HTML(""), display_id=True)

    def show(self, lines: Sequence[str]) -> None:
        text = html.escape("\n".join(lines))
        self._handle.update(self._html(f"<pre style='margin:0'>{text}</pre>"))


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
        self._kind = display_kind(self._stream)
        self._tty = self._kind in (TERMINAL, WIDGETS)
        self._phase = phase
        self._expected_s = expected_s
        self._names = list(names)
        self._state = dict.fromkeys(self._names, "starting")
        self._completed = dict.fromkeys(self._names, 0)
        self._released: float | None = None
        self._started = time.monotonic()
        self._last_draw = self._started
        self._bars: list[TqdmBar] = []
        self._notebook: _NotebookLines | None = None
        if self._tty:
            tqdm = tqdm_class(self._stream)
            self._bars = [
                tqdm(
                    total=None,
                    file=self._stream,
                    bar_format="{desc}",
                    leave=False,
                    dynamic_ncols=True,
                )
                for _ in self._names
            ]
        elif self._kind == NOTEBOOK_LINE:
            self._notebook = _NotebookLines()

    @property
    def kind(self) -> str:
        return self._kind

    def event(self, name: str, what: str) -> None:
        """A worker changed state: started, ready, ok, raised, crashed, hung, interrupted."""
        self._state[name] = what
        if what == "ready" and all(
            s != "starting" and s != "started" for s in self._state.values()
        ):
            self._released = time.monotonic()
        if self._kind == PLAIN and what != "started":
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
        done = f"[{self._phase}] done in {time.monotonic() - self._started:.1f} s"
        if self._kind == PLAIN:
            self._print(done)
            return
        if self._notebook is not None:
            self._notebook.show([*self._lines(), done])
            return
        for bar in self._bars:
            bar.close()
        # the bars are cleared: what stays is the outcome, from column 0 (a cleared bar leaves
        # the cursor where its text ended)
        self._stream.write("\r")
        for line in [*self._lines(), done]:
            self._print(line)

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
        interval = {PLAIN: _PLAIN_INTERVAL_S, NOTEBOOK_LINE: _NOTEBOOK_INTERVAL_S}.get(
            self._kind, _TTY_INTERVAL_S
        )
        if not force and now - self._last_draw < interval:
            return
        if self._kind == PLAIN and force:
            return
        self._last_draw = now
        lines = self._lines()
        if self._notebook is not None:
            self._notebook.show(lines)
        elif self._tty:
            for bar, line in zip(self._bars, lines):
                bar.set_description_str(line, refresh=True)
        else:
            for line in lines:
                self._print(line)

    def _print(self, line: str) -> None:
        self._stream.write(line + "\n")
        self._stream.flush()
