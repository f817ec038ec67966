"""Unified mode across nodes: LoadGen on the driver, the instances' models on their nodes.

The coordinator (LoadGen, QSL and dispatching SUT) runs on the driver exactly as in a local
unified run and speaks the local serving protocol over one pipe per instance. At the other ends
of the pipes one thread on the driver (RemoteServing) stands in for the local serving workers.

Ray places the instances' actors, starts and stops them and reports a dead one; batches do not
travel as Ray calls (one actor call per batch capped a cluster round at ~35k samples/s, a tenth
of a local one), and no Ray call is made while the test runs. Each actor opens a data channel of
its own when it opens its model: a TCP socket on its node's address (multiprocessing.connection:
length-prefixed pickles, both ends proving a key the driver made for the round, sent through
Ray, so nothing else can talk to it). A connection that fails the handshake (a port scanner, an
HTTP probe, a peer that sends nothing) is dropped and logged and the listener keeps accepting, up
to MAX_REFUSED of them; every step the driver takes on a channel before the test (connect,
handshake, the round-trip measurement) has a deadline and fails in one line naming the node.

A node keeps a copy of the coordinator's shared sample arrays (its mirror): when LoadGen loads
samples, the coordinator asks each remote instance to take rows 0..n-1 and waits for the answer,
before the timed part of the test, so batches carry rows only (a `range` when consecutive), as
to a local worker that reads the shared arrays, and are chunked as for one (unified.py). The
node runs a frame's rows as views of its mirror where they are consecutive, in calls of its
engine's batch size, and answers a frame with one reply. RemoteServing sends everything an
instance's pipe holds as one frame, forwards replies as they come, and the coordinator's LoadGen
thread only ever writes to a local pipe. On the node a reader thread drains the socket into a
queue and a server thread runs the model and answers, so neither side's writes can block on the
other's. A channel that closes (the actor or its node died) closes the instance's pipe, and the
coordinator re-sends its in-flight batches to the others, as locally; a node that goes silent is
dropped by the coordinator's reply timeout.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pickle
import queue
import selectors
import socket
import struct
import threading
import time
from collections.abc import Mapping, Sequence
from multiprocessing import AuthenticationError
from multiprocessing.connection import Connection, answer_challenge, deliver_challenge
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from mlperf_mig.errors import ClusterError

if TYPE_CHECKING:
    from mlperf_mig._io import JsonData
    from mlperf_mig.cluster.ray_api import RayActor, RayApi
    from mlperf_mig.harness.task import InstanceTask
    from mlperf_mig.runner.plan import EngineRequest

log = logging.getLogger(__name__)

_POLL_S = 0.2
_CLOSE_TIMEOUT_S = 60.0
AUTHKEY_BYTES = 32
# the node: a connection must prove the key within this, and after this many connections that
# did not the listener gives up (logged): a scanner cannot keep the driver out for long, nor
# keep the node busy for ever
HANDSHAKE_TIMEOUT_S = 10.0
MAX_REFUSED = 64
# the driver: connecting and proving the key (longer than a node's handshake deadline, so that
# one silent peer ahead of the driver does not fail it), and each answer of the round-trip
# measurement before the test
CONNECT_TIMEOUT_S = 30.0
ROUND_TRIP_TIMEOUT_S = 60.0
# samples go to a node in frames of about this size (a ResNet50 sample is 588 KiB)
SHIP_FRAME_BYTES = 8 << 20


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
        self._backend: Any = None
        self._benchmark: Any = None
        self._batch_size = 1  # the engine's largest batch, once open
        self._library: Any = None  # the mirror of the coordinator's sample arrays (SampleLibrary)
        self._gathered: dict[str, np.ndarray] = {}  # where scattered rows are copied, reused
        self._payloads: np.ndarray | None = None  # a frame's payloads, grown to the largest frame
        self.served = 0
        self.busy_s = 0.0

    def open(
        self, task: InstanceTask, engine_request: EngineRequest | None, authkey: bytes | None = None
    ) -> dict[str, Any]:
        """Build or reuse the engine here, open it, and time this instance's target; with
        `authkey`, also open the data channel and answer its address."""
        from mlperf_mig.cluster.actors import build_on_node
        from mlperf_mig.harness.instance import batch_size_of, measured_target, open_task_backend

        spec = build_on_node(engine_request)
        task = attrs.evolve(task, engine=spec)
        self._benchmark = task.benchmark
        self._backend = open_task_backend(task, self._benchmark)
        batch_size = self._batch_size = batch_size_of(task)
        self._prepare()
        target = measured_target(
            task,
            self._benchmark,
            self._backend,
            source=None,
            batch_size=batch_size,
            # the speed does not depend on values: the mirror's zeros, gathered as in a test
            serve_path=(self._gather, self._capacity),
        )
        reply: dict[str, Any] = {
            "target": target,
            "batch_size": batch_size,
            "engine": None if spec is None else spec.to_dict(),
        }
        if authkey is not None:
            reply["address"] = self.listen(authkey)
        return reply

    def _prepare(self) -> None:
        """The mirror of the sample arrays (zeros until the driver sends samples), the gather
        buffer and the payload buffer, for the open model's benchmark and batch size."""
        from mlperf_mig.harness.samples import SampleLibrary, input_layouts
        from mlperf_mig.harness.sut import payload_layout

        layouts = input_layouts(self._benchmark)
        self._library = SampleLibrary(
            {lay.name: np.zeros((self._capacity, *lay.shape), dtype=lay.dtype) for lay in layouts},
            total_count=0,
        )
        self._gathered = {
            lay.name: np.empty((self._batch_size, *lay.shape), dtype=lay.dtype) for lay in layouts
        }
        shape, dtype = payload_layout(self._benchmark)
        self._payloads = np.empty((self._batch_size, *shape), dtype=dtype)

    def _gather(self, rows: np.ndarray, contiguous: bool | None = None) -> dict[str, np.ndarray]:
        """The feeds of mirror rows: views when consecutive, else copies into the reused buffer."""
        return self._library.gather(rows, self._gathered, contiguous=contiguous)

    def listen(self, authkey: bytes, host: str | None = None) -> tuple[str, int]:
        """Open the data channel on this node's address (`host`: another one) and serve it
        from a thread; returns the address the driver connects to."""
        if host is None:
            import ray

            host = ray.util.get_node_ip_address()
        server = socket.create_server((host, 0), backlog=16)
        threading.Thread(
            target=self._accept, args=(server, authkey), name=f"{self.name}-channel", daemon=True
        ).start()
        address = server.getsockname()
        return address[0], address[1]

    def _accept(self, server: socket.socket, authkey: bytes) -> None:
        """Serve the first connection that proves the key; drop the others (logged), up to
        MAX_REFUSED of them."""
        with server:
            refused = 0
            while True:
                try:
                    sock, peer = server.accept()
                except OSError:  # the listener was closed
                    return
                try:
                    channel = handshake(
                        sock, authkey, server_side=True, timeout_s=HANDSHAKE_TIMEOUT_S
                    )
                    break
                except (AuthenticationError, EOFError, OSError) as exc:
                    refused += 1
                    log.warning(
                        "%s: dropped a data channel connection from %s:%s that did not prove "
                        "the round's key (%d of at most %d): %s",
                        self.name,
                        *peer[:2],
                        refused,
                        MAX_REFUSED,
                        _reason(exc, HANDSHAKE_TIMEOUT_S),
                    )
                    if refused >= MAX_REFUSED:
                        log.error(
                            "%s: %d connections failed the handshake; the data channel stops "
                            "listening (something on the network keeps probing its port)",
                            self.name,
                            refused,
                        )
                        return
        with channel:
            self.serve_channel(channel)

    def serve_channel(self, channel: Connection) -> None:
        """Answer the driver's frames until it closes the channel:
        ("samples", first row, count, input names), then one raw message per input, writes
        rows of the mirror (read by the reader thread, no answer);
        ("sync", n) -> ("synced", n), after every frame before it;
        ("serve", batch ids, rows of each batch) -> ("done", batch ids, payload bytes, item size);
        ("feeds", n) runs n samples of zeros -> ("ran", n);
        a frame that fails -> ("error", why)."""
        inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()

        def read() -> None:  # always drain the socket, so the driver's writes never wait on ours
            try:
                while True:
                    frame = channel.recv()
                    if frame[0] == "samples":  # straight into the mirror, no copy on the way
                        self.take_samples(channel, int(frame[1]), int(frame[2]), frame[3])
                    else:
                        inbox.put(frame)
            except (EOFError, OSError):
                inbox.put(None)
            except Exception as exc:  # samples that do not fit the mirror: the driver is told
                inbox.put(("failed", f"{type(exc).__name__}: {exc}"))
                inbox.put(None)

        threading.Thread(target=read, name=f"{self.name}-reader", daemon=True).start()
        while (frame := inbox.get()) is not None:
            reply: tuple[Any, ...] | None = None
            try:
                if frame[0] == "serve":
                    reply = ("done", *self.serve(frame[1], frame[2]))
                elif frame[0] == "failed":
                    reply = ("error", frame[1])
                elif frame[0] == "sync":
                    reply = ("synced", frame[1])
                elif frame[0] == "feeds":
                    reply = ("ran", self.run_feeds(self._zeros(int(frame[1]))))
                else:
                    reply = ("error", f"unknown frame {frame[0]!r}")
            except Exception as exc:
                reply = ("error", f"{type(exc).__name__}: {exc}")
            if reply is None:
                continue
            try:
                send_reply(channel, reply)
            except OSError:
                return

    def _zeros(self, count: int) -> dict[str, np.ndarray]:
        from mlperf_mig.harness.samples import input_layouts

        return {
            lay.name: np.zeros((count, *lay.shape), dtype=lay.dtype)
            for lay in input_layouts(self._benchmark)
        }

    def take_samples(
        self, channel: Connection, first: int, count: int, names: Sequence[str]
    ) -> None:
        """Read rows first..first+count-1 of each input in `names` from `channel` (one raw
        message each) into the mirror. LoadGen loads samples only when no query is in flight,
        so no frame being served reads these rows."""
        for name in names:
            rows = self._library.buffers[name][first : first + count]
            _read_message_into(channel.fileno(), rows.data.cast("B"))

    def serve(
        self, batch_ids: list[int], rows: Sequence[Sequence[int]]
    ) -> tuple[list[int], bytes, int]:
        """Run one frame: the batches' rows of the mirror (each a `range` when consecutive), in
        calls of at most the engine's batch size, as views where the rows are consecutive."""
        from mlperf_mig.harness.sut import response_payload
        from mlperf_mig.runner.unified import _run_in_batches

        assert self._payloads is not None
        if len(rows) == 1 and isinstance(rows[0], range):
            all_rows = np.arange(rows[0].start, rows[0].stop, dtype=np.int64)
        else:
            all_rows = np.concatenate([np.asarray(r, dtype=np.int64) for r in rows])
        if len(all_rows) > len(self._payloads):
            self._payloads = np.empty(
                (len(all_rows), *self._payloads.shape[1:]), self._payloads.dtype
            )
        began = time.perf_counter()
        payload = _run_in_batches(
            all_rows,
            self._batch_size,
            lambda part, out: response_payload(
                self._benchmark, self._backend.run(self._gather(part)), out
            ),
            self._payloads,
        )
        self.busy_s += time.perf_counter() - began
        self.served += len(all_rows)
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


