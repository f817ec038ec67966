"""The TensorRT backend: strongly typed engines built inside the MIG instance they run on.

The backend table (engines/backends/__init__.py) reads `BACKEND`; tensorrt and cuda-python are
imported only inside the methods that need them.
"""

from mlperf_mig.engines.backends.tensorrt.backend import TensorRTBackend

BACKEND = TensorRTBackend

__all__ = ["BACKEND", "TensorRTBackend"]
