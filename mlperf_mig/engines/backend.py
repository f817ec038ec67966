"""The one interface every inference backend implements (ONNX Runtime, TensorRT, null).

The harness only talks to this interface: it hands a batch of named numpy arrays to `run` and
gets named numpy arrays back. `device` reports what the backend actually got (provider, device),
which every result carries, so that a CPU fallback can never pass for a GPU run.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any, ClassVar

import attrs
import numpy as np

from mlperf_mig.benchmark import Benchmark, TensorSpec


@attrs.frozen(kw_only=True)
class DeviceReport:
    """What a loaded backend actually runs on."""

    backend: str  # "onnxruntime", "tensorrt", "null"
    provider: str  # e.g. "CPUExecutionProvider", "CUDAExecutionProvider", "tensorrt", "null"
    device: str  # "cpu", "cuda:0", or the MIG device UUID the process sees
    threads: int | None = None
    version: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


class Backend(abc.ABC):
    """A model loaded for inference in this process. Use as a context manager or call close()."""

    name: ClassVar[str]

    @property
    @abc.abstractmethod
    def benchmark(self) -> Benchmark: ...

    @property
    @abc.abstractmethod
    def device(self) -> DeviceReport: ...

    @property
    def inputs(self) -> tuple[TensorSpec, ...]:
        return self.benchmark.inputs

    @property
    def outputs(self) -> tuple[TensorSpec, ...]:
        return self.benchmark.outputs

    @abc.abstractmethod
    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run one batch; `feeds` maps input names to arrays whose first axis is the batch."""

    def close(self) -> None:  # noqa: B027 - backends without resources need no close
        """Release the session, engine, buffers and streams."""

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
