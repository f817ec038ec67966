"""Unified mode across nodes: LoadGen on the driver, the instances' models on their nodes.

The coordinator (LoadGen, QSL and dispatching SUT) runs on the driver exactly as in a local
unified run and speaks the local serving protocol over one pipe per instance. At the other end
of each pipe a proxy thread on the driver stands in for the local serving worker: it forwards
batches to the instance's actor on its node and sends the replies back. Each sample's data goes
to a node once (through Ray's object store, with the first batch that needs it) and is kept
there, so a query carries sample indices only. An actor or node that dies closes its pipe, and
the coordinator re-sends its in-flight batches to the others, as locally.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import queue
import threading
import time
from collections.abc import Mapping
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

_POLL_S = 0.2


class ServeActor:
    """One instance's model on its node (a Ray actor): calibrate, then serve batches."""

    def __init__(self, name: str, env: Mapping[str, str], cpus: tuple[int, ...] | None, capacity: int) -> None:
        os.environ.update(env)
        if cpus is not None:
            os.sched_setaffinity(0, cpus)
        self.name = name
        self._capacity = max(1, capacity)
        self._cache: collections.OrderedDict[int, dict[str, np.ndarray]] = collections.OrderedDict()
        self._backend: Any = None
        self._benchmark: Any = None
        self.served = 0
        self.busy_s = 0.0

    def open(self, task: Any, engine_request: Any) -> dict[str, Any]:
        """Build or reuse the engine here, open it, and time this instance's target."""
        import attrs

        from mlperf_mig.benchmark import get_benchmark
        from mlperf_mig.cluster.actors import build_on_node
        from mlperf_mig.harness.instance import batch_size_of, measured_target, open_task_backend
        from mlperf_mig.harness.samples import input_layouts

        spec = build_on_node(engine_request)
        task = attrs.evolve(task, engine=spec)
        self._benchmark = get_benchmark(task.benchmark)
        self._backend = open_task_backend(task, self._benchmark)
        batch_size = batch_size_of(task)
        layouts = input_layouts(self._benchmark)

        def zeros(rows: Any) -> dict[str, np.ndarray]:  # the model's speed does not depend on values
            return {lay.name: np.zeros((len(rows), *lay.shape), dtype=lay.dtype) for lay in layouts}

        target = measured_target(
            task, self._benchmark, self._backend, source=None, batch_size=batch_size,
            serve_path=(zeros, batch_size),
        )
        return {"target": target, "batch_size": batch_size, "engine": None if spec is None else spec.to_dict()}

    def serve(self, batch_ids: list[int], indices: list[int], new: dict[int, dict[str, np.ndarray]]) -> tuple[list[int], bytes, int]:
        """Run one merged batch of samples (by dataset index); `new` holds data seen first now."""
        from mlperf_mig.harness.sut import response_payload

        # the same least-recently-used order as the proxy's record of what was shipped here
        for index in indices:
            if index in new:
                self._cache[index] = new[index]
            self._cache.move_to_end(index)
        while len(self._cache) > self._capacity:
            self._cache.popitem(last=False)
        names = list(self._cache[indices[0]])
        feeds = {name: np.stack([self._cache[i][name] for i in indices]) for name in names}
        began = time.perf_counter()
        payload = response_payload(self._benchmark, self._backend.run(feeds))
        self.busy_s += time.perf_counter() - began
        self.served += len(indices)
        return batch_ids, payload.tobytes(), payload[0].nbytes

    def close(self) -> dict[str, Any]:
        """Close the model; what a local serving worker reports."""
        device = self._backend.device.to_dict()
        self._backend.close()
        return {"served": self.served, "busy_s": round(self.busy_s, 3), "device": device}


class Proxy(threading.Thread):
    """The driver's stand-in for one instance's serving worker: pipe on one side, actor on the other."""

    def __init__(
        self, name: str, actor: Any, link: Connection, arrays: Mapping[str, np.ndarray],
        opened: Mapping[str, Any] | None, batch_size: int, capacity: int,
    ) -> None:
        super().__init__(name=f"mlperf-mig-proxy-{name}", daemon=True)
        self.instance = name
        self._actor = actor
        self._link = link
        self._arrays = arrays
        self._opened = opened
        self._batch_size = batch_size
        self._capacity = max(1, capacity)
        self._shipped: collections.OrderedDict[int, None] = collections.OrderedDict()
        self._replies: queue.Queue[Any] = queue.Queue()
        self.value: dict[str, Any] | None = None
        self.error: str | None = None

    def run(self) -> None:
        from mlperf_mig.cluster.actors import actor_errors
        from mlperf_mig.runner.unified import _next_batches

        if self._opened is None:  # it never opened its model: the coordinator gives up on it
            self._link.close()
            return
        responder = threading.Thread(target=self._respond, daemon=True)
        try:
            self._link.send(("target", self._opened["target"]))
            responder.start()
            stop = False
            while not stop and self.error is None:
                if not self._link.poll(_POLL_S):
                    continue
                batches, stop = _next_batches(self._link, self._batch_size)
                if batches:
                    self._forward(batches)
            self._replies.put(None)
            responder.join()
            if self.error is None:
                import ray

                self.value = ray.get(self._actor.close.remote(), timeout=60)
        except actor_errors() as exc:
            self.error = f"its actor or node died ({type(exc).__name__})"
        except (EOFError, OSError) as exc:
            self.error = self.error or f"the coordinator went away ({type(exc).__name__})"
        finally:
            self._replies.put(None)
            with contextlib.suppress(OSError):
                self._link.close()

    def _forward(self, batches: list[tuple[Any, ...]]) -> None:
        batch_ids = [b[0] for b in batches]
        rows = [r for b in batches for r in b[2]]
        indices = [i for b in batches for i in b[3]]
        new = {}
        for index, row in zip(indices, rows):
            if index not in self._shipped:
                new[index] = {name: np.array(array[row]) for name, array in self._arrays.items()}
            self._shipped[index] = None
            self._shipped.move_to_end(index)
        while len(self._shipped) > self._capacity:
            self._shipped.popitem(last=False)
        self._replies.put(self._actor.serve.remote(batch_ids, indices, new))

    def _respond(self) -> None:
        """Send the actor's replies back in order; a dead actor closes the pipe (re-dispatch)."""
        import ray

        from mlperf_mig.cluster.actors import actor_errors

        while (ref := self._replies.get()) is not None:
            try:
                batch_ids, blob, item_size = ray.get(ref)
                self._link.send(("done", batch_ids, blob, item_size))
            except actor_errors() as exc:  # the serving loop sees it and closes the pipe
                self.error = f"its actor or node died ({type(exc).__name__})"
                return
            except ray.exceptions.RayTaskError as exc:  # the model raised on the node
                self.error = " ".join(str(exc).split())[:500]
                return
            except OSError:
                return
