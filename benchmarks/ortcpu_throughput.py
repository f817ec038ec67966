"""ResNet50 throughput on ONNX Runtime's CPU provider, per batch size and intra-op thread count.

    python benchmarks/ortcpu_throughput.py [--batches 1,8,32] [--threads 1,2] [--seconds 5]

Uses the generated full ResNet50-v1.5 graph (synthetic weights: speed does not depend on them)
through the library's own engine cache and backend, so it measures what the harness would get.
Prints samples/s and milliseconds per batch; each cell runs one warm-up batch, then batches for at
least --seconds and at least --min-runs times. The load average is printed before and after:
other processes on the machine take CPU time from the measurement.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

from mlperf_mig._table import text_table
from mlperf_mig.benchmark import RESNET50
from mlperf_mig.engines import EngineSpec, open_backend
from mlperf_mig.engines.models import calibration_feeds


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def measure(spec: EngineSpec, batch: int, threads: int, seconds: float, min_runs: int) -> dict:
    feeds = calibration_feeds(RESNET50, batch, seed=0)
    with open_backend(spec, threads=threads) as backend:
        backend.run(feeds)
        runs = 0
        start = time.perf_counter()
        while runs < min_runs or time.perf_counter() - start < seconds:
            backend.run(feeds)
            runs += 1
        elapsed = time.perf_counter() - start
    return {
        "batch": batch,
        "threads": threads,
        "samples/s": runs * batch / elapsed,
        "ms/batch": 1000.0 * elapsed / runs,
        "runs": runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=_ints, default=[1, 8, 32])
    parser.add_argument("--threads", type=_ints, default=[1, 2])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--min-runs", type=int, default=3)
    parser.add_argument("--precision", default="fp32", help="fp32 or int8 (Q/DQ graph)")
    parser.add_argument("--variant", default="full", help="full or tiny")
    args = parser.parse_args()

    spec = EngineSpec.create(
        "resnet50",
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
    rows = [
        measure(spec, batch, threads, args.seconds, args.min_runs)
        for threads in args.threads
        for batch in args.batches
    ]
    print(text_table(rows, ["batch", "threads", "samples/s", "ms/batch", "runs"]))
    print(f"load average {os.getloadavg()[0]:.1f} after the run (other processes share the CPUs)")


if __name__ == "__main__":
    main()
