"""Unified mode of a generative workload over a node's data channel, without Ray: a node's
serving actor opens a generator, takes the coordinator's prompts into its copy of the prompt
arrays and answers token streams; the coordinator's token dispatcher completes them, and loses
the instance whose model raises or whose channel closes. The plan accepts such a run."""

from __future__ import annotations

import ctypes
import os
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pytest

from mlperf_mig.cluster.serving import AUTHKEY_BYTES, ServeActor, connect_channel
from mlperf_mig.engines import EngineSpec
from mlperf_mig.engines.backends.null.backend import NullBackend
from mlperf_mig.harness import InstanceTask, SettingsSpec
from mlperf_mig.harness.datasets import open_source
from mlperf_mig.harness.instance import open_generator, open_task_backend
from mlperf_mig.harness.samples import SampleLibrary, input_layouts
from mlperf_mig.harness.token_sut import PROMPT_IDS, PROMPT_LENGTH, TokenCompleter, first_prompts
from mlperf_mig.placement.choose import nodes_handed
from mlperf_mig.placement.cluster_address import ClusterSpec, parse_cluster
from mlperf_mig.placement.nodes import NodeInventory
from mlperf_mig.runner import unified_tokens
from mlperf_mig.runner.options import RunOptions
from mlperf_mig.runner.plan import EngineRequest, make_plan
from mlperf_mig.runner.unified import SampleMirrors, send_rows
from mlperf_mig.runner.unified_tokens import TokenDispatcher, _Receiver
from mlperf_mig.workloads import get_workload
from mlperf_mig.workloads.generation import ModelFreeGenerator, TokenEvent

KEY = b"t" * AUTHKEY_BYTES
LLAMA = get_workload("llama3.1-8b")
MAX_TOKENS = 6


class TokenLoadGen:
    """Records what reaches LoadGen; a completion before its first token is a crash (it is one
    in a real SingleStream test, reference/llm.md section 2)."""

    def __init__(self) -> None:
        self.first: dict[int, np.ndarray] = {}
        self.done: dict[int, np.ndarray] = {}
        self.crashes: list[int] = []
        self.lock = threading.Lock()

    def QuerySampleResponse(self, qid: int, ptr: int, size: int, n_tokens: int = 0) -> Any:
        return (qid, ctypes.string_at(ptr, size) if size else b"")

    def FirstTokenComplete(self, responses: list[Any]) -> None:
        with self.lock:
            for qid, data in responses:
                self.first[qid] = np.frombuffer(data, dtype=np.int32).copy()

    def QuerySamplesComplete(self, responses: list[Any]) -> None:
        with self.lock:
            for qid, data in responses:
                if qid not in self.first:
                    self.crashes.append(qid)
                self.done[qid] = np.frombuffer(data, dtype=np.int32).copy()


class FailingGenerator(ModelFreeGenerator):
    """Takes requests, raises on its first step (a model lost on its node)."""

    def step(self) -> list[TokenEvent]:
        raise RuntimeError("device lost")


class StalledGenerator(ModelFreeGenerator):
    """Takes requests, and its step waits until released (a node gone quiet)."""

    def __init__(self) -> None:
        super().__init__(max_new_tokens=MAX_TOKENS)
        self.stepping = threading.Event()
        self.release = threading.Event()

    def step(self) -> list[TokenEvent]:
        self.stepping.set()
        self.release.wait(10)
        return []


def _task(tmp_path: Path, scenario: str = "Server", **fields: Any) -> InstanceTask:
    return InstanceTask(
        benchmark=LLAMA,
        loadgen_scenario=scenario,
        outdir=tmp_path / "i0",
        cache_dir=tmp_path / "cache",
        threads=1,
        settings=SettingsSpec(overrides={"max_tokens": MAX_TOKENS}),
        **fields,
    )


def _prompts(task: InstanceTask, count: int) -> SampleLibrary:
    """The task's first `count` prompts, as the coordinator's shared arrays hold them."""
    return first_prompts(open_source(task), input_layouts(LLAMA), count)


