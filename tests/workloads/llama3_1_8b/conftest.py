"""Fixtures of the decoder tests: the tiny decoder and an ONNX Runtime session running it."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from mlperf_mig.workloads.llama3_1_8b.decoder import build_decoder
from mlperf_mig.workloads.llama3_1_8b.shape import TINY

RunGraph = Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]


def session_runner(model: onnx.ModelProto) -> RunGraph:
    """A backend-like `run`: every output of `model` by name, on one CPU thread."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    names = [output.name for output in session.get_outputs()]

    def run(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(names, session.run(names, dict(feeds))))

    return run


@pytest.fixture(name="tiny_model", scope="session")
def fixture_tiny_model() -> onnx.ModelProto:
    """The tiny decoder with seed 0, built once for the session."""
    return build_decoder(TINY, seed=0)


@pytest.fixture(name="tiny_run", scope="session")
def fixture_tiny_run(tiny_model: onnx.ModelProto) -> RunGraph:
    """The tiny decoder in ONNX Runtime on the CPU."""
    return session_runner(tiny_model)


@pytest.fixture(name="make_run")
def fixture_make_run() -> Callable[[onnx.ModelProto], RunGraph]:
    """Turns a model into a backend-like `run` (for shapes other than the tiny one)."""
    return session_runner
