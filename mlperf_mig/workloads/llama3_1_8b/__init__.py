"""The llama3.1-8b workloads (datacenter and edge): the table (workloads/__init__.py) reads
`WORKLOADS`."""

from mlperf_mig.workloads.llama3_1_8b.workload import LLAMA, LLAMA_EDGE, Llama31

WORKLOADS = (LLAMA, LLAMA_EDGE)

__all__ = ["LLAMA", "LLAMA_EDGE", "WORKLOADS", "Llama31"]
