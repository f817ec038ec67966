"""The known-answer backend: outputs computed from each sample's own bytes, for proving that
every response reaches the sample it was computed for.

A sample's code is the CRC-32 of its bytes (every input, in the benchmark's input order).
ResNet50 answers ArgMax = 1 + (code mod 1000), so the logged class (ArgMax minus the background
class) is an ImageNet class that a dataset's labels can be made to match or miss. BERT
answers a span inside the sample's own context (the tokens of segment 1 before the last [SEP]):
start = context[code mod n], end = start + (code >> 16) mod 4, clipped to the context. All start
logits are 0 except the start's, which is 1 + (code mod 2**16) / 2**16, and all end logits are 0
except the end's, 1 + (code >> 16) / 2**16: exact in float32, so the payload carries the whole
code. `expected_payload` builds a sample's response payload straight from the sample, without the
harness's code, to check a log against.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from mlperf_mig.benchmark import SEQ_LEN, Benchmark, get_benchmark
from mlperf_mig.engines.backend import HostBackend
from mlperf_mig.errors import ModelFileError

if TYPE_CHECKING:
    from mlperf_mig.engines.spec import EngineSpec

CLASSES = 1000
LOGIT_STEPS = 1 << 16
MAX_SPAN_EXTRA = 4  # the end is 0-3 tokens after the start


def sample_code(sample: Mapping[str, np.ndarray], benchmark: Benchmark) -> int:
    """CRC-32 of one sample's bytes, every input in the benchmark's input order."""
    code = 0
    for name in benchmark.input_names():
        code = zlib.crc32(np.ascontiguousarray(sample[name]), code)
    return code


def _span(sample: Mapping[str, np.ndarray], code: int) -> tuple[int, int]:
    """(start, end) token positions inside the sample's context; (0, 0) without a context."""
    context = np.flatnonzero((sample["segment_ids"] == 1) & (sample["input_mask"] == 1))[:-1]
    if not len(context):
        return 0, 0
    first = int(code % len(context))
    last = min(first + (code >> 16) % MAX_SPAN_EXTRA, len(context) - 1)
    return int(context[first]), int(context[last])


def _logits(code: int) -> tuple[float, float]:
    """The start and end logit values that carry the code (exact in float32)."""
    return 1.0 + (code % LOGIT_STEPS) / LOGIT_STEPS, 1.0 + (code >> 16) / LOGIT_STEPS


def expected_payload(benchmark: Benchmark, sample: Mapping[str, np.ndarray]) -> bytes:
    """The response payload (reference format) this backend's answer to `sample` must give:
    ResNet50 int32 class, BERT float32 [384, 2] start/end logits interleaved."""
    code = sample_code(sample, benchmark)
    if benchmark.name != "bert":
        return np.int32(code % CLASSES).tobytes()
    start, end = _span(sample, code)
    start_value, end_value = _logits(code)
    pair = np.zeros((SEQ_LEN, 2), dtype=np.float32)
    pair[start, 0] = start_value
    pair[end, 1] = end_value
    return pair.tobytes()


class KnownAnswerBackend(HostBackend):
    """Answers each sample with a code of its own bytes (see the module docstring); no model."""

    name = "known_answer"
    framework = "known-answer test backend"
    system_token = "KA"
    listing_order = 40
    provider = "known-answer"

    @classmethod
    def _open(
        cls, spec: EngineSpec, engine_path: None, *, threads: int | None
    ) -> KnownAnswerBackend:
        if spec.model_path is not None:
            # its answers ignore any model, so an accuracy verdict would be a false claim
            raise ModelFileError(
                f"the {cls.name} backend computes no model, so model file {spec.model_path!r} "
                "would be ignored; drop --model, or pick --backend onnxruntime or tensorrt"
            )
        return cls(get_benchmark(spec.benchmark))

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        names = self._benchmark.input_names()
        batch = len(feeds[names[0]])
        samples = [{name: feeds[name][row] for name in names} for row in range(batch)]
        codes = [sample_code(sample, self._benchmark) for sample in samples]
        if self._benchmark.name != "bert":
            argmax_spec, softmax_spec = self._benchmark.outputs
            argmax = np.array([1 + code % CLASSES for code in codes], dtype=np.int64)
            softmax = np.zeros((batch, *softmax_spec.shape[1:]), dtype=softmax_spec.dtype)
            return {argmax_spec.name: argmax, softmax_spec.name: softmax}
        start_name, end_name = self._benchmark.output_names()
        start_logits = np.zeros((batch, SEQ_LEN), dtype=np.float32)
        end_logits = np.zeros((batch, SEQ_LEN), dtype=np.float32)
        for row, (sample, code) in enumerate(zip(samples, codes)):
            start, end = _span(sample, code)
            start_logits[row, start], end_logits[row, end] = _logits(code)
        return {start_name: start_logits, end_name: end_logits}
