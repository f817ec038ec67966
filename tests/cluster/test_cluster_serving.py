"""A node's serving actor and the coordinator's dispatcher over its data channel, without Ray:
what a node runs for one frame, its copy of the samples, and the data channel between them, also
against hostile peers (a port scanner's probe, a peer that sends nothing, a model that stalls)."""

from __future__ import annotations

import logging
import os
import pickle
import queue
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import pytest

from mlperf_mig.cluster import serving
from mlperf_mig.cluster.serving import (
    AUTHKEY_BYTES,
    ServeActor,
    connect_channel,
    round_trip_rate,
)
from mlperf_mig.engines.backends.null.backend import NullBackend
from mlperf_mig.errors import ClusterError
from mlperf_mig.harness.samples import input_layouts
from mlperf_mig.runner.unified import Dispatcher, _Receiver
from mlperf_mig.workloads.resnet50 import RESNET50

KEY = b"k" * AUTHKEY_BYTES


class RecordingBackend(NullBackend):
    """The null backend, keeping the size of every batch it is asked to run."""

    def __init__(self) -> None:
        super().__init__(RESNET50)
        self.calls: list[int] = []

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.calls.append(len(next(iter(feeds.values()))))
        return super().run(feeds)


class FailingBackend(NullBackend):
    """Raises on every batch."""

    def __init__(self) -> None:
        super().__init__(RESNET50)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise RuntimeError("device lost")


class StalledBackend(NullBackend):
    """Never answers until released (a model stalled on its node)."""

    def __init__(self) -> None:
        super().__init__(RESNET50)
        self.release = threading.Event()

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.release.wait()
        return super().run(feeds)


def _answer(channel: Connection) -> tuple[Any, ...]:
    """The node's next answer (one message)."""
    assert channel.poll(10), "the node did not answer"
    answer: tuple[Any, ...] = channel.recv()
    return answer


def _actor(backend: NullBackend | None = None, capacity: int = 64) -> ServeActor:
    actor = ServeActor("i0", {}, None, capacity=capacity)
    actor._backend, actor._benchmark, actor._batch_size = (
        backend or NullBackend(RESNET50),
        RESNET50,
        4,
    )
    actor._prepare()
    return actor


@pytest.fixture(name="threads_left")
def fixture_threads_left() -> Iterator[None]:
    """No channel thread of a test outlives it by more than a moment (no process is started)."""
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        left = [
            t for t in set(threading.enumerate()) - before if t.is_alive() and "-channel" in t.name
        ]
        if not left:
            return
        time.sleep(0.05)
    raise AssertionError(f"threads left: {left}")


def test_a_frame_runs_in_calls_of_at_most_the_engines_batch() -> None:
    """Ten rows of two batches run as calls of 4, 4 and 2 on an engine whose largest batch is
    4, and come back as ten payloads under both batch ids."""
    backend = RecordingBackend()
    actor = _actor(backend, capacity=16)
    ids, payload, item_bytes = actor.serve([7, 8], [range(0, 6), [9, 8, 7, 6]])
    assert backend.calls == [4, 4, 2]
    assert ids == [7, 8] and len(payload) == 10 * item_bytes


def test_consecutive_rows_reach_the_model_as_views_of_the_mirror() -> None:
    """A batch of consecutive rows runs on a view of the node's copy of the samples (no copy
    per sample); scattered rows are gathered into the reused buffer."""
    seen: list[np.ndarray] = []

    class Keeping(NullBackend):
        def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
            seen.append(next(iter(feeds.values())))
            return super().run(feeds)

    actor = _actor(Keeping(RESNET50), capacity=16)
    actor.serve([1], [range(4, 8)])
    actor.serve([2], [[1, 3, 5, 7]])
    (mirror,) = actor._library.buffers.values()
    assert np.shares_memory(seen[0], mirror)
    assert not np.shares_memory(seen[1], mirror)


def test_data_channel_serves_batches_to_the_key_holder() -> None:
    """Batches sent over the actor's data channel come back with every batch id and a payload
    per sample; the round trip measures a rate."""
    with connect_channel(_actor().listen(KEY, host="127.0.0.1"), KEY) as channel:
        channel.send(("batch", 7, None, range(0, 2), None))
        channel.send(("batch", 8, None, [5], None))
        ids: list[int] = []
        payload = b""
        while len(ids) < 2:  # one reply, or two where the node woke between the sends
            kind, more, data, item_bytes = _answer(channel)
            assert kind == "done"
            ids, payload = ids + more, payload + data
        assert (ids, len(payload)) == ([7, 8], 3 * item_bytes)
        assert round_trip_rate(channel, 4, frames=4) > 0


