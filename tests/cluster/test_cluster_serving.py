"""A node's serving actor, without Ray: what it runs on its engine for one merged batch."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from mlperf_mig.benchmark import RESNET50
from mlperf_mig.cluster.serving import ServeActor
from mlperf_mig.engines.backends.null.backend import NullBackend


class RecordingBackend(NullBackend):
    """The null backend, keeping the size of every batch it is asked to run."""

    def __init__(self) -> None:
        super().__init__(RESNET50)
        self.calls: list[int] = []

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.calls.append(len(next(iter(feeds.values()))))
        return super().run(feeds)


def test_a_merged_batch_runs_in_calls_of_at_most_the_engines_batch() -> None:
    """Ten samples merged from several batches run as calls of 4, 4 and 2 on an engine whose
    largest batch is 4, and come back as ten payloads in order."""
    actor = ServeActor("i0", {}, None, capacity=16)
    backend = RecordingBackend()
    actor._backend, actor._benchmark, actor._batch_size = backend, RESNET50, 4
    (layout,) = RESNET50.inputs
    new = {i: {layout.name: np.zeros(layout.shape[1:], dtype=layout.dtype)} for i in range(10)}
    ids, payload, item_bytes = actor.serve(list(range(10)), list(range(10)), new)
    assert backend.calls == [4, 4, 2]
    assert ids == list(range(10)) and len(payload) == 10 * item_bytes