def send_reply(channel: Connection, reply: tuple[Any, ...]) -> None:
    """A node's answer: its kind, then the answer itself (two messages), so that the driver
    forwards a "done" answer to the coordinator as it came, without unpickling its payload."""
    channel.send_bytes(reply[0].encode())
    channel.send(reply)


def receive_reply(channel: Connection) -> tuple[bytes, bytes]:
    """A node's answer as sent by send_reply: its kind and the pickled answer."""
    kind = channel.recv_bytes(64)
    return kind, channel.recv_bytes()


def _read_exactly(fd: int, view: memoryview) -> None:
    """Fill `view` from `fd` (EOFError when the peer closes first)."""
    got = 0
    while got < len(view):
        n = os.readv(fd, [view[got:]])
        if not n:
            raise EOFError("the data channel closed in the middle of a message")
        got += n


def _read_message_into(fd: int, view: memoryview) -> None:
    """Read one multiprocessing.connection message of exactly len(view) bytes into `view`,
    straight from the socket (Connection.recv_bytes_into reads it whole into memory first)."""
    header = bytearray(4)
    _read_exactly(fd, memoryview(header))
    (size,) = struct.unpack("!i", header)
    if size == -1:
        header = bytearray(8)
        _read_exactly(fd, memoryview(header))
        (size,) = struct.unpack("!Q", header)
    if size != len(view):
        raise ValueError(f"a samples message of {size} bytes for {len(view)} bytes of rows")
    _read_exactly(fd, view)


