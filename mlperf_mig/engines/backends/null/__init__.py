"""The null backend: zero outputs of the right shapes at once, for measuring the harness.

The backend table (engines/backends/__init__.py) reads `BACKEND`. It needs no library beyond numpy.
"""

from mlperf_mig.engines.backends.null.backend import NullBackend

BACKEND = NullBackend

__all__ = ["BACKEND", "NullBackend"]
