"""How study/ measures: the public face's `run`, `plan` and `sweep`, handed down by the face.

The capacity search and `advise` without measurements run layouts through the public functions
(they open a cluster session, take stop signals, read the capacity cache), which stand above
study/. The face (mlperf_mig/api.py) hands them in as a `Measure`, so that study/ imports nothing
above it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from mlperf_mig.runner.plan import RunPlan
    from mlperf_mig.runner.results import LayoutResult
    from mlperf_mig.study.sweep import SweepResult


@attrs.frozen(kw_only=True)
class Measure:
    """The public run, plan and sweep, as study/ calls them."""

    run: Callable[..., LayoutResult]
    plan: Callable[..., RunPlan]
    sweep: Callable[..., SweepResult]
