"""Unified mode across nodes: LoadGen on the driver, the instances' models on their nodes.

The coordinator (LoadGen, QSL and dispatching SUT) runs in its own process on the driver exactly
as in a local unified run, and speaks the local serving protocol (runner/unified.py) to each
remote instance straight over that instance's data channel: no relay between them, so a query
costs the coordinator one write a flush and one read a reply, as a local worker's pipe does.

Ray places the instances' actors, starts and stops them and reports a dead one; batches do not
travel as Ray calls (one actor call per batch capped a cluster round at ~35k samples/s, a tenth
of a local one), and no Ray call is made while the test runs. Each actor opens a data channel of
its own when it opens its model: a TCP socket on its node's address (multiprocessing.connection:
length-prefixed pickles, both ends proving a key the driver made for the round, sent through
Ray, so nothing else can talk to it). A connection that fails the handshake (a port scanner, an
HTTP probe, a peer that sends nothing) is dropped and logged and the listener keeps accepting, up
to MAX_REFUSED of them; every step the driver takes on a channel before the test (connect,
handshake, the round-trip measurement) has a deadline and fails in one line naming the node. The
driver then hands the connected channels to the coordinator's process (as it hands a local
worker's pipe) and keeps no copy, so a coordinator that dies closes them.

A node keeps a copy of the coordinator's shared sample arrays (its mirror): when LoadGen loads
samples, the coordinator sends each remote instance rows 0..n-1 and waits for its answer, before
the timed part of the test, so batches carry rows only (a `range` when consecutive), as to a
local worker that reads the shared arrays, and are chunked as for one. The node runs everything
queued as one frame: its rows as views of its mirror where they are consecutive, in calls of its
engine's batch size, answered with one reply. On the node a reader thread drains the socket into
a queue and a server thread runs the model and answers, so neither side's writes can block on
the other's. A channel that closes (the actor or its node died) or a model that raises (answered
as an error) loses the instance, and the coordinator re-sends its in-flight batches to the
others, as locally; a node that goes silent is dropped by the coordinator's reply timeout.

A generative workload's node speaks the token protocol of a local instance worker instead
(runner/unified_tokens.py): `open` opens its generator and times its target as a local worker
does, and its server thread runs the same loop (`serve_requests`) over the requests the
coordinator adds, prompts read from the node's copy of the prompt arrays, answering first tokens
and finished outputs as they come; the copy is filled at each load as above. A model that raises
answers ("error", why) and a closed channel ends serving, as for batches; the coordinator then
completes the instance's requests empty and names it.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import pickle
import queue
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
from mlperf_mig.runner.unified_tokens import GenerationTally, serve_requests

if TYPE_CHECKING:
    from mlperf_mig._io import JsonData
    from mlperf_mig.harness.task import InstanceTask
    from mlperf_mig.runner.plan import EngineRequest

log = logging.getLogger(__name__)

_NOTHING = object()  # no frame held back (ServeActor._answer)
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
        self._generator: Any = None  # a generative workload's (TokenGenerator), once open
        self._tally = GenerationTally()  # what it served
        self.served = 0
        self.busy_s = 0.0
        self.error: str | None = None  # what the model raised while serving

    def open(
        self, task: InstanceTask, engine_request: EngineRequest | None, authkey: bytes | None = None
    ) -> dict[str, Any]:
        """Build or reuse the engine here, open it, and time this instance's target; with
        `authkey`, also open the data channel and answer its address."""
        from mlperf_mig.cluster.actors import build_on_node
        from mlperf_mig.harness.instance import batch_size_of, measured_target, open_task_backend
        from mlperf_mig.runner.unified_tokens import open_generation

        spec = build_on_node(engine_request)
        task = attrs.evolve(task, engine=spec)
        self._benchmark = task.benchmark
        self._backend = open_task_backend(task, self._benchmark)
        batch_size = self._batch_size = batch_size_of(task)
        self._prepare()
        if self._benchmark.generates_tokens:
            # its generator and target as a local instance worker opens and times them
            self._generator, target = open_generation(task, self._backend)
        else:
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
        buffer and the payload buffer, for the open model's benchmark and batch size (a
        generative workload's requests read their prompts from the mirror: no batch buffers)."""
        from mlperf_mig.harness.samples import SampleLibrary, input_layouts
        from mlperf_mig.harness.sut import payload_layout

        layouts = input_layouts(self._benchmark)
        self._library = SampleLibrary(
            {lay.name: np.zeros((self._capacity, *lay.shape), dtype=lay.dtype) for lay in layouts},
            total_count=0,
        )
        if self._benchmark.generates_tokens:
            return
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
        """Answer the coordinator's frames (the local serving protocol, runner/unified.py) until
        it stops or closes the channel:
        ("samples", first row, count, input names), then one raw message per input, writes
        rows of the mirror (read by the reader thread, no answer);
        ("sync", n) -> ("loaded", n), after every frame before it;
        ("batch", batch id, None, rows, None), with every other batch queued behind it ->
        ("done", batch ids, payload bytes, item size), one reply for all of them;
        ("stop",) ends serving; a frame that fails -> ("error", why), and serving ends.
        A generative workload's node answers the token protocol instead (`_answer_tokens`);
        "samples" and "sync" frames are the same."""
        inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()

        def read() -> None:  # always drain the socket, so the coordinator never waits on ours
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
        try:
            if self._generator is not None:
                self._answer_tokens(channel, inbox)
            else:
                self._answer(channel, inbox)
        finally:  # wakes the reader (a close alone does not end a read blocked on the socket)
            with contextlib.suppress(OSError):
                socket.socket(fileno=os.dup(channel.fileno())).shutdown(socket.SHUT_RDWR)

    def _answer(self, channel: Connection, inbox: queue.SimpleQueue[Any]) -> None:
        """The server thread: answer each frame from the reader in order, every batch queued at
        the time as one frame."""
        held: Any = _NOTHING  # a frame taken from the queue behind a run of batches
        while True:
            frame = inbox.get() if held is _NOTHING else held
            held = _NOTHING
            if frame is None or frame[0] == "stop":
                return
            reply: tuple[Any, ...]
            try:
                if frame[0] == "batch":
                    batches = [frame]
                    while True:  # what else is queued goes with it: one run, one reply
                        try:
                            held = inbox.get_nowait()
                        except queue.Empty:
                            held = _NOTHING
                            break
                        if held is None or held[0] != "batch":
                            break
                        batches.append(held)
                        held = _NOTHING
                    reply = ("done", *self.serve([b[1] for b in batches], [b[3] for b in batches]))
                elif frame[0] == "sync":
                    reply = ("loaded", frame[1])
                elif frame[0] == "failed":
                    reply = ("error", frame[1])
                else:
                    reply = ("error", f"unknown frame {frame[0]!r}")
            except Exception as exc:
                reply = ("error", f"{type(exc).__name__}: {exc}")
            if reply[0] == "error":
                self.error = self.error or str(reply[1])
                log.error("%s: %s", self.name, reply[1])
            try:
                channel.send_bytes(pickle.dumps(reply, pickle.HIGHEST_PROTOCOL))
            except OSError:
                return
            if reply[0] == "error":  # the coordinator drops this instance: nothing more to serve
                return

    def _answer_tokens(self, channel: Connection, inbox: queue.SimpleQueue[Any]) -> None:
        """The server thread of a generative workload: the loop of a local instance worker
        (unified_tokens.serve_requests) over the frames from the reader, each request's prompt
        read from the mirror; what the model raises is answered ("error", why) and ends it."""
        from mlperf_mig.harness.token_sut import PROMPT_IDS, PROMPT_LENGTH

        def receive(timeout_s: float) -> tuple[Any, ...] | None:
            try:
                frame = inbox.get(timeout=timeout_s) if timeout_s > 0 else inbox.get_nowait()
            except queue.Empty:
                return None
            if frame is None:
                raise _ChannelClosed
            if frame[0] == "failed":  # samples that did not fit the mirror
                raise ValueError(frame[1])
            result: tuple[Any, ...] = frame
            return result

        def send(message: tuple[Any, ...]) -> None:
            try:
                channel.send_bytes(pickle.dumps(message, pickle.HIGHEST_PROTOCOL))
            except OSError:
                raise _ChannelClosed from None

        buffers = self._library.buffers
        try:
            serve_requests(
                self._generator,
                buffers[PROMPT_IDS],
                buffers[PROMPT_LENGTH],
                receive=receive,
                send=send,
                tally=self._tally,
            )
        except _ChannelClosed:  # the coordinator is gone (or went first): nobody to answer
            return
        except Exception as exc:
            self.error = self.error or f"{type(exc).__name__}: {exc}"
            log.error("%s: %s", self.name, self.error)
            with contextlib.suppress(_ChannelClosed):
                send(("error", self.error))

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

    def close(self) -> dict[str, Any]:
        """Close the model; what a local serving worker reports, and the error its model raised
        while serving (None: none)."""
        device = self._backend.device.to_dict()
        served, busy_s = self.served, self.busy_s
        if self._generator is not None:
            served, busy_s = self._tally.served, self._tally.busy_s
            self._generator.close()
        self._backend.close()
        return {
            "served": served,
            "busy_s": round(busy_s, 3),
            "device": device,
            "error": self.error,
        }


