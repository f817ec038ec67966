"""What running across Ray nodes costs, on a throwaway local cluster of three nodes (local:3).

1. Start skew: in independent mode, the spread of the instants the nodes released their LoadGen
   tests (results.json `cluster.start_skew_ms`), layout 7, null backend. Target: at most 50 ms.
2. Unified dispatch: null-backend unified Offline samples/s over the cluster, as a ratio of local
   unified mode in the same run (same layout, same settings). Target: at least 0.5.
3. Server capacity: the highest target QPS whose Server run stays VALID over the cluster, null
   backend, layout 7, in independent mode (the benchmark's latency bound; the layout's QPS is the
   sum; target: at least 40,000) and in unified mode with a 15 ms bound (batches travel over
   the actors' data channels, cluster/serving.py; target: at least 30,000, with ResNet50's and
   BERT's sample sizes: `--benchmark resnet50`, `--benchmark bert`).
4. The driver's cost (measured, with every unified run): CPU microseconds per sample of the
   coordinator (its process's CPU time from the start barrier's release: LoadGen's threads and
   the dispatch, which speaks to the nodes' data channels itself; its `dispatch cost` log line),
   and the CPU it took to copy the samples to the nodes before the test.

`--parts` picks what runs (skew, offline, server; all by default). The numbers depend on the
machine's load, printed with each; run alone.

Ray binds to loopback only for local:N; run as root, the script also re-runs itself inside a
private network namespace with only `lo` (`unshare -n`), so nothing can leave the machine.

    .venv/bin/python benchmarks/cluster_overhead.py [--benchmark bert] [--seconds 3] [--parts offline]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

SKEW_TARGET_MS = 50.0
RATIO_TARGET = 0.5
SERVER_TARGET_QPS = {"independent": 40_000, "unified": 30_000}
SERVER_LATENCY_MS = 15
QPS_STEPS = (2_000, 5_000, 10_000, 20_000, 30_000, 40_000, 60_000)
_IN_NAMESPACE = "MLPERF_MIG_BENCH_NETNS"
PARTS = ("skew", "offline", "server")
_COST = re.compile(r" (dispatch) cost (\{.*\})$")


def reexec_in_namespace() -> None:
    """As root, run this script again inside a network namespace with only loopback up."""
    if os.environ.get(_IN_NAMESPACE) or os.geteuid() != 0 or not shutil.which("unshare"):
        return
    os.environ[_IN_NAMESPACE] = "1"
    script = 'ip link set lo up && exec "$0" "$@"'
    os.execvp("unshare", ["unshare", "-n", "sh", "-c", script, sys.executable, *sys.argv])


def _load() -> str:
    return "load average " + " ".join(f"{v:.2f}" for v in os.getloadavg())


def one_run(folder: Path, name: str, **options: Any) -> Any:
    import mlperf_mig

    return mlperf_mig.run(
        outdir=folder / name, accuracy=False, progress=False, backend="null", **options
    )


def driver_cost(folder: Path, name: str) -> str:
    """The driver's CPU a sample in the last unified run: the coordinator's."""
    log = folder / name / "layout" / "worker.log"
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    found = {}
    for line in lines:
        match = _COST.search(line)
        if match:
            found[match.group(1)] = json.loads(match.group(2))
    dispatch = found.get("dispatch")
    if not dispatch or not dispatch.get("samples"):
        return "driver CPU: n/a (no dispatch cost logged)"
    samples = dispatch["samples"]
    text = f"driver CPU (measured): coordinator {1e6 * dispatch['cpu_s'] / samples:.2f} us a sample"
    if dispatch.get("mirror_cpu_s"):
        text += f" (and {dispatch['mirror_cpu_s']:.2f} s copying the samples to the nodes before the test)"
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--benchmark", default="bert", help="bert (9 KiB a sample) or resnet50 (588 KiB)"
    )
    parser.add_argument("--seconds", type=float, default=3.0, help="min_duration of each run (s)")
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS)
    parser.add_argument(
        "--server-modes",
        nargs="+",
        default=["independent", "unified"],
        choices=["independent", "unified"],
    )
    args = parser.parse_args()
    reexec_in_namespace()
    from mlperf_mig.cluster.connect import cluster_scope
    from mlperf_mig.runner.supervisor import stop_signals

    cluster = f"local:{args.nodes}"
    ms = int(args.seconds * 1000)
    common = {"benchmark": args.benchmark, "scenario": 7}
    with stop_signals(), tempfile.TemporaryDirectory() as tmp, cluster_scope(cluster):
        folder = Path(tmp)
        if "skew" in args.parts:
            skew_part(folder, cluster, ms, common, args)
        if "offline" in args.parts:
            offline_part(folder, cluster, ms, common)
        if "server" in args.parts:
            server_part(folder, cluster, ms, common, args)


def skew_part(folder: Path, cluster: str, ms: int, common: dict[str, Any], args: Any) -> None:
    """Start skew of independent mode over the cluster."""
    independent = one_run(folder, "skew", cluster=cluster, settings={"min_duration": ms}, **common)
    skew = independent.cluster["start_skew_ms"]
    print(
        f"start skew, independent mode, {args.nodes} nodes: {skew:.1f} ms "
        f"(target <= {SKEW_TARGET_MS:.0f} ms: {'met' if skew <= SKEW_TARGET_MS else 'NOT met'}); {_load()}",
        flush=True,
    )


def offline_part(folder: Path, cluster: str, ms: int, common: dict[str, Any]) -> None:
    """Unified Offline over the cluster against local unified, with the driver's costs."""
    offline = {"mode": "unified", "settings": {"min_duration": ms}, **common}
    local = one_run(folder, "unified-local", emulate=True, **offline)
    print(f"  local unified: {driver_cost(folder, 'unified-local')}; {_load()}", flush=True)
    remote = one_run(folder, "unified-cluster", cluster=cluster, **offline)
    print(f"  cluster unified: {driver_cost(folder, 'unified-cluster')}; {_load()}", flush=True)
    ratio = remote.total_throughput / local.total_throughput
    print(
        f"unified Offline, null backend: local {local.total_throughput:,.0f} samples/s "
        f"({'VALID' if local.all_valid else 'INVALID'}), over the cluster "
        f"{remote.total_throughput:,.0f} samples/s ({'VALID' if remote.all_valid else 'INVALID'}), "
        f"ratio {ratio:.2f} (target >= {RATIO_TARGET}: "
        f"{'met' if ratio >= RATIO_TARGET else 'NOT met'}); {_load()}",
        flush=True,
    )