def _reason(exc: BaseException, timeout_s: float) -> str:
    """Why a connection or handshake failed, in a few words."""
    if isinstance(exc, BlockingIOError | TimeoutError):
        return f"no answer within {timeout_s:.3g} s"
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:200] or 'closed'}"


def _set_deadline(fd: int, seconds: float) -> None:
    """Reads and writes on the socket `fd` fail after `seconds` (0: wait without a limit)."""
    with socket.socket(fileno=os.dup(fd)) as sock:  # options are the socket's, not the fd's
        value = struct.pack("ll", int(seconds), int((seconds % 1) * 1e6))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)


def handshake(
    sock: socket.socket,
    authkey: bytes,
    *,
    server_side: bool,
    timeout_s: float,
) -> Connection:
    """A Connection on `sock` once both ends proved `authkey` within `timeout_s` (each side
    challenges the other, as multiprocessing's Listener and Client do); closed on failure."""
    sock.setblocking(True)
    # small frames go at once: an answer is two messages, and Nagle's algorithm would hold the
    # second until the first is acknowledged (tens of milliseconds with delayed ACKs)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    channel = Connection(sock.detach())
    try:
        _set_deadline(channel.fileno(), timeout_s)
        if server_side:
            deliver_challenge(channel, authkey)
            answer_challenge(channel, authkey)
        else:
            answer_challenge(channel, authkey)
            deliver_challenge(channel, authkey)
        _set_deadline(channel.fileno(), 0)
    except BaseException:
        channel.close()
        raise
    return channel


