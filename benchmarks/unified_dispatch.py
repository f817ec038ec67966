"""Unified mode's dispatch ceiling: null-backend Offline samples/s of a whole layout in unified
mode (one LoadGen, batches dispatched to the instance workers over pipes, samples in shared
memory) against the same layout in independent mode (one LoadGen per instance), same run.

Targets (layout 7, ResNet50, whose 588 KiB samples make any copy show): unified at least
100,000 samples/s, and at least half of the independent layout's total. Layouts 1 and 8 are
printed for comparison (1: one 7g instance; 8: seven 1g instances).

Pairs alternate (independent, unified) `--repeats` times; the best of each is reported, and the
median of the pairs' ratios. Both modes use `--batch` (default 256: the ResNet50 recipe's
Offline batch of a 1g instance on a GPU, which is unified mode's batch in layout 7 too; the
null backend has no recipe and would fall back to 64).

Runs are sized so that each LoadGen test lasts past its min_duration (VALID): an Offline query
holds target QPS x min_duration x 1.1 samples, and a query that is done sooner gives an INVALID
result whose throughput counts the test's fixed costs (start, ordering, tail) over too few
samples. A first pair at `--offline-qps` measures each mode; the measured pairs then ask each
LoadGen for 1.5x what it delivered (independent: the fastest instance's rate, since settings
apply to every instance; unified: the layout's). Every run's validity is printed; an INVALID
measured run is named in the summary, and the best of each mode is taken over its VALID runs
(over all of them, said so, when none is VALID).

    .venv/bin/python benchmarks/unified_dispatch.py [--benchmark resnet50] [--layouts 1 7 8]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

UNIFIED_TARGET = 100_000
RATIO_TARGET = 0.5
TARGET_LAYOUT = 7
MODES = ("independent", "unified")


SIZING_MARGIN = 1.5


def one_run(
    folder: Path, name: str, *, layout: int, mode: str, target_qps: float, args: argparse.Namespace
) -> dict[str, Any]:
    """One null-backend Offline run of `layout` in `mode`: total samples/s, the target each
    LoadGen was given, whether every result is VALID, and the fastest LoadGen's samples/s
    (the layout's own in unified mode)."""
    import mlperf_mig

    result = mlperf_mig.run(
        scenario=layout,
        benchmark=args.benchmark,
        backend="null",
        mode=mode,
        emulate=True,
        accuracy=False,
        progress=False,
        outdir=folder / name,
        batch_size=args.batch,
        settings={"min_duration": args.duration_ms, "target_qps": target_qps},
    )
    total = float(result.total_throughput)
    rates = [i.throughput for i in result.instances if i.throughput is not None]
    return {
        "samples_per_s": total,
        "target_qps": target_qps,
        "valid": bool(result.all_valid),
        "fastest_loadgen": total if mode == "unified" else max(rates),
    }


def _best(pairs: list[dict[str, Any]], mode: str) -> float:
    """The best samples/s of `mode` over its VALID runs, or over all when none is VALID."""
    runs = [p[mode] for p in pairs]
    valid = [r["samples_per_s"] for r in runs if r["valid"]]
    if not valid:
        print(f"  no VALID {mode} run: its best is an INVALID run's", flush=True)
    return max(valid or [r["samples_per_s"] for r in runs])


def _word(run: dict[str, Any]) -> str:
    return "VALID" if run["valid"] else "INVALID"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--benchmark", default="resnet50", help="resnet50 (588 KiB) or bert (9 KiB)"
    )
    parser.add_argument("--layouts", type=int, nargs="+", default=[1, 7, 8])
    parser.add_argument("--duration-ms", type=int, default=3000, help="min_duration of every run")
    parser.add_argument(
        "--offline-qps",
        type=float,
        default=200_000,
        help="Offline target QPS of every LoadGen in the sizing pair",
    )
    parser.add_argument("--repeats", type=int, default=2, help="alternating pairs per layout")
    parser.add_argument("--batch", type=int, default=256, help="batch size of every instance")
    parser.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = parser.parse_args()
    print(
        f"unified dispatch, null backend, Offline {args.benchmark}, batch {args.batch}, "
        f"{os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    started = time.monotonic()
    report: dict[str, Any] = {"benchmark": args.benchmark, "layouts": {}}
    with tempfile.TemporaryDirectory(prefix="unified-dispatch-") as tmp:
        folder = Path(tmp)
        for layout in args.layouts:
            targets = {}
            for mode in MODES:
                sizing = one_run(
                    folder,
                    f"{layout}-{mode}-sizing",
                    layout=layout,
                    mode=mode,
                    target_qps=args.offline_qps,
                    args=args,
                )
                targets[mode] = round(SIZING_MARGIN * sizing["fastest_loadgen"])
                print(
                    f"  layout {layout} sizing: {mode} {sizing['samples_per_s']:,.0f} samples/s "
                    f"({_word(sizing)}) -> target {targets[mode]:,} per LoadGen",
                    flush=True,
                )
            pairs = []
            for attempt in range(args.repeats):
                runs = {
                    mode: one_run(
                        folder,
                        f"{layout}-{mode}-{attempt}",
                        layout=layout,
                        mode=mode,
                        target_qps=targets[mode],
                        args=args,
                    )
                    for mode in MODES
                }
                pairs.append(runs)
                print(
                    f"  layout {layout} #{attempt}: "
                    + "  ".join(
                        f"{mode} {runs[mode]['samples_per_s']:>11,.0f} ({_word(runs[mode])})"
                        for mode in MODES
                    )
                    + " samples/s",
                    flush=True,
                )
            best = {mode: _best(pairs, mode) for mode in MODES}
            invalid = sum(not p[mode]["valid"] for p in pairs for mode in MODES)
            entry = {
                "pairs": pairs,
                "best_independent": best["independent"],
                "best_unified": best["unified"],
                "ratio_of_best": best["unified"] / best["independent"],
                "median_pair_ratio": statistics.median(
                    p["unified"]["samples_per_s"] / p["independent"]["samples_per_s"] for p in pairs
                ),
                "invalid_runs": invalid,
            }
            report["layouts"][str(layout)] = entry
            print(
                f"layout {layout}: unified {best['unified']:,.0f} samples/s, independent "
                f"{best['independent']:,.0f} samples/s, ratio {entry['ratio_of_best']:.2f} "
                f"(median of the pairs {entry['median_pair_ratio']:.2f})"
                + (
                    f"; {invalid} measured run(s) INVALID"
                    if invalid
                    else "; every measured run VALID"
                ),
                flush=True,
            )
    target = report["layouts"].get(str(TARGET_LAYOUT))
    if target is not None:
        met = target["best_unified"] >= UNIFIED_TARGET and target["ratio_of_best"] >= RATIO_TARGET
        print(
            f"layout {TARGET_LAYOUT} targets (unified >= {UNIFIED_TARGET:,} samples/s and >= "
            f"{RATIO_TARGET:.0%} of independent): {'met' if met else 'NOT met'}"
        )
    print(
        f"took {time.monotonic() - started:.0f} s, load average {os.getloadavg()[0]:.2f} at the end"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
