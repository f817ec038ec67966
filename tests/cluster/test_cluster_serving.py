"""A node's serving actor and the driver's serving thread, without Ray: what a node runs for one
merged batch, and the data channel between them."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from multiprocessing import Pipe
from multiprocessing.connection import AuthenticationError

import numpy as np
import pytest

from mlperf_mig.cluster.serving import (
    AUTHKEY_BYTES,
    RemoteServing,
    ServeActor,
    connect_channel,
    round_trip_rate,
)
from mlperf_mig.engines.backends.null.backend import NullBackend
from mlperf_mig.workloads.resnet50 import RESNET50


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


def _actor(backend: NullBackend | None = None) -> ServeActor:
    actor = ServeActor("i0", {}, None, capacity=64)
    actor._backend, actor._benchmark, actor._batch_size = (
        backend or NullBackend(RESNET50),
        RESNET50,
        4,
    )
    return actor


def _new_samples(indices: list[int]) -> dict[int, dict[str, np.ndarray]]:
    (layout,) = RESNET50.inputs
    return {i: {layout.name: np.zeros(layout.shape[1:], dtype=layout.dtype)} for i in indices}


def test_data_channel_serves_frames_to_the_key_holder() -> None:
    """A frame of batches sent over the actor's data channel comes back as one reply with every
    batch id and a payload per sample; the round trip measures a rate."""
    key = b"k" * AUTHKEY_BYTES
    channel = connect_channel(_actor().listen(key, host="127.0.0.1"), key)
    with channel:
        channel.send(("serve", [7, 8], [0, 1, 2], _new_samples([0, 1, 2])))
        kind, ids, payload, item_bytes = channel.recv()
        assert (kind, ids, len(payload)) == ("done", [7, 8], 3 * item_bytes)
        assert round_trip_rate(channel, 4, batches=4) > 0


def test_data_channel_refuses_a_wrong_key_and_still_serves_the_driver() -> None:
    """A connection without the round's key is refused; the driver's still gets the channel."""
    key = b"k" * AUTHKEY_BYTES
    address = _actor().listen(key, host="127.0.0.1")
    with pytest.raises(AuthenticationError):
        connect_channel(address, b"x" * AUTHKEY_BYTES)
    with connect_channel(address, key) as channel:
        channel.send(("feeds", 4))
        assert channel.recv() == ("ran", 4)


def test_model_error_is_answered_on_the_channel() -> None:
    """A model that raises answers ("error", why) instead of leaving the driver waiting."""
    key = b"k" * AUTHKEY_BYTES
    with connect_channel(_actor(FailingBackend()).listen(key, host="127.0.0.1"), key) as channel:
        channel.send(("serve", [1], [0], _new_samples([0])))
        kind, why = channel.recv()
        assert kind == "error" and "device lost" in why


def test_remote_serving_forwards_batches_and_closes_the_pipe_of_a_dead_channel() -> None:
    """The driver's serving thread answers the coordinator's batches over the channel; when the
    channel closes (the actor died) it closes that instance's pipe, so its batches go elsewhere."""
    key = b"k" * AUTHKEY_BYTES
    actor = _actor()
    channel = connect_channel(actor.listen(key, host="127.0.0.1"), key)
    (layout,) = RESNET50.inputs
    arrays = {layout.name: np.zeros((8, *layout.shape[1:]), dtype=layout.dtype)}
    coordinator, served = Pipe()
    serving = RemoteServing(arrays)
    serving.add("i0", None, served, {"target": 10.0, "batch_size": 4}, capacity=8, channel=channel)
    serving.start()
    assert coordinator.recv() == ("target", 10.0)
    coordinator.send(("batch", 3, [100, 101], range(0, 2), [5, 6]))
    kind, ids, payload, item_bytes = coordinator.recv()
    assert (kind, ids, len(payload)) == ("done", [3], 2 * item_bytes)
    assert serving.remotes[0].inflight == 0
    # the actor's side goes away: the driver's end reads end-of-file
    socket.socket(fileno=os.dup(channel.fileno())).shutdown(socket.SHUT_RDWR)
    serving.join(timeout=10)
    assert not serving.is_alive() and serving.remotes[0].done
    with pytest.raises(EOFError):
        coordinator.recv()