def _model_free_node(generator: ModelFreeGenerator, capacity: int = 8) -> ServeActor:
    """A node's actor as `open` leaves it for the null backend, with `generator`."""
    actor = ServeActor("i0", {}, None, capacity=capacity)
    actor._backend, actor._benchmark, actor._batch_size = NullBackend(LLAMA), LLAMA, 4
    actor._prepare()
    actor._generator = generator
    return actor


@attrs.define
class Coordinator:
    """The coordinator's side of one node, as unified_tokens._coordinate runs it."""

    dispatcher: TokenDispatcher
    receiver: _Receiver
    completer: TokenCompleter
    lg: TokenLoadGen


@pytest.fixture(name="coordinator")
def fixture_coordinator() -> Iterator[Any]:
    """Makes the coordinator of a node's channel (a copy of `prompts` to fill at each load);
    stops its receiver at the end."""
    made: list[Coordinator] = []

    def make(
        channel: Connection, prompts: SampleLibrary, reply_timeout_s: float | None = None
    ) -> Coordinator:
        lg = TokenLoadGen()
        completer = TokenCompleter(lg, needs_first_token=True)
        dispatcher = TokenDispatcher(
            [channel],
            [1.0],
            completer,
            names=["instance i0 on node n1"],
            mirrors=SampleMirrors([channel], prompts.buffers, [True]),
            reply_timeout_s=reply_timeout_s,
        )
        receiver = _Receiver([channel], dispatcher)
        receiver.start()
        made.append(Coordinator(dispatcher, receiver, completer, lg))
        return made[-1]

    yield make
    for coordinator in made:
        coordinator.receiver.stop()


def _wait_for(condition: Any, what: str) -> None:
    deadline = time.monotonic() + 20
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def _alone(generator: Any, prompt: np.ndarray) -> list[int]:
    """`prompt`'s tokens generated alone by a local generator."""
    generator.add(0, prompt)
    while True:
        for event in generator.step():
            if event.finished:
                return [] if event.tokens is None else event.tokens.tolist()


def _messages_until_done(channel: Connection, requests: int) -> list[tuple[Any, ...]]:
    """The node's messages until every one of `requests` requests is done."""
    messages: list[tuple[Any, ...]] = []
    done = 0
    while done < requests:
        assert channel.poll(20), "the node did not answer"
        messages.append(channel.recv())
        if messages[-1][0] == "done":
            done += len(messages[-1][1])
    return messages


def test_a_node_answers_each_first_token_before_its_output(tmp_path: Path) -> None:
    """Requests added over the channel get ("first", ...) before ("done", ...), the first
    token equal to the output's, and a sync after the samples is answered "loaded"."""
    task = _task(tmp_path)
    prompts = _prompts(task, 3)
    actor = _model_free_node(ModelFreeGenerator(max_new_tokens=MAX_TOKENS))
    with connect_channel(actor.listen(KEY, host="127.0.0.1"), KEY) as channel:
        send_rows(channel, prompts.buffers, 0, 3)
        channel.send(("sync", 3))
        assert channel.poll(20) and channel.recv() == ("loaded", 3)
        channel.send(("add", [(10, 0), (11, 2)]))
        messages = _messages_until_done(channel, 2)
        channel.send(("stop",))
    first: dict[int, int] = {}
    outputs: dict[int, np.ndarray] = {}
    for message in messages:
        if message[0] == "first":
            first.update(zip(message[1], np.frombuffer(message[2], dtype=np.int32).tolist()))
        else:
            assert message[0] == "done"
            assert set(message[1]) <= set(first), "a request was done before its first token"
            tokens = np.frombuffer(message[3], dtype=np.int32)
            ends = np.cumsum(message[2])
            for request, end, length in zip(message[1], ends, message[2], strict=True):
                outputs[request] = tokens[end - length : end]
    assert sorted(outputs) == [10, 11]
    assert all(len(out) == MAX_TOKENS and out[0] == first[r] for r, out in outputs.items())
    np.testing.assert_array_equal(
        actor._library.buffers[PROMPT_IDS][:3], prompts.buffers[PROMPT_IDS]
    )
    assert actor.close() == {
        "served": 2,
        "busy_s": pytest.approx(actor._tally.busy_s, abs=1e-3),
        "device": NullBackend(LLAMA).device.to_dict(),
        "error": None,
    }


