"""The ONNX Runtime backend: CPU provider, or CUDA where onnxruntime-gpu is installed.

The backend table (engines/backends/__init__.py) reads `BACKEND`; onnxruntime is
imported only inside the methods that need it.
"""

from mlperf_mig.engines.backends.onnxruntime.backend import OnnxRuntimeBackend

BACKEND = OnnxRuntimeBackend

__all__ = ["BACKEND", "OnnxRuntimeBackend"]
