"""mlperf-mig: MLPerf Inference (ResNet50, BERT, Llama 3.1 8B) on NVIDIA MIG partitions.

Notebook API: `run(scenario=7)`, `sweep(scenarios=range(1, 9))`, `plan(scenario=7)`; the CLI is
`mlperf-mig`. "scenario" is one of the seed study's eight MIG layouts; the MLPerf LoadGen scenario
(Offline, Server, SingleStream, MultiStream) is always called `loadgen_scenario`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what the lazy exports are, for type checkers (loaded on first use below)
    from mlperf_mig.api import advise, aggregate, capacity, plan, run, sweep
    from mlperf_mig.runner.plan import RunPlan
    from mlperf_mig.runner.results import InstanceRun, LayoutResult, RunResult
    from mlperf_mig.study.repeats import RepeatedRun
    from mlperf_mig.study.sweep import SweepResult

from mlperf_mig._version import __version__ as __version__

# The notebook API loads the runner on first use, so `import mlperf_mig` stays fast and imports
# neither onnxruntime nor LoadGen.
_API = {
    "run": "mlperf_mig.api",
    "plan": "mlperf_mig.api",
    "sweep": "mlperf_mig.api",
    "aggregate": "mlperf_mig.api",
    "RunResult": "mlperf_mig.runner.results",
    "LayoutResult": "mlperf_mig.runner.results",
    "InstanceRun": "mlperf_mig.runner.results",
    "RunPlan": "mlperf_mig.runner.plan",
    "SweepResult": "mlperf_mig.study.sweep",
    "RepeatedRun": "mlperf_mig.study.repeats",
    "advise": "mlperf_mig.api",
    "capacity": "mlperf_mig.api",
}

__all__ = [
    "InstanceRun",
    "LayoutResult",
    "RepeatedRun",
    "RunPlan",
    "RunResult",
    "SweepResult",
    "advise",
    "aggregate",
    "capacity",
    "plan",
    "run",
    "sweep",
]


def __getattr__(name: str) -> object:
    try:
        module = _API[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return [*globals(), *__all__]