def test_a_tiny_decoder_on_a_node_gives_the_local_generators_tokens(
    tmp_path: Path, coordinator: Any
) -> None:
    """A node opened on the tiny llama engine (deterministic weights) times a target, takes
    the loaded prompts, and the coordinator completes each request with the tokens a local
    generator gives its prompt alone, every first token reported before its completion."""
    task = _task(tmp_path)
    request = EngineRequest(
        key="cpu", benchmark=LLAMA, backend="onnxruntime", precision=None, variant="tiny",
        model_path=None, gpu=None, mig_profile=None, loadgen_scenario="Server",
        cache_dir=str(tmp_path / "cache"),
    )  # fmt: skip
    actor = ServeActor("i0", {}, None, capacity=4)
    reply = actor.open(task, request, KEY)
    assert reply["target"] > 0 and reply["engine"]["variant"] == "tiny"
    prompts = _prompts(task, 4)
    run = coordinator(connect_channel(reply["address"], KEY), prompts)
    run.dispatcher.mirror_samples(4, timeout_s=20)
    assert run.dispatcher.alive == [True]
    run.dispatcher.submit([20, 21, 22], [0, 3, 1])
    _wait_for(lambda: run.completer.completed == 3, "the requests were not completed")
    run.dispatcher.stop_workers()
    assert run.completer.error is None and run.lg.crashes == []
    local_task = attrs.evolve(task, engine=EngineSpec.from_dict(reply["engine"]))
    with open_task_backend(local_task, LLAMA) as backend:
        local = open_generator(local_task, LLAMA, backend, max_new_tokens=MAX_TOKENS)
        try:
            for request_id, row in ((20, 0), (21, 3), (22, 1)):
                prompt = prompts.buffers[PROMPT_IDS][
                    row, : int(prompts.buffers[PROMPT_LENGTH][row])
                ]
                expected = _alone(local, prompt.copy())
                assert run.lg.done[request_id].tolist() == expected
                assert run.lg.first[request_id].tolist() == expected[:1]
        finally:
            local.close()
    assert len(set(run.lg.done[20].tolist() + run.lg.done[21].tolist())) > 2  # tokens that vary
    assert actor.close()["served"] == 3


def test_a_model_error_on_the_node_loses_the_instance_and_names_it(
    tmp_path: Path, coordinator: Any
) -> None:
    """A node whose generator raises answers ("error", why): the coordinator loses the
    instance, its requests complete empty (first token first), and the run's error names the
    instance and what its model raised; the actor's close() says it too."""
    prompts = _prompts(_task(tmp_path), 2)
    actor = _model_free_node(FailingGenerator(max_new_tokens=MAX_TOKENS))
    run = coordinator(connect_channel(actor.listen(KEY, host="127.0.0.1"), KEY), prompts)
    run.dispatcher.mirror_samples(2, timeout_s=20)
    run.dispatcher.submit([1, 2], [0, 1])
    _wait_for(lambda: run.completer.completed == 2, "the lost requests were not completed")
    assert run.dispatcher.alive == [False]
    assert run.completer.failed_samples == 2 and run.lg.crashes == []
    assert run.lg.done[1].size == 0 and run.lg.done[2].size == 0
    assert "instance i0 on node n1 failed" in str(run.completer.error)
    assert "RuntimeError: device lost" in str(run.completer.error)
    assert "device lost" in actor.close()["error"]


def test_a_closed_channel_loses_the_instance_and_completes_its_requests_empty(
    tmp_path: Path, coordinator: Any
) -> None:
    """The channel of a node with a request running closes (its actor or node died): the
    coordinator completes the request empty and names the instance."""
    prompts = _prompts(_task(tmp_path), 2)
    generator = StalledGenerator()
    actor = _model_free_node(generator)
    channel = connect_channel(actor.listen(KEY, host="127.0.0.1"), KEY)
    run = coordinator(channel, prompts)
    try:
        run.dispatcher.submit([5], [1])
        assert generator.stepping.wait(20), "the node never ran the request"
        socket.socket(fileno=os.dup(channel.fileno())).shutdown(socket.SHUT_RDWR)
        _wait_for(lambda: run.completer.completed == 1, "the lost request was not completed")
        assert run.dispatcher.alive == [False] and run.lg.done[5].size == 0
        assert "instance i0 on node n1 exited with requests in flight" in str(run.completer.error)
    finally:
        generator.release.set()


