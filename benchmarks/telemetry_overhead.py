"""What the telemetry sampler costs a run: throughput with it on over off, and its CPU share.

ResNet50 Offline on the emulated study layout 7 (3x 2g + 1g), quick preset, no accuracy run,
telemetry on and off alternating in this one process (on, off, on, off, ...), so that a machine
getting busier or quieter over time weighs on both alike. Prints each pair, the ratio of the
mean totals (target: at least 0.99), the sampler thread's CPU time over the timed windows it
covered (its share of one CPU; the rows it took and its rate), met / NOT met, and the load
average before and after. The sampler runs in the runner process, never in a worker, so what it
takes is CPU time the workers could have had on a machine with no core to spare.

    .venv/bin/python benchmarks/telemetry_overhead.py [--pairs 3] [--variant full|tiny]
        [--layout 7] [--outdir DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

TARGET_RATIO = 0.99


def one_run(
    layout: int, variant: str, telemetry: bool, outdir: Path
) -> tuple[float, float | None, int]:
    """(total samples/s, the sampler thread's CPU share of one CPU or None, rows) of one run."""
    import mlperf_mig

    result = mlperf_mig.run(
        scenario=layout,
        benchmark="resnet50",
        loadgen_scenario="Offline",
        variant=variant,
        emulate=True,
        accuracy=False,
        telemetry=telemetry,
        outdir=outdir,
        progress=False,
    )
    if result.total_throughput is None:
        raise SystemExit(f"run {outdir} produced no throughput: {result.table()}")
    t = result.telemetry
    if t is None:
        return result.total_throughput, None, 0
    share = t.sampler_cpu_s / t.sampled_s if t.sampler_cpu_s is not None and t.sampled_s else None
    return result.total_throughput, share, t.samples


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pairs", type=int, default=3, help="on/off pairs (default 3)")
    parser.add_argument("--variant", default="full", choices=("full", "tiny"))
    parser.add_argument("--layout", type=int, default=7, help="study layout (default 7)")
    parser.add_argument(
        "--outdir", default=None, help="where the runs go (default: a temporary folder)"
    )
    args = parser.parse_args()
    root = Path(args.outdir or tempfile.mkdtemp(prefix="telemetry-overhead-"))
    print(
        f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; runs in {root}",
        flush=True,
    )
    on, off, shares = [], [], []
    for k in range(args.pairs):
        total_on, share, rows = one_run(args.layout, args.variant, True, root / f"on-{k}")
        total_off, _, _ = one_run(args.layout, args.variant, False, root / f"off-{k}")
        on.append(total_on)
        off.append(total_off)
        if share is not None:
            shares.append(share)
        print(
            f"pair {k + 1}: telemetry on {total_on:,.1f} samples/s ({rows} rows, sampler "
            f"{'-' if share is None else f'{share:.2%}'} of one CPU), off {total_off:,.1f} samples/s, "
            f"ratio {total_on / total_off:.3f}; load {os.getloadavg()[0]:.2f}",
            flush=True,
        )
    ratio = statistics.mean(on) / statistics.mean(off)
    met = ratio >= TARGET_RATIO
    print(
        f"throughput with telemetry over without: {ratio:.3f} (mean of {args.pairs} pairs; target >= "
        f"{TARGET_RATIO}: {'met' if met else 'NOT met'})"
    )
    if shares:
        print(
            f"sampler thread CPU: {statistics.mean(shares):.2%} of one CPU on average "
            f"(max {max(shares):.2%}), at 10 Hz"
        )
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
