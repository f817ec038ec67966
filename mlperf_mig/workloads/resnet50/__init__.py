"""The ResNet50 workload: the table (workloads/__init__.py) reads `WORKLOAD`."""

from mlperf_mig.workloads.resnet50.workload import RESNET50, ResNet50

WORKLOAD = RESNET50

__all__ = ["RESNET50", "WORKLOAD", "ResNet50"]
