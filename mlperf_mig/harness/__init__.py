"""The LoadGen harness: settings, sample libraries, SUTs, logs and accuracy.

The worker entry point is `run_instance(InstanceTask(...))`: one LoadGen test per process.
"""

from mlperf_mig.harness.instance import run_instance
from mlperf_mig.harness.logs import parse_detail_log
from mlperf_mig.harness.result import AccuracyReport, InstanceResult
from mlperf_mig.harness.samples import SampleLibrary
from mlperf_mig.harness.settings import LOADGEN_SCENARIOS, PRESETS, SettingsSpec
from mlperf_mig.harness.task import InstanceTask

__all__ = [
    "LOADGEN_SCENARIOS",
    "PRESETS",
    "AccuracyReport",
    "InstanceResult",
    "InstanceTask",
    "SampleLibrary",
    "SettingsSpec",
    "parse_detail_log",
    "run_instance",
]
