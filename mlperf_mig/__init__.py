"""mlperf-mig: MLPerf Inference ResNet50 and BERT on NVIDIA MIG partitions.

Notebook API: `run(scenario=7)`, `sweep(scenarios=range(1, 9))`, `plan(scenario=7)`; the CLI is
`mlperf-mig`. "scenario" is one of the seed study's eight MIG layouts; the MLPerf LoadGen scenario
(Offline, Server, SingleStream, MultiStream) is always called `loadgen_scenario`.
"""

from __future__ import annotations

__version__ = "0.1.0"
