"""The unified dispatcher's cost per query at the scale people run, measured, then projected to a
whole host (issue 35): null backend, ResNet50, unified mode (one LoadGen for every instance),
emulated A100-SXM4-80GB GPUs split into 1g.10gb instances.

NVIDIA's `DGX-A100_A100-SXM-80GB-MIG_56x1g.10gb` (v1.1, 8 A100s on a 128-core host) did 283,469
samples/s Offline but only 70,007 QPS Server: its dispatcher, not the GPUs, was the limit. Can
ours hold that host? This machine cannot run 56 instances at that rate, so the answer is in two
parts, each labelled:

MEASURED, for 2, 8 and 56 instances (2 GPUs x 1g.10gb, 8 GPUs x 1g.10gb, 8 GPUs x 7x 1g.10gb):
    the coordinator's CPU microseconds per Offline sample and per Server query (its process's CPU
    time from the start barrier's release to the end of the test: LoadGen's threads and the
    dispatch; the coordinator logs it as `dispatch cost`), each serving worker's per sample it
    served (`serving cost`), the samples/s, the validity, and the load average. Server runs at
    the same two `--server-qps` rates for every count: what is measured is the cost of a query,
    and its latency tail is not asked of this machine (56 worker processes on its cores make the
    tail a scheduling artefact; the run's validity is printed, not judged). The coordinator's
    CPU-seconds a second are a fixed part (wake-ups, LoadGen's own threads) plus a part a query:
    fitted from the two rates, `fixed + per_query x QPS`, printed as indicative only; the growth
    and the projection take the cost a query measured at the higher rate (an upper bound). Each
    line also gives the coordinator's CPU a message (batches sent and replies read), messages a
    sample (chunks are sized from the layout's rate, so they do not shrink as instances are
    added), and the coordinator's CPU in two parts: LoadGen's threads a wall second (they poll
    at a rate of their own: where 56 instances on this machine's cores make the run slower,
    they cost more a sample, which a host with a core a worker would not see) and the
    dispatch's a sample.
    Target: the coordinator's cost per Offline sample and per Server query (the fitted part a
    query) grows at most 1.25x from 2 to 56 instances (a dispatcher whose cost grows with the
    instances is the bug).
    Peak memory of the whole run (proportional set size): (peak of 56 - peak of 8) / 48 per
    extra instance, target <= 64 MiB.
PROJECTED, not measured, from the 56-instance costs, for a host of `--cores` C (default 128)
    whose dispatcher has one core: Offline = min(1e6 / coordinator us per sample, (C - 1) x 1e6 /
    the workers' us per sample), Server = `--headroom` (0.8: room for the latency tail) x 1e6 /
    the coordinator's us per query.
    Targets: >= 300,000 samples/s and >= 70,007 QPS.

The numbers depend on the machine's load (printed with each); run alone.

    .venv/bin/python benchmarks/fleet_dispatch.py [--counts 2 8 56] [--cores 128] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

OFFLINE_TARGET = 300_000
SERVER_TARGET = 70_007
GROWTH_TARGET = 1.25
MEMORY_TARGET_MIB = 64
SERVER_LATENCY_MS = 15  # ResNet50 Server's bound
# instances -> (GPUs, layout of each): every instance a 1g.10gb, as in NVIDIA's system
SYSTEMS = {2: (2, "1g.10gb"), 8: (8, "1g.10gb"), 56: (8, 8)}
_COST = re.compile(r" (dispatch|serving) cost (\{.*\})$")


def _load() -> str:
    return "load average " + " ".join(f"{v:.2f}" for v in os.getloadavg())


class PeakMemory:
    """Samples the proportional set size of this process and all its descendants (the fork
    server and the workers) every 0.1 s; `peak_mib` is the largest sum seen."""

    def __init__(self) -> None:
        self.peak_mib = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(0.1):
            self.peak_mib = max(self.peak_mib, sum(_pss_kib(p) for p in _tree(os.getpid())) / 1024)


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        kids.setdefault(int(fields[1]), []).append(int(entry.name))
    return kids


def _tree(root: int) -> list[int]:
    kids, found, todo = _children(), [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += kids.get(pid, [])
    return found


def _pss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def costs(folder: Path) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The coordinator's cost line and every serving worker's, from a run folder's logs."""
    coordinator, workers = None, []
    for log in sorted(folder.glob("*/worker.log")):
        for line in log.read_text(errors="replace").splitlines():
            match = _COST.search(line)
            if match is None:
                continue
            cost = json.loads(match.group(2))
            if match.group(1) == "dispatch":
                coordinator = cost
            else:
                workers.append(cost)
    return coordinator, workers


def _us(cost: dict[str, Any], per: str) -> float | None:
    count = cost.get(per) or 0
    return 1e6 * cost["cpu_s"] / count if count else None


