"""Does the CPU emulation keep MIG's proportions? Each profile's per-instance throughput over 1g's.

On a GPU, a MIG instance of s compute slices has s/7 of an A100's SMs, so per-instance throughput
goes about 1 : 2 : 3 : 4 : 7 for 1g : 2g : 3g : 4g : 7g. The emulation gives each instance CPU
time in proportion to its slices (emulation/cpu_budget.py): this script runs the seed study's
layouts 1-8 (ResNet50 Offline, quick preset, no accuracy run) for the tiny and the full graph,
averages each profile's per-instance throughput over the layouts it appears in, divides by 1g's,
and prints that against 1 : 2 : 3 : 4 : 7 with the largest deviation (target: at most 20%),
met / NOT met, how each budget was enforced, and the load average before and after (a busy
machine starves the instances below their budgets; the runs' own notes then say so, and the
CPU each instance used is printed next to its budget).

    .venv/bin/python benchmarks/emulation_proportions.py [--variants tiny,full] [--layouts 1-8]
        [--cluster local:3] [--outdir DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

TARGET_DEVIATION = 0.20
EXPECTED = {"1g": 1, "2g": 2, "3g": 3, "4g": 4, "7g": 7}


def _layouts(text: str) -> list[int]:
    if "-" in text:
        low, high = text.split("-")
        return list(range(int(low), int(high) + 1))
    return [int(part) for part in text.split(",")]


def _used(instance: object) -> str:
    used = getattr(instance, "cpu_used", None)
    return "-" if used is None else f"{used:.2f}"  # cluster actors do not report it


def measure(
    variant: str, layouts: list[int], outdir: Path, cluster: str | None
) -> dict[str, list[tuple[float, float, float]]]:
    """Per profile size ("2g"): (throughput, CPU budget, CPU used) of every instance of every layout."""
    import mlperf_mig

    seen: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    for scenario in layouts:
        result = mlperf_mig.run(
            scenario=scenario,
            benchmark="resnet50",
            loadgen_scenario="Offline",
            variant=variant,
            emulate=True,
            accuracy=False,
            outdir=outdir / f"{variant}-{scenario}",
            progress=False,
            cluster=cluster,
        )
        budgets = sorted({i.cpu_budget or "-" for i in result.instances})
        print(
            f"  {variant} layout {scenario} ({result.layout}): "
            + ", ".join(
                f"{i.profile} {i.throughput or 0:,.0f}/s ({_used(i)} of {i.cpu_share or 0:.3g} CPU)"
                for i in result.instances
            )
            + f"; budgets by {', '.join(budgets)}; load {os.getloadavg()[0]:.2f}",
            flush=True,
        )
        for i in result.instances:
            if i.throughput is not None:
                seen[i.profile.split(".")[0]].append(
                    (i.throughput, i.cpu_share or 0.0, i.cpu_used or 0.0)
                )
    return seen


def report(variant: str, seen: dict[str, list[tuple[float, float, float]]]) -> bool:
    """Print each profile's ratio over 1g against 1:2:3:4:7; True when the target is met."""
    if "1g" not in seen:
        print(f"{variant}: no 1g instance measured; include layout 5 or 8")
        return False
    base = statistics.mean(t for t, _, _ in seen["1g"])
    worst = 0.0
    print(
        f"{variant}: profile  per-instance samples/s  ratio over 1g  expected  deviation  CPU used / budget"
    )
    for size in sorted(seen, key=lambda s: EXPECTED.get(s, 99)):
        rate = statistics.mean(t for t, _, _ in seen[size])
        ratio = rate / base
        deviation = ratio / EXPECTED[size] - 1
        worst = max(worst, abs(deviation))
        parts = [u / b for _, b, u in seen[size] if b and u]
        used = f"{statistics.mean(parts):.0%}" if parts else "-"
        print(
            f"{variant}:   {size:<6} {rate:>22,.1f}  {ratio:>13.2f}  {EXPECTED[size]:>8}  {deviation:>+9.1%}  {used:>17}"
        )
    met = worst <= TARGET_DEVIATION
    print(
        f"{variant}: largest deviation from 1:2:3:4:7 {worst:.1%} (target <= {TARGET_DEVIATION:.0%}: "
        f"{'met' if met else 'NOT met'})",
        flush=True,
    )
    return met


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--variants", default="tiny,full", help="graph variants, comma separated (tiny, full)"
    )
    parser.add_argument(
        "--layouts", default="1-8", help="the study's layouts: 1-8 or a list such as 1,5,7"
    )
    parser.add_argument(
        "--cluster",
        default=None,
        help="run on a Ray cluster, e.g. local:3 (needs the cluster extra)",
    )
    parser.add_argument(
        "--outdir", default=None, help="where the runs go (default: a temporary folder)"
    )
    args = parser.parse_args()
    if args.cluster is not None and args.cluster.startswith("local:"):
        # A throwaway Ray cluster: as root, run again in a network namespace with only loopback,
        # as cluster_overhead.py does (its function; this script's folder is on sys.path).
        from cluster_overhead import reexec_in_namespace

        reexec_in_namespace()
    print(
        f"{os.cpu_count()} CPUs ({len(os.sched_getaffinity(0))} usable), load average "
        f"{os.getloadavg()[0]:.2f} at the start",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="emulation-proportions-") as scratch:
        outdir = Path(args.outdir or scratch)
        results = [
            report(v, measure(v, _layouts(args.layouts), outdir, args.cluster))
            for v in args.variants.split(",")
        ]
    print(f"load average {os.getloadavg()[0]:.2f} at the end", flush=True)
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