def test_batches_queued_on_the_node_are_run_and_answered_as_one_frame() -> None:
    """The node's server thread takes every batch queued behind the first as one frame (one
    reply), and answers a sync after it in order."""
    actor = _actor(RecordingBackend(), capacity=16)
    inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
    for batch in range(3):
        inbox.put(("batch", batch, None, range(batch, batch + 1), None))
    inbox.put(("sync", 16))
    inbox.put(None)
    sent: list[tuple[Any, ...]] = []

    class Recording:
        def send_bytes(self, data: bytes) -> None:
            sent.append(pickle.loads(data))

    actor._answer(Recording(), inbox)  # type: ignore[arg-type]  # only send_bytes() is used
    assert [m[:2] for m in sent] == [("done", [0, 1, 2]), ("loaded", 16)]


def test_data_channel_refuses_a_wrong_key_and_still_serves_the_driver(
    threads_left: None,
) -> None:
    """A connection without the round's key is refused in one line naming the node; the
    driver's still gets the channel."""
    address = _actor().listen(KEY, host="127.0.0.1")
    with pytest.raises(ClusterError, match=r"instance i0 on node n1.*handshake failed"):
        connect_channel(address, b"x" * AUTHKEY_BYTES, node="instance i0 on node n1")
    with connect_channel(address, KEY) as channel:
        channel.send(("sync", 4))
        assert _answer(channel) == ("loaded", 4)


def test_model_error_is_answered_on_the_channel_and_kept_for_the_outcome() -> None:
    """A model that raises answers ("error", why) instead of leaving the coordinator waiting,
    and its actor's close() says what it raised."""
    actor = _actor(FailingBackend())
    with connect_channel(actor.listen(KEY, host="127.0.0.1"), KEY) as channel:
        channel.send(("batch", 1, None, range(0, 1), None))
        kind, why = _answer(channel)
        assert kind == "error" and "device lost" in why
    assert "device lost" in actor.close()["error"]


def _coordinator(
    channel: Connection, arrays: Mapping[str, np.ndarray]
) -> tuple[Dispatcher, _Receiver, list[list[int]]]:
    """The coordinator's dispatcher and receiver on one node's channel, as unified.py runs
    them: rows only, a copy of the samples to fill."""
    completed: list[list[int]] = []
    dispatcher = Dispatcher(
        [channel],
        (1.0,),
        batch_size=4,
        complete=lambda ids, blob, size: completed.append(list(ids)),
        rows_only=[True],
        mirrors=[True],
        arrays=arrays,
        flush_s=0.001,
    )
    receiver = _Receiver([channel], dispatcher)
    receiver.start()
    return dispatcher, receiver, completed


def _wait_for(condition: Any, what: str) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_the_coordinator_mirrors_samples_then_serves_rows_straight_over_the_channel() -> None:
    """The coordinator's dispatcher copies the loaded rows to the node and waits for its answer,
    then sends queries as rows over the data channel and completes them from the node's
    replies; when the channel closes (the actor died) the instance is lost."""
    (layout,) = input_layouts(RESNET50)
    values = np.arange(8 * int(np.prod(layout.shape)), dtype=np.float32) % 251
    arrays = {layout.name: values.astype(layout.dtype).reshape((8, *layout.shape))}
    actor = _actor(RecordingBackend(), capacity=8)
    channel = connect_channel(actor.listen(KEY, host="127.0.0.1"), KEY)
    dispatcher, receiver, completed = _coordinator(channel, arrays)
    try:
        dispatcher.mirror_samples(8, timeout_s=10)
        assert dispatcher.alive == [True]
        np.testing.assert_array_equal(actor._library.buffers[layout.name], arrays[layout.name])
        for query in range(3):
            dispatcher.submit([100 + query], [query], [query])
        _wait_for(lambda: dispatcher.completed == 3, "the queries were not completed")
        assert sorted(i for ids in completed for i in ids) == [100, 101, 102]
        socket.socket(fileno=os.dup(channel.fileno())).shutdown(socket.SHUT_RDWR)
        _wait_for(lambda: not dispatcher.alive[0], "the closed channel did not lose the node")
    finally:
        receiver.stop()
        channel.close()


def test_a_model_error_on_the_node_loses_the_instance_at_the_coordinator() -> None:
    """A node whose model raises answers an error: the coordinator drops the instance and its
    samples complete without data (no other instance is left)."""
    (layout,) = input_layouts(RESNET50)
    arrays = {layout.name: np.zeros((8, *layout.shape), dtype=layout.dtype)}
    channel = connect_channel(_actor(FailingBackend()).listen(KEY, host="127.0.0.1"), KEY)
    dispatcher, receiver, _ = _coordinator(channel, arrays)
    try:
        dispatcher.submit([7], [0], [0])
        _wait_for(lambda: dispatcher.completed == 1, "the failed sample was not completed")
        assert dispatcher.alive == [False] and dispatcher.failed_samples == 1
    finally:
        receiver.stop()
        channel.close()