def one_run(
    folder: Path, name: str, instances: int, scenario: str, target_qps: float, args: Any
) -> dict[str, Any]:
    """One null-backend unified run of `instances` 1g.10gb instances: its rate, validity and
    costs per sample and per query."""
    import mlperf_mig

    gpus, layout = SYSTEMS[instances]
    settings: dict[str, float] = {"min_duration": args.duration_ms, "target_qps": target_qps}
    if scenario == "Server":
        settings["target_latency"] = SERVER_LATENCY_MS
    with PeakMemory() as memory:
        result = mlperf_mig.run(
            scenario=layout,
            gpu="A100-SXM4-80GB",
            gpu_count=gpus,
            emulate=True,
            backend="null",
            loadgen_scenario=scenario,
            mode="unified",
            accuracy=False,
            progress=False,
            telemetry=False,
            outdir=folder / name,
            settings=settings,
            timeout_s=args.timeout_s,
        )
    coordinator, workers = costs(folder / name)
    worker_us = [u for u in (_us(w, "samples") for w in workers) if u is not None]
    return {
        "instances": instances,
        "scenario": scenario,
        "target_qps": target_qps,
        "samples_per_s": float(result.total_throughput or 0.0),
        "valid": bool(result.all_valid),
        "ok": bool(result.ok),
        "coordinator": coordinator,
        "coordinator_us_per_sample": None if coordinator is None else _us(coordinator, "samples"),
        "coordinator_us_per_query": None if coordinator is None else _us(coordinator, "queries"),
        "coordinator_us_per_message": None if coordinator is None else _us(coordinator, "messages"),
        "messages_per_sample": None
        if not coordinator or not coordinator.get("samples")
        else (coordinator.get("messages") or 0) / coordinator["samples"],
        "workers_us_per_sample": worker_us,
        "peak_mib": memory.peak_mib,
        "load": os.getloadavg()[0],
    }


def fit(pair: list[dict[str, Any]]) -> dict[str, Any]:
    """The coordinator's CPU-seconds a second as `fixed + per_query x QPS`, from two Server
    runs at different rates (each its CPU and queries over its own wall time)."""
    points = []
    for run in pair:
        cost = run["coordinator"]
        if cost and cost["wall_s"] > 0:
            points.append((cost["queries"] / cost["wall_s"], cost["cpu_s"] / cost["wall_s"]))
    # the growth and the projection take the cost a query measured at the higher rate (the
    # fixed part spread over its queries: an upper bound); the fit is printed beside it
    measured = max(pair, key=lambda run: run["target_qps"])["coordinator_us_per_query"]
    if len(points) < 2 or points[0][0] == points[1][0]:
        return {"runs": pair, "fixed": 0.0, "fitted_us": None, "coordinator_us_per_query": measured}
    (q1, c1), (q2, c2) = points
    per_query = max(0.0, (c2 - c1) / (q2 - q1))
    fixed = max(0.0, c1 - per_query * q1)
    return {
        "runs": pair,
        "fixed": fixed,
        "fitted_us": 1e6 * per_query,
        "coordinator_us_per_query": measured,
    }


def _fmt(value: float | None, spec: str = ",.2f") -> str:
    return "n/a" if value is None else format(value, spec)


def _split(run: dict[str, Any], per: str) -> str:
    """The coordinator's CPU in two parts: LoadGen's threads (its process CPU less the
    dispatch's, a wall second: they poll and spin at a rate of their own, so on a machine where
    more instances make the run slower they cost more a sample) and the dispatch's a sample
    or query (`per`)."""
    cost = run["coordinator"]
    count = cost.get({"sample": "samples", "query": "queries"}[per]) if cost else None
    if not cost or "dispatch_cpu_s" not in cost or not cost.get("wall_s") or not count:
        return ""
    loadgen = (cost["cpu_s"] - cost["dispatch_cpu_s"]) / cost["wall_s"]
    dispatch = 1e6 * cost["dispatch_cpu_s"] / count
    return (
        f" (LoadGen's threads {loadgen:.3f} CPU-s a second, the dispatch {dispatch:.2f} us a {per})"
    )


