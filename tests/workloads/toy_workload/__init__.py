"""A toy workload folder for the test that a workload is one folder (tests/workloads/
test_toy_workload.py copies this folder into mlperf_mig/workloads/ while it runs)."""

from mlperf_mig.workloads.toy.workload import TOY

WORKLOAD = TOY