class _ChannelClosed(Exception):
    """The data channel closed under a generative node's serving loop (no one to answer)."""


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


def round_trip_rate(
    channel: Connection,
    rows: int,
    *,
    frames: int = 16,
    window: int = 2,
    node: str = "the actor",
    timeout_s: float | None = None,
) -> float:
    """Samples/s of an actor as the driver sees it over its data channel: frames of `rows`
    consecutive rows of its copy of the samples (zeros before the first load), sent `window`
    at a time and answered with their payloads, as the test sends them. The node's own target
    ignores the network; the layout's target must not. ClusterError naming `node` when the
    measurement does not end within `timeout_s` (a stalled model) or the model raises."""
    if timeout_s is None:
        timeout_s = ROUND_TRIP_TIMEOUT_S
    deadline = time.monotonic() + timeout_s
    sent = itertools.count()

    def send() -> None:
        frame = ("batch", next(sent), None, range(rows), None)
        channel.send_bytes(pickle.dumps(frame, pickle.HIGHEST_PROTOCOL))

    def answer() -> int:
        """The number of frames the node's next reply answers (it may join queued ones)."""
        if not channel.poll(max(0.0, deadline - time.monotonic())):
            raise ClusterError(
                f"{node}: its model answered no frame within {timeout_s:g} s while the driver "
                "measured its round trip; the model may be stalled on its node"
            )
        reply = channel.recv()
        if reply[0] != "done":
            raise ClusterError(f"{node}: the actor could not run a frame of rows: {reply[-1]}")
        return len(reply[1])

    send()
    answer()  # the first frame allocates on the node
    began = time.perf_counter()
    pending = 0
    for _ in range(frames):
        send()
        pending += 1
        while pending >= window:
            pending -= answer()
    while pending > 0:
        pending -= answer()
    return frames * rows / (time.perf_counter() - began)