# --- issue 33 item 4: the data channel survives what a network sends ----------------------------
def _probe(address: tuple[str, int], data: bytes) -> bytes:
    """What a port scanner or monitoring probe does: connect, send `data`, read what comes."""
    with socket.create_connection(address, timeout=5) as probe:
        if data:
            probe.sendall(data)
        probe.settimeout(5)
        chunks = []
        try:
            while chunk := probe.recv(4096):
                chunks.append(chunk)
        except OSError:
            pass
        return b"".join(chunks)


def test_an_http_probe_is_dropped_and_the_listener_keeps_accepting(
    caplog: pytest.LogCaptureFixture, threads_left: None
) -> None:
    """A `GET /` and a connect-and-close are dropped (each logged with the peer) and the driver
    still gets its channel and is served."""
    address = _actor().listen(KEY, host="127.0.0.1")
    with caplog.at_level(logging.WARNING, logger="mlperf_mig.cluster.serving"):
        _probe(address, b"GET / HTTP/1.1\r\nHost: node\r\n\r\n")
        _probe(address, b"")
        with connect_channel(address, KEY) as channel:
            channel.send(("sync", 4))
            assert _answer(channel) == ("loaded", 4)
    dropped = [r.getMessage() for r in caplog.records if "dropped a data channel" in r.message]
    assert len(dropped) == 2 and all("127.0.0.1" in m for m in dropped)


def test_the_listener_gives_up_after_a_bounded_number_of_failures(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, threads_left: None
) -> None:
    """After MAX_REFUSED failed handshakes the listener closes with one error line, so a
    scanner cannot keep a node's thread busy for ever."""
    monkeypatch.setattr(serving, "MAX_REFUSED", 3)
    address = _actor().listen(KEY, host="127.0.0.1")
    with caplog.at_level(logging.WARNING, logger="mlperf_mig.cluster.serving"):
        for _ in range(3):
            _probe(address, b"GET / HTTP/1.1\r\n\r\n")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not any(
            r.levelno == logging.ERROR for r in caplog.records
        ):
            time.sleep(0.05)
    assert any("3 connections failed the handshake" in r.message for r in caplog.records)
    with pytest.raises(ClusterError, match="could not connect"):
        connect_channel(address, KEY, timeout_s=2)


# --- issue 33 item 5: every driver step on the channel has a deadline ---------------------------
def test_a_silent_peer_does_not_hold_the_listener(
    monkeypatch: pytest.MonkeyPatch, threads_left: None
) -> None:
    """A peer that connects first and sends nothing is dropped at the node's handshake deadline;
    the driver, behind it, still gets its channel."""
    monkeypatch.setattr(serving, "HANDSHAKE_TIMEOUT_S", 0.5)
    address = _actor().listen(KEY, host="127.0.0.1")
    with socket.create_connection(address):  # silent
        began = time.monotonic()
        with connect_channel(address, KEY, timeout_s=10) as channel:
            channel.send(("sync", 4))
            assert _answer(channel) == ("loaded", 4)
    assert time.monotonic() - began < 5


def test_a_listener_that_never_speaks_fails_the_driver_in_time_naming_the_node() -> None:
    """The driver's connect to a port that accepts but never speaks (no challenge) fails at
    its deadline in one line naming the node."""
    with socket.create_server(("127.0.0.1", 0)) as mute:
        began = time.monotonic()
        with pytest.raises(ClusterError, match=r"instance i3 on node n2.*no handshake within"):
            connect_channel(mute.getsockname(), KEY, node="instance i3 on node n2", timeout_s=1)
        assert time.monotonic() - began < 5


def test_a_closed_port_fails_the_driver_naming_the_node() -> None:
    """Nothing listening at the address: one line naming the node and what to check."""
    with socket.create_server(("127.0.0.1", 0)) as gone:
        address = gone.getsockname()
    with pytest.raises(ClusterError, match=r"instance i1 on node n0.*could not connect"):
        connect_channel(address, KEY, node="instance i1 on node n0", timeout_s=2)


def test_a_stalled_model_fails_the_round_trip_measurement_in_time(threads_left: None) -> None:
    """A node whose model stalls while the driver measures its round trip fails the measurement
    at its deadline, naming the node, instead of hanging the driver."""
    backend = StalledBackend()
    channel = connect_channel(_actor(backend).listen(KEY, host="127.0.0.1"), KEY)
    try:
        began = time.monotonic()
        with pytest.raises(ClusterError, match=r"instance i0 on node n7.*within 1 s"):
            round_trip_rate(channel, 4, node="instance i0 on node n7", timeout_s=1)
        assert time.monotonic() - began < 5
    finally:
        backend.release.set()
        channel.close()