def connect_channel(
    address: JsonData, authkey: bytes, *, node: str = "", timeout_s: float | None = None
) -> Connection:
    """The driver's end of an actor's data channel (both ends prove `authkey`), within
    `timeout_s` (CONNECT_TIMEOUT_S); ClusterError naming `node` (who the actor is) when it
    cannot be had."""
    if timeout_s is None:
        timeout_s = CONNECT_TIMEOUT_S
    if not isinstance(address, list | tuple) or len(address) != 2:
        raise ClusterError(f"{node or 'an actor'} answered no data channel address ({address!r})")
    host, port = str(address[0]), int(str(address[1]))
    who = f"{node or 'the actor'}'s data channel at {host}:{port}"
    began = time.monotonic()
    try:
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except OSError as exc:
        raise ClusterError(
            f"{who}: could not connect within {timeout_s:g} s ({_reason(exc, timeout_s)}); the node's "
            "address must be reachable from the driver (a firewall may block its ports)"
        ) from None
    left = max(1.0, timeout_s - (time.monotonic() - began))
    try:
        return handshake(sock, authkey, server_side=False, timeout_s=left)
    except AuthenticationError as exc:
        raise ClusterError(
            f"{who}: the handshake failed ({exc}); another process answers on that port"
        ) from None
    except (EOFError, OSError) as exc:
        why = "" if isinstance(exc, BlockingIOError | TimeoutError) else f" ({_reason(exc, left)})"
        raise ClusterError(
            f"{who}: no handshake within {left:.0f} s{why}; the actor may be stuck, or something "
            "else holds its port"
        ) from None


