"""The known-answer backend: each output is a function of its own input sample, so that every
response in a LoadGen log can be checked against the sample it answers.

The backend table (engines/backends/__init__.py) reads `BACKEND`. It needs no library beyond numpy.
"""

from mlperf_mig.engines.backends.known_answer.backend import KnownAnswerBackend, expected_payload

BACKEND = KnownAnswerBackend

__all__ = ["BACKEND", "KnownAnswerBackend", "expected_payload"]