def server_part(folder: Path, cluster: str, ms: int, common: dict[str, Any], args: Any) -> None:
    """The highest VALID Server target over the cluster, in each mode."""
    # unified: the 15 ms bound; independent: the benchmark's own, as before
    bound = {"unified": {"target_latency": SERVER_LATENCY_MS}, "independent": {}}
    for mode in args.server_modes:
        best = 0
        for qps in QPS_STEPS:
            per_instance = qps / 4 if mode == "independent" else qps
            result = one_run(
                folder,
                f"server-{mode}-{qps}",
                cluster=cluster,
                mode=mode,
                loadgen_scenario="Server",
                settings={"min_duration": ms, "target_qps": per_instance, **bound[mode]},
                **common,
            )
            valid = result.all_valid
            cost = driver_cost(folder, f"server-{mode}-{qps}") if mode == "unified" else ""
            print(
                f"  Server {mode}: target {qps:,} QPS -> {'VALID' if valid else 'INVALID'}"
                f"{'; ' + cost if cost else ''} ({_load()})",
                flush=True,
            )
            if not valid:
                break
            best = qps
        verdict = "met" if best >= SERVER_TARGET_QPS[mode] else "NOT met"
        at = f"{SERVER_LATENCY_MS} ms" if bound[mode] else f"{args.benchmark}'s latency bound"
        print(
            f"highest VALID Server target over the cluster at {at}, {mode} mode: "
            f"{best:,} QPS (target >= {SERVER_TARGET_QPS[mode]:,}: {verdict}); {_load()}",
            flush=True,
        )


if __name__ == "__main__":
    main()