def test_a_node_silent_for_the_reply_timeout_is_lost_and_named(
    tmp_path: Path, coordinator: Any
) -> None:
    """A node whose model hangs with a request running (its channel open) is lost at the reply
    timeout: the request completes empty and the run's error names the instance."""
    prompts = _prompts(_task(tmp_path), 2)
    generator = StalledGenerator()
    actor = _model_free_node(generator)
    channel = connect_channel(actor.listen(KEY, host="127.0.0.1"), KEY)
    run = coordinator(channel, prompts, reply_timeout_s=0.5)
    try:
        began = time.monotonic()
        run.dispatcher.submit([5], [1])
        assert generator.stepping.wait(20), "the node never ran the request"
        _wait_for(lambda: run.completer.completed == 1, "the stalled request was not completed")
        assert time.monotonic() - began >= 0.5
        assert run.dispatcher.alive == [False] and run.dispatcher.stalled == [0]
        assert run.lg.done[5].size == 0 and run.lg.crashes == []
        assert "instance i0 on node n1 failed (it sent nothing for" in str(run.completer.error)
    finally:
        generator.release.set()
        socket.socket(fileno=os.dup(channel.fileno())).shutdown(socket.SHUT_RDWR)


class Clock:
    """The dispatcher's monotonic clock, moved by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture(name="clock")
def fixture_clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(unified_tokens, "time", clock)
    return clock


def test_the_reply_timeout_counts_only_silence_with_requests_running(clock: Clock) -> None:
    """Of two workers with a request each, the one that answered within the reply timeout
    stays and the silent one is lost; what the lost one sends later is ignored (its request
    completed once, empty), and a worker with nothing running is never lost to silence."""
    lg = TokenLoadGen()
    completer = TokenCompleter(lg, needs_first_token=True)
    (a, b), (c, d) = Pipe(), Pipe()
    dispatcher = TokenDispatcher(
        [a, c], [1.0, 1.0], completer, names=["instance i0", "instance i1"], reply_timeout_s=0.3
    )
    dispatcher.submit([1, 2], [0, 1])
    assert b.recv() == ("add", [(1, 0)]) and d.recv() == ("add", [(2, 1)])
    dispatcher.check_stalled()
    assert dispatcher.alive == [True, True]
    clock.now += 0.35
    dispatcher.first(1, [2], np.array([7], dtype=np.int32).tobytes())
    dispatcher.check_stalled()
    assert dispatcher.alive == [False, True] and dispatcher.stalled == [0]
    assert completer.completed == 1 and lg.done[1].size == 0
    assert "instance i0 failed (it sent nothing for" in str(completer.error)
    late = np.array([3, 4], dtype=np.int32)
    dispatcher.first(0, [1], late[:1].tobytes())
    dispatcher.done(0, [1], [2], late.tobytes())
    assert completer.completed == 1 and lg.done[1].size == 0 and dispatcher.served == [0, 0]
    dispatcher.done(1, [2], [2], np.array([7, 8], dtype=np.int32).tobytes())
    assert lg.done[2].tolist() == [7, 8] and dispatcher.served == [0, 1]
    clock.now += 60.0
    dispatcher.check_stalled()
    assert dispatcher.alive == [False, True] and lg.crashes == []


def test_a_quiet_worker_is_passed_over_for_new_requests_while_another_answers(
    clock: Clock,
) -> None:
    """A worker with a request running that has sent nothing for QUIET_PASSED_OVER_S gets no
    new request while another answers, however few it has; once it answers it is chosen by
    load again, and when every worker is quiet the least loaded is."""
    (a, b), (c, d) = Pipe(), Pipe()
    dispatcher = TokenDispatcher(
        [a, c], [1.0, 1.0], TokenCompleter(TokenLoadGen(), needs_first_token=True)
    )
    token = np.array([7], dtype=np.int32).tobytes()
    dispatcher.submit([1, 2], [0, 1])
    assert b.recv() == ("add", [(1, 0)]) and d.recv() == ("add", [(2, 1)])
    clock.now += unified_tokens.QUIET_PASSED_OVER_S + 0.1
    dispatcher.first(1, [2], token)
    dispatcher.submit([3, 4, 5], [2, 3, 4])
    assert d.recv() == ("add", [(3, 2), (4, 3), (5, 4)]) and not b.poll(0)
    dispatcher.first(0, [1], token)
    dispatcher.submit([6], [5])
    assert b.recv() == ("add", [(6, 5)])
    clock.now += unified_tokens.QUIET_PASSED_OVER_S + 0.1
    dispatcher.submit([7], [6])
    assert b.recv() == ("add", [(7, 6)]) and not d.poll(0)
    assert [sorted(f) for f in dispatcher.in_flight] == [[1, 6, 7], [2, 3, 4, 5]]


def test_a_load_that_a_node_does_not_take_in_time_loses_it(
    tmp_path: Path, coordinator: Any
) -> None:
    """A node that never answers the sync of a load is given up at the load's deadline."""
    prompts = _prompts(_task(tmp_path), 2)
    with socket.create_server(("127.0.0.1", 0)) as server:
        peer = socket.create_connection(server.getsockname())
        mute, _ = server.accept()
        run = coordinator(Connection(peer.detach()), prompts)
        try:
            began = time.monotonic()
            run.dispatcher.mirror_samples(2, timeout_s=0.5)
            assert run.dispatcher.alive == [False] and time.monotonic() - began < 5
        finally:
            mute.close()


