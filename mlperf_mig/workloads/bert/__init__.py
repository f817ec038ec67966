"""The BERT workload: the table (workloads/__init__.py) reads `WORKLOAD`."""

from mlperf_mig.workloads.bert.interface import SEQ_LEN
from mlperf_mig.workloads.bert.workload import BERT, Bert

WORKLOAD = BERT

__all__ = ["BERT", "SEQ_LEN", "WORKLOAD", "Bert"]
