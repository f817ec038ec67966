"""What each slice did during a run: per-instance activity and memory, GPU power and energy.

sampler   a thread in the runner process reading every source at 10 Hz (never in a worker)
nvml      per GPU and per MIG instance readings through nvidia-ml-py (GPM where supported)
host      each worker's CPU use and memory (/proc), the CPU package's RAPL energy
window    the common timed window, from the LoadGen logs' power_begin / power_end
summary   RunTelemetry: per instance, per GPU (by NVML index), the layout's energy
series    telemetry.csv beside results.json (written atomically, read back as untrusted)
recorder  RunRecorder: one run's telemetry, used by the runner's execute()
replay    RecordedTelemetry: recorded telemetry replayed through NVML's own calls (tests)
record    record_telemetry: a short live recording in the replay format (doctor --record)
"""

from mlperf_mig.telemetry.summary import (
    BOARD_ENERGY_LABEL,
    CSV_FILE,
    SHARE_LABEL,
    GpuTelemetry,
    InstanceTelemetry,
    RunTelemetry,
    Window,
)

__all__ = [
    "BOARD_ENERGY_LABEL",
    "CSV_FILE",
    "SHARE_LABEL",
    "GpuTelemetry",
    "InstanceTelemetry",
    "RunTelemetry",
    "Window",
]
