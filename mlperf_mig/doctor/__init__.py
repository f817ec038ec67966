"""`mlperf-mig doctor`: what works on this machine, reconciled with the catalog, as a bundle.

Read-only: the driver, CUDA and NVML versions; each GPU's MIG modes, its live profiles against the
shipped catalog, and the MIG-backed vGPU a VM sees; the backends and the command that fixes a
missing or mismatched install; a smoke test per device (the tiny engine with each GPU backend, a
short LoadGen Offline test, outputs against the CPU reference). `--record DIR` writes the NVML
state (a replay fixture) and the report for a bug report.
"""

from mlperf_mig.doctor.report import DoctorReport, diagnose, write_bundle

__all__ = ["DoctorReport", "diagnose", "write_bundle"]
