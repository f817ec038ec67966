"""ResNet50 throughput on ONNX Runtime's CPU provider, per batch size and intra-op thread count.

    python benchmarks/ortcpu_throughput.py [--batches 1,8,32] [--threads 1,2] [--seconds 5]

Uses the generated full ResNet50-v1.5 graph (synthetic weights: speed does not depend on them)
through the library's own engine cache and backend, so it measures what the harness would get.
Prints samples/s and milliseconds per batch; each cell runs one warm-up batch, then batches for at
least --seconds and at least --min-runs times. The load average is printed before and after:
other processes on the machine take CPU time from the measurement, so each cell also reports the
CPU time its process spent per sample, which other processes change much less (with one thread;
more threads add the time they spin waiting for work).

Each cell runs in a fresh process, which also gives the memory one session costs, measured from
just before the backend is opened to after the timed batches (from /proc/self/smaps_rollup):
    heap MiB  anonymous memory: the process's own copies (weights, packed weights, activations)
    PSS MiB   proportional set size: mapped file pages count in part, by how many processes map
              them (one process here, so a mapped weight file counts whole)
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import time
from pathlib import Path

from mlperf_mig._table import text_table
from mlperf_mig.engines import EngineSpec, open_backend, resolve_spec
from mlperf_mig.workloads import get_workload
from mlperf_mig.workloads.resnet50 import RESNET50


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def _memory_mib() -> dict[str, float]:
    """Anonymous memory and PSS of this process in MiB."""
    fields = {"Anonymous": 0.0, "Pss": 0.0}
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in fields:
            fields[key] = int(rest.split()[0]) / 1024
    return fields


def measure(spec: EngineSpec, batch: int, threads: int, seconds: float, min_runs: int) -> dict:
    feeds = RESNET50.calibration_feeds(batch, seed=0)
    before = _memory_mib()
    with open_backend(spec, threads=threads) as backend:
        backend.run(feeds)
        runs = 0
        start, start_cpu = time.perf_counter(), time.process_time()
        while runs < min_runs or time.perf_counter() - start < seconds:
            backend.run(feeds)
            runs += 1
        elapsed, cpu = time.perf_counter() - start, time.process_time() - start_cpu
        after = _memory_mib()
    return {
        "batch": batch,
        "threads": threads,
        "samples/s": runs * batch / elapsed,
        "ms/batch": 1000.0 * elapsed / runs,
        "CPU ms/sample": 1000.0 * cpu / (runs * batch),
        "runs": runs,
        "heap MiB": after["Anonymous"] - before["Anonymous"],
        "PSS MiB": after["Pss"] - before["Pss"],
    }


def measure_in_child(spec: EngineSpec, *args: int | float) -> dict:
    """`measure` in a fresh process, so that no cell inherits another's memory."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(measure, (spec, *args))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=_ints, default=[1, 8, 32])
    parser.add_argument("--threads", type=_ints, default=[1, 2])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--min-runs", type=int, default=3)
    parser.add_argument("--precision", default="fp32", help="fp32 or int8 (Q/DQ graph)")
    parser.add_argument("--variant", default="full", help="full or tiny")
    args = parser.parse_args()

    spec = resolve_spec(
        get_workload("resnet50"),
        backend="onnxruntime",
        precision=args.precision,
        variant=args.variant,
        batch_sizes=tuple(args.batches),
    )
    print(
        f"ResNet50-v1.5 ({args.variant}, {args.precision}) on ONNX Runtime {spec.backend_version} "
        f"CPUExecutionProvider; {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} before the run"
    )
    # Build the engine (and any per-machine copy of it) before the cells, which then only load.
    open_backend(spec).close()
    rows = [
        measure_in_child(spec, batch, threads, args.seconds, args.min_runs)
        for threads in args.threads
        for batch in args.batches
    ]
    columns = ["batch", "threads", "samples/s", "ms/batch", "CPU ms/sample", "runs"]
    print(text_table(rows, [*columns, "heap MiB", "PSS MiB"]))
    print(f"load average {os.getloadavg()[0]:.1f} after the run (other processes share the CPUs)")


if __name__ == "__main__":
    main()
