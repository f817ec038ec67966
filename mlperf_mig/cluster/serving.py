"""Unified mode across nodes: LoadGen on the driver, the instances' models on their nodes.

The coordinator (LoadGen, QSL and dispatching SUT) runs on the driver exactly as in a local
unified run and speaks the local serving protocol over one pipe per instance. At the other ends
of the pipes one thread on the driver (RemoteServing) stands in for the local serving workers.

Ray places the instances' actors, starts and stops them and reports a dead one; batches do not
travel as Ray calls (one actor call per batch capped a cluster round at ~35k samples/s, a tenth
of a local one). Each actor opens a data channel of its own when it opens its model: a TCP
socket on its node's address (multiprocessing.connection: length-prefixed pickles, both ends
proving a key the driver made for the round, sent through Ray, so nothing else can talk to it).
RemoteServing forwards each instance's queued batches as one frame (up to MERGE_BATCHES of the
engine's batches: the coalescing window), reads replies as they come, and the coordinator's
LoadGen thread only ever writes to a local pipe. On the node a reader thread drains the socket
into a queue and a server thread runs the model and answers, so neither side's writes can
block on the other's. Each sample's data goes to a node once (with the first frame that needs
it) and is kept there, so a query carries sample indices only. A channel that closes (the
actor or its node died) closes the instance's pipe, and the coordinator re-sends its in-flight
batches to the others, as locally; a node that goes silent is dropped by the coordinator's
reply timeout.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import queue
import threading
import time
from collections.abc import Mapping, Sized
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Connection, Listener, wait
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

if TYPE_CHECKING:
    import socket
    from multiprocessing.connection import _ConnectionBase

    from mlperf_mig._io import JsonData
    from mlperf_mig.cluster.ray_api import RayActor, RayApi
    from mlperf_mig.harness.task import InstanceTask
    from mlperf_mig.runner.plan import EngineRequest

    # what multiprocessing.connection.wait takes and hands back (the very objects it was given)
    _Waitable = _ConnectionBase[Any, Any] | socket.socket | int

log = logging.getLogger(__name__)

_POLL_S = 0.2
# a frame over the network costs more than a local pipe message: queued batches of one
# instance go out together, up to this many batch sizes a frame
MERGE_BATCHES = 4
_CLOSE_TIMEOUT_S = 60.0
AUTHKEY_BYTES = 32


class ServeActor:
    """One instance's model on its node (a Ray actor): calibrate, then serve batches."""

    def __init__(
        self, name: str, env: Mapping[str, str], cpus: tuple[int, ...] | None, capacity: int
    ) -> None:
        from mlperf_mig.emulation.cpu_budget import enter_budget

        os.environ.update(env)
        if cpus is not None:
            os.sched_setaffinity(0, cpus)
        enter_budget()  # an emulated instance's CPU quota (local:N), before its threads start
        self.name = name
        self._capacity = max(1, capacity)
        self._cache: collections.OrderedDict[int, dict[str, np.ndarray]] = collections.OrderedDict()
        self._backend: Any = None
        self._benchmark: Any = None
        self._batch_size = 1  # the engine's largest batch, once open
        self.served = 0
        self.busy_s = 0.0

    def open(
        self, task: InstanceTask, engine_request: EngineRequest | None, authkey: bytes | None = None
    ) -> dict[str, Any]:
        """Build or reuse the engine here, open it, and time this instance's target; with
        `authkey`, also open the data channel and answer its address."""
        import attrs

        from mlperf_mig.cluster.actors import build_on_node
        from mlperf_mig.harness.instance import batch_size_of, measured_target, open_task_backend
        from mlperf_mig.harness.samples import input_layouts

        spec = build_on_node(engine_request)
        task = attrs.evolve(task, engine=spec)
        self._benchmark = task.benchmark
        self._backend = open_task_backend(task, self._benchmark)
        batch_size = self._batch_size = batch_size_of(task)
        layouts = input_layouts(self._benchmark)

        def zeros(rows: Sized) -> dict[str, np.ndarray]:  # the speed does not depend on values
            return {lay.name: np.zeros((len(rows), *lay.shape), dtype=lay.dtype) for lay in layouts}

        target = measured_target(
            task,
            self._benchmark,
            self._backend,
            source=None,
            batch_size=batch_size,
            serve_path=(zeros, batch_size),
        )
        reply: dict[str, Any] = {
            "target": target,
            "batch_size": batch_size,
            "engine": None if spec is None else spec.to_dict(),
        }
        if authkey is not None:
            reply["address"] = self.listen(authkey)
        return reply

    def listen(self, authkey: bytes, host: str | None = None) -> tuple[str, int]:
        """Open the data channel on this node's address (`host`: another one) and serve it
        from a thread; returns the address the driver connects to."""
        if host is None:
            import ray

            host = ray.util.get_node_ip_address()
        listener = Listener((host, 0), family="AF_INET", authkey=authkey)
        threading.Thread(
            target=self._accept, args=(listener,), name=f"{self.name}-channel", daemon=True
        ).start()
        return listener.address

    def _accept(self, listener: Listener) -> None:
        """Serve the first connection that proves the key (others are refused and logged)."""
        with listener:
            while True:
                try:
                    channel = listener.accept()
                    break
                except (AuthenticationError, EOFError, ConnectionError) as exc:
                    log.warning("%s: refused a data channel connection: %s", self.name, exc)
                except OSError:
                    return
        with channel:
            self.serve_channel(channel)

    def serve_channel(self, channel: Connection) -> None:
        """Answer the driver's frames until it closes the channel: ("serve", batch ids, indices,
        new samples) -> ("done", batch ids, payload bytes, item size); ("feeds", n) runs n
        samples of zeros -> ("ran", n); a model that raises -> ("error", why)."""
        inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()

        def read() -> None:  # always drain the socket, so the driver's writes never wait on ours
            try:
                while True:
                    inbox.put(channel.recv())
            except (EOFError, OSError):
                inbox.put(None)

        threading.Thread(target=read, name=f"{self.name}-reader", daemon=True).start()
        while (frame := inbox.get()) is not None:
            try:
                if frame[0] == "serve":
                    reply: tuple[Any, ...] = ("done", *self.serve(*frame[1:]))
                elif frame[0] == "feeds":
                    reply = ("ran", self.run_feeds(self._zeros(int(frame[1]))))
                else:
                    reply = ("error", f"unknown frame {frame[0]!r}")
            except Exception as exc:
                reply = ("error", f"{type(exc).__name__}: {exc}")
            try:
                channel.send(reply)
            except OSError:
                return

    def _zeros(self, count: int) -> dict[str, np.ndarray]:
        from mlperf_mig.harness.samples import input_layouts

        return {
            lay.name: np.zeros((count, *lay.shape), dtype=lay.dtype)
            for lay in input_layouts(self._benchmark)
        }

    def serve(
        self, batch_ids: list[int], indices: list[int], new: dict[int, dict[str, np.ndarray]]
    ) -> tuple[list[int], bytes, int]:
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
        payload = np.concatenate(
            [
                response_payload(
                    self._benchmark,
                    self._backend.run({n: f[i : i + step] for n, f in feeds.items()}),
                )
                for i in range(0, len(indices), step)
            ]
        )
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
    actor: RayActor
    link: Connection | None
    batch_size: int
    capacity: int
    channel: Connection | None = None  # the data channel to the actor
    shipped: collections.OrderedDict[int, None] = attrs.field(factory=collections.OrderedDict)
    inflight: int = 0  # frames sent, not answered
    stopping: bool = False
    value: dict[str, Any] | None = None
    error: str | None = None
    done: bool = False


