"""Worker entries for the compliance tests, imported by path in the workers.

`paced_or_caching` runs the harness's run_instance with the null backend slowed to 2 ms per
sample it computes; instance i0 also keeps an answer cache in front of it, as a SUT that
caches results would, so that its TEST04 run (one sample over and over) is far faster than its
performance run.
"""

from __future__ import annotations

import os
import time
from typing import Any

from mlperf_mig.harness import instance

SECONDS_PER_SAMPLE = 0.002


class PacedBackend:
    """The null backend at 2 ms per computed sample; with `cache`, a sample among the last few
    answered is answered again without computing it."""

    def __init__(self, backend: Any, *, cache: bool) -> None:
        self._backend = backend
        self._cache = cache
        self._recent: list[bytes] = []
        self.benchmark = backend.benchmark
        self.device = backend.device

    def run(self, feeds: Any) -> Any:
        computed = 0
        for row in next(iter(feeds.values())):
            key = row.tobytes()[:4096]
            if self._cache and key in self._recent:
                continue
            computed += 1
            self._recent = [*self._recent, key][-8:]
        time.sleep(SECONDS_PER_SAMPLE * computed)
        return self._backend.run(feeds)

    def __enter__(self) -> PacedBackend:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._backend.close()


def paced_or_caching(task: Any, *, before_start: Any, progress: Any) -> Any:
    """run_instance with a paced null backend; instance i0's also caches its answers."""
    opened = instance.open_task_backend
    cache = os.environ["MLPERF_MIG_INSTANCE"].startswith("i0-")
    instance.open_task_backend = lambda t, b: PacedBackend(opened(t, b), cache=cache)
    return instance.run_instance(task, before_start=before_start, progress=progress)
