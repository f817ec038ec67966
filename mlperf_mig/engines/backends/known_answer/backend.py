"""The known-answer backend: outputs computed from each sample's own bytes, for proving that
every response reaches the sample it was computed for.

A sample's code is the CRC-32 of its bytes (every input, in the workload's input order); the
workload turns codes into outputs that carry them (`Workload.known_outputs`: ResNet50 answers the
ImageNet class 1 + code mod 1000, BERT a span of the sample's own context whose logits hold the
code). `expected_payload` gives a sample's response payload straight from the sample, without the
harness's code (`Workload.known_payload`), to check a log against.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from mlperf_mig.engines.backend import HostBackend
from mlperf_mig.errors import ModelFileError
from mlperf_mig.workloads import Workload

if TYPE_CHECKING:
    from pathlib import Path

    from mlperf_mig.engines.spec import EngineSpec


def expected_payload(benchmark: Workload, sample: Mapping[str, np.ndarray]) -> bytes:
    """The response payload (reference format) this backend's answer to `sample` must give."""
    return benchmark.known_payload(sample)


class KnownAnswerBackend(HostBackend):
    """Answers each sample with a code of its own bytes (see the module docstring); no model."""

    name = "known_answer"
    framework = "known-answer test backend"
    system_token = "KA"
    listing_order = 40
    provider = "known-answer"

    @classmethod
    def _open(
        cls, spec: EngineSpec, engine_path: Path | None, *, threads: int | None
    ) -> KnownAnswerBackend:
        if spec.model_path is not None:
            # its answers ignore any model, so an accuracy verdict would be a false claim
            raise ModelFileError(
                f"the {cls.name} backend computes no model, so model file {spec.model_path!r} "
                "would be ignored; drop --model, or pick --backend onnxruntime or tensorrt"
            )
        return cls(spec.benchmark)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        names = self._benchmark.input_names()
        batch = len(feeds[names[0]])
        samples = [{name: feeds[name][row] for name in names} for row in range(batch)]
        codes = [self._benchmark.sample_code(sample) for sample in samples]
        return self._benchmark.known_outputs(samples, codes)
