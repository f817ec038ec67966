"""A Ray cluster of several nodes on this machine for the cluster tests, driven over stdin.

Run inside a private network namespace (only `lo`), it starts the nodes with Ray's own test
utility, prints `address HOST:PORT`, then obeys one command a line: `kill K` removes node K at
once (its raylet and workers die, as when a VM goes down) and prints its node ID, `quit` shuts everything down.
Node K emulates its partition on the CPUs given in MLPERF_MIG_NODE_CPUS; a node may replay a
recorded NVML state (MLPERF_MIG_NVML_REPLAY) given as `--replay K=FILE`.
"""

from __future__ import annotations

import argparse
import os
import sys

from mlperf_mig.cluster.connect import LOCAL_NODE_CPUS_ENV, LOOPBACK_ENV, local_node_cpus

os.environ.update(LOOPBACK_ENV)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--replay", action="append", default=[], metavar="K=FILE")
    args = parser.parse_args()
    replays = dict(item.split("=", 1) for item in args.replay)
    from ray.cluster_utils import Cluster

    cluster = None
    nodes = []
    for k, share in enumerate(local_node_cpus(args.nodes)):
        env = {**LOOPBACK_ENV, LOCAL_NODE_CPUS_ENV: ",".join(map(str, share))}
        if str(k) in replays:
            env["MLPERF_MIG_NVML_REPLAY"] = replays[str(k)]
        node_args = {
            "num_cpus": len(share),
            "node_ip_address": "127.0.0.1",
            "env_vars": env,
            "object_store_memory": 400 * 1024 * 1024,
        }
        if cluster is None:
            # a killed node is declared dead within seconds, not Ray's default half minute (and
            # not so fast that a node merely slowed by a loaded machine is)
            fast_death = {
                "health_check_period_ms": 1000,
                "health_check_timeout_ms": 2000,
                "health_check_failure_threshold": 5,
            }
            cluster = Cluster(
                initialize_head=True,
                head_node_args={
                    **node_args,
                    "include_dashboard": False,
                    "_system_config": fast_death,
                },
            )
            nodes.append(cluster.head_node)
        else:
            nodes.append(cluster.add_node(**node_args))
    assert cluster is not None
    cluster.wait_for_nodes()
    print(f"address {cluster.address}", flush=True)
    for line in sys.stdin:
        words = line.split()
        if words[:1] == ["kill"]:
            node = nodes[int(words[1])]
            cluster.remove_node(node, allow_graceful=False)
            print(f"killed {node.node_id}", flush=True)
        elif words[:1] == ["quit"]:
            break
    cluster.shutdown()


if __name__ == "__main__":
    main()
