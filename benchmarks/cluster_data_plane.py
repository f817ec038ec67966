"""Which data plane for unified cluster rounds: the cost of one batch's round trip to an actor on
another Ray node, by three ways of sending it, on a throwaway local cluster of two nodes.

1. a Ray actor call per batch (`actor.serve.remote(frame)`, then `ray.get`): what cluster
   rounds did before;
2. a Ray compiled graph (`InputNode` -> `actor.serve.bind`, `experimental_compile()`): Ray's
   pre-allocated channels, one `execute` per batch;
3. the actor's own data channel (cluster/serving.py: a TCP socket through
   multiprocessing.connection with an authentication key): one frame per batch.

Each sends a frame like a unified batch of `--batch` samples (ids and dataset indices; the
sample data travels once and is not part of it) and gets a reply of one 4-byte payload a
sample, first one at a time (latency), then `--window` frames in flight (throughput). The
numbers depend on the machine's load, printed with every line.

    .venv/bin/python benchmarks/cluster_data_plane.py [--frames 2000] [--batch 32] [--window 4]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import Any


def _load() -> str:
    return "load average " + " ".join(f"{v:.2f}" for v in os.getloadavg())


class EchoActor:
    """Answers a batch frame with one 4-byte payload a sample, by each of the three paths."""

    def serve(self, frame: tuple[list[int], list[int]]) -> tuple[list[int], bytes]:
        ids, indices = frame
        return ids, bytes(4 * len(indices))

    def listen(self, authkey: bytes) -> tuple[str, int]:
        import threading
        from multiprocessing.connection import Listener

        import ray

        listener = Listener((ray.util.get_node_ip_address(), 0), family="AF_INET", authkey=authkey)

        def loop() -> None:
            with listener, listener.accept() as channel:
                try:
                    while True:
                        channel.send(self.serve(channel.recv()))
                except EOFError:
                    return

        threading.Thread(target=loop, daemon=True).start()
        return listener.address


def timed(
    send: Callable[[Any], Any], receive: Callable[[Any], Any], frames: int, window: int
) -> float:
    """Seconds per frame with `window` frames in flight."""
    pending: list[Any] = []
    began = time.perf_counter()
    for _ in range(frames):
        pending.append(send(None))
        if len(pending) >= window:
            receive(pending.pop(0))
    for handle in pending:
        receive(handle)
    return (time.perf_counter() - began) / frames


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=32, help="samples a frame")
    parser.add_argument("--window", type=int, default=4, help="frames in flight (throughput)")
    args = parser.parse_args()
    from multiprocessing.connection import Client

    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from mlperf_mig.cluster.connect import cluster_scope

    frame = (list(range(args.batch)), list(range(1000, 1000 + args.batch)))
    print(
        f"data plane, local:2, frames of {args.batch} samples, {os.cpu_count()} CPUs, {_load()}",
        flush=True,
    )
    with cluster_scope("local:2"):
        here = ray.get_runtime_context().get_node_id()
        other = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] != here)
        where = NodeAffinitySchedulingStrategy(node_id=other, soft=False)
        results: dict[str, tuple[float, float]] = {}

        actor = ray.remote(EchoActor).options(num_cpus=0, scheduling_strategy=where).remote()
        ray.get(actor.serve.remote(frame))
        results["actor call per batch"] = (
            timed(lambda _: actor.serve.remote(frame), ray.get, args.frames, 1),
            timed(lambda _: actor.serve.remote(frame), ray.get, args.frames, args.window),
        )

        graph_actor = ray.remote(EchoActor).options(num_cpus=0, scheduling_strategy=where).remote()
        try:
            from ray.dag import InputNode

            with InputNode() as batch:
                dag = graph_actor.serve.bind(batch)
            compiled = dag.experimental_compile(_max_inflight_executions=max(args.window, 1))
            ray.get(compiled.execute(frame))
            results["compiled graph"] = (
                timed(lambda _: compiled.execute(frame), ray.get, args.frames, 1),
                timed(lambda _: compiled.execute(frame), ray.get, args.frames, args.window),
            )
            compiled.teardown()
        except Exception as exc:  # a Ray build without compiled graphs: say so, measure the rest
            print(
                f"compiled graph: not measured ({type(exc).__name__}: {' '.join(str(exc).split())[:300]})"
            )

        socket_actor = ray.remote(EchoActor).options(num_cpus=0, scheduling_strategy=where).remote()
        key = os.urandom(32)
        channel = Client(
            tuple(ray.get(socket_actor.listen.remote(key))), family="AF_INET", authkey=key
        )
        channel.send(frame)
        channel.recv()
        results["data channel (socket)"] = (
            timed(lambda _: channel.send(frame), lambda _: channel.recv(), args.frames, 1),
            timed(
                lambda _: channel.send(frame), lambda _: channel.recv(), args.frames, args.window
            ),
        )
        channel.close()

    for name, (latency, per_frame) in results.items():
        print(
            f"{name:<24} round trip {latency * 1e6:8.0f} us, {args.window} in flight: "
            f"{1 / per_frame:9,.0f} frames/s = {args.batch / per_frame:11,.0f} samples/s ({_load()})"
        )
    fastest = min(results, key=lambda name: results[name][1])
    print(f"fastest at {args.window} frames in flight: {fastest}; {_load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
