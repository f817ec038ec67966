"""One overall progress bar over the runs of a study (layouts x repeats x alone runs x rounds).

The bar is tqdm's (a text bar in a terminal, a widget in a Jupyter notebook with ipywidgets), with
elapsed time and ETA; each run's per-instance lines are the runner's own (progress.py), printed
under it. Nothing is shown with `progress=False`, and no bar when the stream is not a terminal
outside a notebook (logs and CI get the per-run lines only).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TextIO

from mlperf_mig.runner.plan import RunPlan
from mlperf_mig.runner.progress import TqdmBar, live_stream, tqdm_class
from mlperf_mig.runner.results import RunResult


def rounds_of(plan: RunPlan) -> int:
    """LoadGen rounds of one run: performance, and accuracy when asked for."""
    return 2 if plan.accuracy else 1


class OverallProgress:
    """The bar of `total` LoadGen rounds; `run(label, plan, execute)` runs one plan under it."""

    def __init__(self, total: int, *, progress: bool | TextIO, description: str) -> None:
        stream = sys.stderr if progress is True else progress or None
        if stream is None:
            self._bar: TqdmBar | None = None
            return
        tqdm = tqdm_class(stream)
        self._bar = tqdm(
            total=total,
            desc=description,
            unit="round",
            file=stream,
            disable=not live_stream(stream),
            dynamic_ncols=True,
            leave=True,
        )

    @property
    def shown(self) -> bool:
        return self._bar is not None and not self._bar.disable

    def run(self, label: str, plan: RunPlan, execute: Callable[[RunPlan], RunResult]) -> RunResult:
        if self._bar is not None:
            self._bar.set_postfix_str(label, refresh=True)
        result = execute(plan)
        self.skip(plan)
        return result

    def skip(self, plan: RunPlan) -> None:
        """Count a run that was resumed from disk (or has just finished)."""
        if self._bar is not None:
            self._bar.update(rounds_of(plan))

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