@attrs.define
class _Remote:
    """The driver's record of one instance's serving actor."""

    name: str
    actor: RayActor
    link: Connection | None
    batch_size: int
    capacity: int
    channel: Connection | None = None  # the data channel to the actor
    inflight: int = 0  # frames sent, not answered
    stopping: bool = False
    value: dict[str, Any] | None = None
    error: str | None = None
    done: bool = False


class RemoteServing(threading.Thread):
    """The driver's stand-in for the instances' serving workers: one pipe per instance on one
    side (the local serving protocol), the instances' data channels on the other.

    One thread moves every frame: it sends what an instance's pipe holds as one frame to its
    actor (samples to mirror, batches to serve), sends the replies back on the instance's pipe,
    and closes the pipe of an instance whose channel closed (its actor or node died), so that
    the coordinator re-sends its batches to the others. Ray is called only to close an actor's
    model at the end. Each wake-up costs what is ready, not the number of instances (one
    selector, registered once).
    """

    def __init__(self, arrays: Mapping[str, np.ndarray]) -> None:
        super().__init__(name="mlperf-mig-remote-serving", daemon=True)
        self._arrays = arrays
        self.remotes: list[_Remote] = []
        self._selector = selectors.DefaultSelector()
        self.frames = 0  # frames of batches sent
        self.ship_cpu_s = 0.0  # this thread's CPU sending samples to the nodes' mirrors

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
        self.remotes.append(remote)
        if opened is None or channel is None:
            self._close(remote, None)
            return
        # rows only, no cached target, and a mirror to fill at each load (unified.py)
        link.send(("target", opened["target"], True, None, True))
        self._selector.register(link, selectors.EVENT_READ, (remote, True))
        self._selector.register(channel, selectors.EVENT_READ, (remote, False))

    def run(self) -> None:
        began = time.thread_time(), time.monotonic()
        try:
            self._serve()
        except BaseException:  # the coordinator must not wait for answers that cannot come
            log.exception("remote serving failed; closing every instance's pipe")
            for remote in self.remotes:
                self._close(remote, "the driver's remote serving failed (see the log)")
            raise
        finally:
            self._selector.close()
            # this thread's CPU on the driver (benchmarks/cluster_overhead.py reads it)
            cost = {
                "frames": self.frames,
                "cpu_s": round(time.thread_time() - began[0], 4),
                "ship_cpu_s": round(self.ship_cpu_s, 4),  # of cpu_s: samples to the mirrors
                "wall_s": round(time.monotonic() - began[1], 4),
            }
            log.info("remote serving cost %s", json.dumps(cost))

    def _serve(self) -> None:
        while not all(r.done for r in self.remotes):
            ready = self._selector.select(timeout=_POLL_S) if self._selector.get_map() else ()
            for key, _ in ready:
                remote, is_pipe = key.data
                if remote.done:
                    continue
                if is_pipe:
                    self._receive(remote)
                else:
                    self._reply(remote)
            for remote in self.remotes:
                if remote.stopping and not remote.inflight and not remote.done:
                    self._finish(remote)
            if not ready and not self._selector.get_map():
                time.sleep(_POLL_S / 10)  # only instances waiting for their actor to close

    def _receive(self, remote: _Remote) -> None:
        """Everything the instance's pipe holds, in order: batches go out as one frame."""
        assert remote.link is not None
        ids: list[int] = []
        rows: list[Sequence[int]] = []
        try:
            while True:
                message = remote.link.recv()
                if message[0] == "batch":
                    ids.append(message[1])
                    rows.append(message[3])
                elif message[0] == "samples":
                    if ids:  # batches before a load go before its samples
                        self._send(remote, ("serve", ids, rows))
                        ids, rows = [], []
                    self._ship(remote, int(message[1]), int(message[2]))
                elif message[0] == "stop":
                    self._unregister(remote, remote.link)
                    remote.stopping = True
                    break
                if remote.link is None or not remote.link.poll():
                    break
        except (EOFError, OSError):
            remote.stopping = True
            if remote.link is not None:
                self._unregister(remote, remote.link)
        if ids:
            self._send(remote, ("serve", ids, rows))
            self.frames += 1

    def _ship(self, remote: _Remote, start: int, stop: int) -> None:
        """Rows start..stop-1 of the shared arrays to the node's mirror, then a sync whose
        answer tells the coordinator they are there."""
        began = time.thread_time()
        try:
            self._ship_rows(remote, start, stop)
        finally:
            self.ship_cpu_s += time.thread_time() - began

    def _ship_rows(self, remote: _Remote, start: int, stop: int) -> None:
        row_bytes = sum(a[0].nbytes for a in self._arrays.values()) or 1
        step = max(1, SHIP_FRAME_BYTES // row_bytes)
        names = list(self._arrays)
        for first in range(start, stop, step):
            count = min(stop, first + step) - first
            if not self._send(remote, ("samples", first, count, names), counted=False):
                return
            for name in names:  # raw, as the node reads them into its mirror
                if not self._send_raw(remote, self._arrays[name][first : first + count]):
                    return
        if self._send(remote, ("sync", stop - start)):
            log.info("%s: sent rows %d..%d of the samples to its node", remote.name, start, stop)

    def _send(self, remote: _Remote, frame: tuple[Any, ...], counted: bool = True) -> bool:
        """Send a frame on the channel (`counted`: one answer is due); False when it closed."""
        if remote.channel is None:
            return False
        try:
            remote.channel.send(frame)
        except OSError:
            self._close(remote, "its data channel closed (its actor or node died)")
            return False
        remote.inflight += counted
        return True

    def _send_raw(self, remote: _Remote, data: np.ndarray) -> bool:
        """Send an array's bytes as one message; False when the channel closed."""
        if remote.channel is None:
            return False
        try:
            remote.channel.send_bytes(np.ascontiguousarray(data).data.cast("B"))
        except OSError:
            self._close(remote, "its data channel closed (its actor or node died)")
            return False
        return True

    def _reply(self, remote: _Remote) -> None:
        assert remote.channel is not None
        try:
            kind, body = receive_reply(remote.channel)
        except (EOFError, OSError):
            self._close(remote, "its data channel closed (its actor or node died)")
            return
        if kind != b"done":  # a "done" goes to the coordinator as it came (no copy of payloads)
            frame = pickle.loads(body)
            if frame[0] != "synced":  # the model raised on the node
                self._close(remote, " ".join(str(frame[-1]).split())[:500])
                return
            body = pickle.dumps(("loaded", frame[1]))
        remote.inflight -= 1
        if remote.link is not None:
            try:
                remote.link.send_bytes(body)
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

    def _unregister(self, remote: _Remote, end: Connection) -> None:
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.unregister(end)

    def _close(self, remote: _Remote, error: str | None) -> None:
        """Close the instance's pipe (its batches go to the others) and channel; count it done."""
        remote.error = remote.error or error
        for end in (remote.link, remote.channel):
            if end is not None:
                self._unregister(remote, end)
                with contextlib.suppress(OSError):
                    end.close()
        remote.link = remote.channel = None
        remote.inflight = 0
        remote.done = True


def round_trip_rate(
    channel: Connection,
    batch_size: int,
    *,
    batches: int = 16,
    window: int = 2,
    node: str = "the actor",
    timeout_s: float | None = None,
) -> float:
    """Samples/s of an actor as the driver sees it over its data channel: batches of zeros
    (made on the node) sent `window` at a time. The node's own target ignores the network; the
    layout's target must not. ClusterError naming `node` when the measurement does not end
    within `timeout_s` (a stalled model) or the actor cannot run a batch."""
    if timeout_s is None:
        timeout_s = ROUND_TRIP_TIMEOUT_S
    deadline = time.monotonic() + timeout_s

    def answer() -> None:
        if not channel.poll(max(0.0, deadline - time.monotonic())):
            raise ClusterError(
                f"{node}: its model answered no batch of zeros within {timeout_s:g} s while "
                "the driver measured its round trip; the model may be stalled on its node"
            )
        frame = pickle.loads(receive_reply(channel)[1])
        if frame[0] != "ran":
            raise ClusterError(f"{node}: the actor could not run a batch of zeros: {frame[-1]}")

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