def connect_channel(address: JsonData, authkey: bytes) -> Connection:
    """The driver's end of an actor's data channel (both ends prove `authkey`)."""
    return Client(tuple(address), family="AF_INET", authkey=authkey)


class RemoteServing(threading.Thread):
    """The driver's stand-in for the instances' serving workers: one pipe per instance on one
    side (the local serving protocol), the instances' data channels on the other.

    One thread moves every frame: it forwards each instance's queued batches to its actor as one
    frame, sends the replies back on the instance's pipe, and closes the pipe of an instance
    whose channel closed (its actor or node died), so that the coordinator re-sends its batches
    to the others. Ray is called only to close an actor's model at the end.
    """

    def __init__(self, arrays: Mapping[str, np.ndarray]) -> None:
        super().__init__(name="mlperf-mig-remote-serving", daemon=True)
        self._arrays = arrays
        self.remotes: list[_Remote] = []

    def add(
        self,
        name: str,
        actor: RayActor,
        link: Connection,
        opened: Mapping[str, Any] | None,
        capacity: int,
        channel: Connection | None = None,
    ) -> None:
        """An instance, with what its actor's open() answered and its data channel (None: it
        never opened)."""
        remote = _Remote(
            name=name,
            actor=actor,
            link=link,
            batch_size=opened["batch_size"] if opened else 1,
            capacity=max(1, capacity),
            channel=channel,
        )
        if opened is None or channel is None:
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
            ends: dict[_Waitable, tuple[_Remote, bool]] = {}  # connection -> (remote, is its pipe)
            for remote in self.remotes:
                if remote.done:
                    continue
                if remote.link is not None and not remote.stopping:
                    ends[remote.link] = (remote, True)
                if remote.channel is not None:
                    ends[remote.channel] = (remote, False)
            for end in wait(list(ends), timeout=_POLL_S) if ends else ():
                remote, is_pipe = ends[end]
                if remote.done:
                    continue
                if is_pipe:
                    self._receive(remote)
                else:
                    self._reply(remote)
            for remote in self.remotes:
                if remote.stopping and not remote.inflight and not remote.done:
                    self._finish(remote)
            if not ends:
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
        if remote.channel is None:
            return
        try:
            remote.channel.send(("serve", batch_ids, indices, new))
        except OSError:
            self._close(remote, "its data channel closed (its actor or node died)")
            return
        remote.inflight += 1

    def _reply(self, remote: _Remote) -> None:
        assert remote.channel is not None
        try:
            frame = remote.channel.recv()
        except (EOFError, OSError):
            self._close(remote, "its data channel closed (its actor or node died)")
            return
        if frame[0] != "done":  # the model raised on the node
            self._close(remote, " ".join(str(frame[-1]).split())[:500])
            return
        remote.inflight -= 1
        if remote.link is not None:
            try:
                remote.link.send(frame)
            except OSError:
                self._close(remote, "the coordinator went away")

    def _finish(self, remote: _Remote) -> None:
        from ray import exceptions

        from mlperf_mig.cluster.actors import actor_errors

        if remote.error is None:
            ray = _ray()
            try:
                remote.value = ray.get(remote.actor.close.remote(), timeout=_CLOSE_TIMEOUT_S)
            except actor_errors() as exc:
                remote.error = f"its actor or node died ({type(exc).__name__})"
            except exceptions.GetTimeoutError:
                remote.error = f"its model did not close within {_CLOSE_TIMEOUT_S:g} s"
        self._close(remote, remote.error)

    def _close(self, remote: _Remote, error: str | None) -> None:
        """Close the instance's pipe (its batches go to the others) and channel; count it done."""
        remote.error = remote.error or error
        for end in (remote.link, remote.channel):
            if end is not None:
                with contextlib.suppress(OSError):
                    end.close()
        remote.link = remote.channel = None
        remote.inflight = 0
        remote.done = True


def round_trip_rate(
    channel: Connection, batch_size: int, *, batches: int = 16, window: int = 2
) -> float:
    """Samples/s of an actor as the driver sees it over its data channel: batches of zeros
    (made on the node) sent `window` at a time. The node's own target ignores the network; the
    layout's target must not."""

    def answer() -> None:
        frame = channel.recv()
        if frame[0] != "ran":
            raise RuntimeError(f"the actor could not run a batch of zeros: {frame[-1]}")

    channel.send(("feeds", batch_size))
    answer()  # the first batch allocates on the node
    began = time.perf_counter()
    pending = 0
    for _ in range(batches):
        channel.send(("feeds", batch_size))
        pending += 1
        if pending >= window:
            answer()
            pending -= 1
    for _ in range(pending):
        answer()
    return batches * batch_size / (time.perf_counter() - began)


def _ray() -> RayApi:
    import ray

    return ray
