"""Unified mode across nodes: LoadGen on the driver, the instances' models on their nodes.

The coordinator (LoadGen, QSL and dispatching SUT) runs on the driver exactly as in a local
unified run and speaks the local serving protocol over one pipe per instance. At the other ends
of the pipes one thread on the driver (RemoteServing) stands in for the local serving workers:
it forwards each instance's batches to its actor on its node and sends the replies back. Each sample's data goes
to a node once (through Ray's object store, with the first batch that needs it) and is kept
there, so a query carries sample indices only. An actor or node that dies closes its pipe, and
the coordinator re-sends its in-flight batches to the others, as locally.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import threading
import time
from collections.abc import Mapping
from multiprocessing.connection import Connection, wait
from typing import Any

import attrs
import numpy as np

log = logging.getLogger(__name__)

_POLL_S = 0.2
# a call over the network costs far more than a local pipe message: queued batches of one
# instance go out together, up to this many batch sizes a call
MERGE_BATCHES = 4
_REPLY_WAIT_S = 0.005
_CLOSE_TIMEOUT_S = 60.0


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
        self._batch_size = 1  # the engine's largest batch, once open
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
        batch_size = self._batch_size = batch_size_of(task)
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

        # the same least-recently-used order as the driver's record of what was shipped here
        for index in indices:
            if index in new:
                self._cache[index] = new[index]
            self._cache.move_to_end(index)
        while len(self._cache) > self._capacity:
            self._cache.popitem(last=False)
        names = list(self._cache[indices[0]])
        feeds = {name: np.stack([self._cache[i][name] for i in indices]) for name in names}
        began = time.perf_counter()
        # a merged batch can hold several of the engine's batches: run it in calls of at most one
        step = self._batch_size
        payload = np.concatenate([
            response_payload(self._benchmark, self._backend.run({n: f[i : i + step] for n, f in feeds.items()}))
            for i in range(0, len(indices), step)
        ])
        self.busy_s += time.perf_counter() - began
        self.served += len(indices)
        return batch_ids, payload.tobytes(), payload[0].nbytes

    def run_feeds(self, feeds: dict[str, np.ndarray]) -> int:
        """Run the model on `feeds` and count the samples (timing the path over the network)."""
        self._backend.run(feeds)
        return len(next(iter(feeds.values())))

    def close(self) -> dict[str, Any]:
        """Close the model; what a local serving worker reports."""
        device = self._backend.device.to_dict()
        self._backend.close()
        return {"served": self.served, "busy_s": round(self.busy_s, 3), "device": device}


@attrs.define
class _Remote:
    """The driver's record of one instance's serving actor."""

    name: str
    actor: Any
    link: Connection | None
    batch_size: int
    capacity: int
    shipped: collections.OrderedDict[int, None] = attrs.field(factory=collections.OrderedDict)
    inflight: dict[Any, None] = attrs.field(factory=dict)  # refs of batches sent, not answered
    stopping: bool = False
    value: dict[str, Any] | None = None
    error: str | None = None
    done: bool = False


class RemoteServing(threading.Thread):
    """The driver's stand-in for the instances' serving workers: one pipe per instance on one
    side (the local serving protocol), the instances' actors on the other.

    One thread makes every Ray call (submitting from several threads while others wait in
    ray.get can deadlock Ray's core worker): it forwards each instance's batches to its actor,
    sends the replies back on the instance's pipe, and closes the pipe of an instance whose actor
    or node died, so that the coordinator re-sends its batches to the others.
    """

    def __init__(self, arrays: Mapping[str, np.ndarray]) -> None:
        super().__init__(name="mlperf-mig-remote-serving", daemon=True)
        self._arrays = arrays
        self.remotes: list[_Remote] = []

    def add(self, name: str, actor: Any, link: Connection, opened: Mapping[str, Any] | None, capacity: int) -> None:
        """An instance, with what its actor's open() answered (None: it never opened)."""
        remote = _Remote(name=name, actor=actor, link=link, batch_size=opened["batch_size"] if opened else 1,
                         capacity=max(1, capacity))
        if opened is None:
            self._close(remote, None)
        else:
            link.send(("target", opened["target"]))
        self.remotes.append(remote)

    def run(self) -> None:
        try:
            self._serve()
        except BaseException:  # the coordinator must not wait for answers that cannot come
            log.exception("remote serving failed; closing every instance's pipe")
            for remote in self.remotes:
                self._close(remote, "the driver's remote serving failed (see the log)")
            raise

    def _serve(self) -> None:
        while not all(r.done for r in self.remotes):
            owner = {ref: r for r in self.remotes for ref in r.inflight}
            by_link = {id(r.link): r for r in self.remotes if r.link is not None and not r.stopping}
            links = [r.link for r in by_link.values()]
            for link in wait(links, timeout=0 if owner else _POLL_S) if links else ():
                self._receive(by_link[id(link)])
            if owner:
                ray = _ray()
                # block until one reply is there (or a few ms, to read the pipes again), then
                # take every reply that has come
                ready, _ = ray.wait(list(owner), num_returns=1, timeout=_REPLY_WAIT_S)
                if ready:
                    ready, _ = ray.wait(list(owner), num_returns=len(owner), timeout=0)
                for ref in ready:
                    if ref in owner[ref].inflight:  # not given up on meanwhile
                        self._reply(owner[ref], ref)
            for remote in self.remotes:
                if remote.stopping and not remote.inflight and not remote.done:
                    self._finish(remote)
            if not owner and not links:
                time.sleep(_POLL_S / 10)

    def _receive(self, remote: _Remote) -> None:
        from mlperf_mig.runner.unified import _next_batches

        assert remote.link is not None
        try:
            batches, stop = _next_batches(remote.link, remote.batch_size * MERGE_BATCHES)
        except (EOFError, OSError):
            batches, stop = [], True
        if batches:
            self._forward(remote, batches)
        remote.stopping = remote.stopping or stop

    def _forward(self, remote: _Remote, batches: list[tuple[Any, ...]]) -> None:
        batch_ids = [b[0] for b in batches]
        rows = [r for b in batches for r in b[2]]
        indices = [i for b in batches for i in b[3]]
        new = {}
        for index, row in zip(indices, rows):
            if index not in remote.shipped:
                new[index] = {name: np.array(array[row]) for name, array in self._arrays.items()}
            remote.shipped[index] = None
            remote.shipped.move_to_end(index)
        while len(remote.shipped) > remote.capacity:
            remote.shipped.popitem(last=False)
        remote.inflight[remote.actor.serve.remote(batch_ids, indices, new)] = None

    def _reply(self, remote: _Remote, ref: Any) -> None:
        from mlperf_mig.cluster.actors import actor_errors

        del remote.inflight[ref]
        ray = _ray()
        try:
            batch_ids, blob, item_size = ray.get(ref)
        except actor_errors() as exc:
            self._close(remote, f"its actor or node died ({type(exc).__name__})")
            return
        except ray.exceptions.RayTaskError as exc:  # the model raised on the node
            self._close(remote, " ".join(str(exc).split())[:500])
            return
        if remote.link is not None:
            try:
                remote.link.send(("done", batch_ids, blob, item_size))
            except OSError:
                self._close(remote, "the coordinator went away")

    def _finish(self, remote: _Remote) -> None:
        from mlperf_mig.cluster.actors import actor_errors

        if remote.error is None:
            ray = _ray()
            try:
                remote.value = ray.get(remote.actor.close.remote(), timeout=_CLOSE_TIMEOUT_S)
            except actor_errors() as exc:
                remote.error = f"its actor or node died ({type(exc).__name__})"
            except ray.exceptions.GetTimeoutError:
                remote.error = f"its model did not close within {_CLOSE_TIMEOUT_S:g} s"
        self._close(remote, remote.error)

    def _close(self, remote: _Remote, error: str | None) -> None:
        """Close the instance's pipe (its batches go to the others) and count it done."""
        remote.error = remote.error or error
        if remote.link is not None:
            with contextlib.suppress(OSError):
                remote.link.close()
            remote.link = None
        remote.inflight.clear()
        remote.done = True


def round_trip_rate(actor: Any, batch_size: int, layouts: Any, *, batches: int = 16, window: int = 2) -> float:
    """Samples/s of `actor` as the driver sees it: batches of zeros (shipped once) sent `window`
    at a time. The node's own target ignores the network; the layout's target must not."""
    ray = _ray()
    feeds = ray.put({lay.name: np.zeros((batch_size, *lay.shape), dtype=lay.dtype) for lay in layouts})
    ray.get(actor.run_feeds.remote(feeds))  # the first call fetches the data to the node
    began = time.perf_counter()
    pending: list[Any] = []
    for _ in range(batches):
        pending.append(actor.run_feeds.remote(feeds))
        if len(pending) >= window:
            ray.get(pending.pop(0))
    ray.get(pending)
    return batches * batch_size / (time.perf_counter() - began)


def _ray() -> Any:
    import ray

    return ray