def test_a_frame_of_rows_sent_to_a_generating_node_is_answered_as_an_error(
    tmp_path: Path,
) -> None:
    """A generating node refuses a frame of the batch protocol with ("error", why)."""
    actor = _model_free_node(ModelFreeGenerator(max_new_tokens=MAX_TOKENS))
    with connect_channel(actor.listen(KEY, host="127.0.0.1"), KEY) as channel:
        channel.send(("batch", 1, None, range(0, 1), None))
        assert channel.poll(20)
        kind, why = channel.recv()
    assert kind == "error" and "unknown message 'batch'" in why
    assert "unknown message 'batch'" in actor.close()["error"]


@attrs.frozen
class _Nodes:
    """Two GPU-less nodes of a cluster, as a session would hand them."""

    spec: ClusterSpec
    nodes: Sequence[NodeInventory]

    def inventories(self) -> Sequence[NodeInventory]:
        return self.nodes


@pytest.mark.parametrize(
    ("benchmark", "scenario"),
    [
        ("llama3.1-8b", "Server"),
        ("llama3.1-8b", "Offline"),
        ("llama3.1-8b-edge", "SingleStream"),
        ("llama3.1-8b-edge", "Offline"),
    ],
)
def test_a_generative_unified_run_over_a_cluster_is_planned(benchmark: str, scenario: str) -> None:
    """Unified mode of the LLM over a cluster's nodes is planned (it was refused before its
    nodes could carry token streams), with an instance on each node."""
    nodes = _Nodes(
        parse_cluster("local:2"),
        [
            NodeInventory(
                node_id=f"{k:02d}" * 20,
                host=f"vm{k}",
                address=f"10.0.0.{k}",
                ray_version="2.60.0",
                python_version="3.11.7",
                cpus=(k,),
                devices=(),
            )
            for k in range(2)
        ],
    )
    options = RunOptions(
        scenario="2g.20gb+1g.10gb", benchmark=benchmark, loadgen_scenario=scenario,
        mode="unified", variant="tiny", cluster="local:2",
    )  # fmt: skip
    with nodes_handed(nodes):
        plan = make_plan(options)
    assert plan.mode == "unified" and plan.benchmark.generates_tokens
    assert {slot.host for slot in plan.slots} == {"vm0", "vm1"}