def _print_run(run: dict[str, Any]) -> None:
    workers = run["workers_us_per_sample"]
    per = "sample" if run["scenario"] == "Offline" else "query"
    key = f"coordinator_us_per_{per}"
    print(
        f"  MEASURED {run['scenario']:7} {run['instances']:2} instances: coordinator "
        f"{_fmt(run[key])} us CPU a {per}{_split(run, per)} ({_fmt(run['coordinator_us_per_message'])} us a "
        f"message, {_fmt(run['messages_per_sample'], '.3f')} messages a sample); workers {_fmt(statistics.mean(workers) if workers else None)}"
        f" us a sample (max {_fmt(max(workers, default=None))}); {run['samples_per_s']:,.0f} "
        f"samples/s at target {run['target_qps']:,.0f} "
        f"({'VALID' if run['valid'] else 'INVALID'}{'' if run['ok'] else ', a worker FAILED'}); "
        f"peak memory {run['peak_mib']:,.0f} MiB; {_load()}",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--counts", type=int, nargs="+", default=sorted(SYSTEMS), choices=SYSTEMS)
    parser.add_argument("--duration-ms", type=int, default=3000, help="min_duration of every run")
    parser.add_argument(
        "--offline-qps", type=float, default=150_000, help="Offline target (sizes the query)"
    )
    parser.add_argument(
        "--server-qps",
        type=float,
        nargs=2,
        default=[4_000, 16_000],
        help="the two Server targets, the same for each count",
    )
    parser.add_argument("--cores", type=int, default=128, help="cores of the projected host")
    parser.add_argument(
        "--headroom", type=float, default=0.8, help="share of the dispatcher's core Server uses"
    )
    parser.add_argument("--timeout-s", type=float, default=600.0, help="deadline of each test")
    parser.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = parser.parse_args()
    print(
        f"fleet dispatch: unified mode, null backend, ResNet50, 1g.10gb instances of emulated "
        f"A100-SXM4-80GB; {os.cpu_count()} CPUs here; {_load()}",
        flush=True,
    )
    started = time.monotonic()
    runs: dict[str, dict[int, dict[str, Any]]] = {"Offline": {}, "Server": {}}
    with tempfile.TemporaryDirectory(prefix="fleet-dispatch-") as tmp:
        folder = Path(tmp)
        for count in args.counts:
            run = one_run(folder, f"Offline-{count}", count, "Offline", args.offline_qps, args)
            runs["Offline"][count] = run
            _print_run(run)
            pair = []
            for qps in args.server_qps:
                run = one_run(folder, f"Server-{count}-{qps:.0f}", count, "Server", qps, args)
                pair.append(run)
                _print_run(run)
            runs["Server"][count] = fit(pair)
            fitted = runs["Server"][count]
            print(
                f"  FITTED  Server  {count:2} instances: coordinator {fitted['fixed']:.3f} CPU-s a "
                f"second + {_fmt(fitted['fitted_us'])} us a query (two points on a loaded "
                "machine: indicative only)",
                flush=True,
            )
    report: dict[str, Any] = {"runs": runs, "cores": args.cores, "headroom": args.headroom}
    lines = []
    low, high = min(args.counts), max(args.counts)
    for scenario, per, how in (
        ("Offline", "sample", "MEASURED"),
        ("Server", "query", f"MEASURED at {max(args.server_qps):,.0f} QPS,"),
    ):
        first = runs[scenario][low][f"coordinator_us_per_{per}"]
        last = runs[scenario][high][f"coordinator_us_per_{per}"]
        if first and last and high > low:
            growth = last / first
            report[f"{scenario.lower()}_growth"] = growth
            lines.append(
                f"{how} growth of the coordinator's CPU a {per}, {scenario}, {low} -> {high} "
                f"instances: {first:.2f} -> {last:.2f} us, {growth:.2f}x (target <= "
                f"{GROWTH_TARGET}): {'met' if growth <= GROWTH_TARGET else 'NOT met'}"
            )
    if 8 in runs["Offline"] and 56 in runs["Offline"]:
        extra = (runs["Offline"][56]["peak_mib"] - runs["Offline"][8]["peak_mib"]) / 48
        report["memory_per_extra_instance_mib"] = extra
        lines.append(
            f"MEASURED peak memory per extra instance (8 -> 56): {extra:,.1f} MiB (target <= "
            f"{MEMORY_TARGET_MIB}): {'met' if extra <= MEMORY_TARGET_MIB else 'NOT met'}"
        )
    offline, server = runs["Offline"][high], runs["Server"][high]
    d_off, d_srv = offline["coordinator_us_per_sample"], server["coordinator_us_per_query"]
    workers = offline["workers_us_per_sample"]
    if d_off and d_srv and workers:
        dispatcher_bound = 1e6 / d_off
        workers_bound = (args.cores - 1) * 1e6 / statistics.mean(workers)
        projected_offline = min(dispatcher_bound, workers_bound)
        projected_server = args.headroom * 1e6 / d_srv
        report["projected"] = {"offline": projected_offline, "server": projected_server}
        lines += [
            f"PROJECTED (not measured), {high} instances on a {args.cores}-core host, the "
            f"dispatcher on one core:",
            f"  Offline {projected_offline:,.0f} samples/s (dispatcher {dispatcher_bound:,.0f}, "
            f"workers' harness on {args.cores - 1} cores {workers_bound:,.0f}; target >= "
            f"{OFFLINE_TARGET:,}): {'met' if projected_offline >= OFFLINE_TARGET else 'NOT met'}",
            f"  Server {projected_server:,.0f} QPS ({args.headroom:.0%} of the dispatcher's core at "
            f"{d_srv:.2f} us a query, measured at {max(args.server_qps):,.0f} QPS; target >= "
            f"{SERVER_TARGET:,}): "
            f"{'met' if projected_server >= SERVER_TARGET else 'NOT met'}",
        ]
    print("\n".join(lines))
    print(f"took {time.monotonic() - started:.0f} s; {_load()} at the end")
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
