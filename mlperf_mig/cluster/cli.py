"""`mlperf-mig cluster-info`: what every node of a Ray cluster offers to a layout."""

from __future__ import annotations

import argparse
import json


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "cluster-info",
        help="inventory of a Ray cluster: node, host, GPU, MIG device or vGPU, profile",
        description="Ask every node of a Ray cluster what it has, with the same discovery as "
        "`detect`, run on that node: MIG devices, MIG-backed vGPUs, whole GPUs, or the node's "
        "CPUs as an emulated partition.",
    )
    parser.add_argument(
        "--cluster",
        required=True,
        metavar="ADDR",
        help="auto, HOST:PORT, ray://HOST:PORT, or local:N (N throwaway nodes on this machine)",
    )
    parser.add_argument("--json", action="store_true", help="print the inventory as JSON")
    parser.set_defaults(handler=_cluster_info)


def _cluster_info(args: argparse.Namespace) -> int:
    from mlperf_mig.cluster.connect import cluster_scope
    from mlperf_mig.cluster.inventory import inventory_table, take_inventory
    from mlperf_mig.runner.supervisor import stop_signals

    with stop_signals(), cluster_scope(args.cluster) as session:
        assert session is not None
        inventories = take_inventory(session)
        if args.json:
            print(
                json.dumps(
                    {
                        "cluster": str(session.spec),
                        "address": session.address,
                        "nodes": [inv.to_dict() for inv in inventories],
                    },
                    indent=2,
                )
            )
        else:
            print(inventory_table(session, inventories))
    return 0
