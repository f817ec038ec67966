"""Offline ResNet50 on ONNX Runtime (CPU) through the harness against the raw session.

Both sides run the same engine file with the same session options, batch size (the recipe's CPU
Offline batch) and intra-op threads, each in its own spawned process, alternating. Two ratios are
reported: wall-clock samples/s (median of the alternating pairs), which a machine shared with
other work makes noisy, and samples per CPU-second of the process (all its threads: ONNX
Runtime's, LoadGen's and ours), which is what the harness adds and which contention hardly
moves. Target: the harness keeps at least 95% of the raw session's rate.

    .venv/bin/python benchmarks/backend_efficiency.py [--threads 2] [--seconds 15] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

TARGET_FRACTION = 0.95


def in_child(function: Any, *args: Any) -> Any:
    """Run `function(*args)` in a fresh spawned process."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        return pool.submit(function, *args).result(timeout=1800)


def raw_session(engine_path: str, batch: int, threads: int, seconds: float) -> dict[str, float]:
    """Samples per second and per CPU-second of a bare InferenceSession on the engine file,
    with the backend's session options."""
    import numpy as np
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.inter_op_num_threads = 1
    options.intra_op_num_threads = threads
    options.add_session_config_entry("session.set_denormal_as_zero", "1")
    options.log_severity_level = 3
    session = ort.InferenceSession(engine_path, options, providers=["CPUExecutionProvider"])
    feeds = {
        "input_tensor:0": np.random.default_rng(0)
        .uniform(-124, 152, (batch, 3, 224, 224))
        .astype(np.float32)
    }
    outputs = [o.name for o in session.get_outputs()]
    session.run(outputs, feeds)
    done = 0
    cpu = time.process_time()
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        session.run(outputs, feeds)
        done += batch
    wall = time.perf_counter() - started
    return {"per_s": done / wall, "per_cpu_s": done / (time.process_time() - cpu)}


def harness(spec: Any, outdir: str, threads: int, seconds: float) -> dict[str, Any]:
    """Offline through run_instance (quick preset, measured target, min_duration `seconds`):
    LoadGen's samples/s and the samples per CPU-second from StartTest to the parsed result."""
    from mlperf_mig.harness import InstanceTask, SettingsSpec, run_instance

    task = InstanceTask(
        benchmark="resnet50",
        loadgen_scenario="Offline",
        outdir=outdir,
        engine=spec,
        threads=threads,
        settings=SettingsSpec(overrides={"min_duration": int(seconds * 1000)}),
    )
    marks: list[float] = []
    result = run_instance(task, before_start=lambda: marks.append(time.process_time()))
    cpu = time.process_time() - marks[0]
    return {
        "per_s": result.throughput,
        "per_cpu_s": result.samples_completed / cpu,
        "validity": result.validity,
        "device": result.device.to_dict(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads (default 2)")
    parser.add_argument("--seconds", type=float, default=15.0, help="length of each run")
    parser.add_argument("--repeats", type=int, default=2, help="alternating runs of each side")
    parser.add_argument("--cache-dir", default=None, help="model and engine cache")
    parser.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = parser.parse_args()

    from mlperf_mig.engines import EngineSpec, build_engine

    spec = EngineSpec.create(
        "resnet50", backend="onnxruntime", variant="full", loadgen_scenario="Offline",
        cache_dir=args.cache_dir,
    )  # fmt: skip
    engine = build_engine(spec, args.cache_dir)
    batch = spec.max_batch_size
    print(
        f"ResNet50 full fp32, ONNX Runtime CPU, batch {batch}, {args.threads} threads, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="backend-efficiency-") as tmp:
        for attempt in range(args.repeats):
            raw = in_child(raw_session, str(engine.path), batch, args.threads, args.seconds)
            ours = in_child(
                harness, spec, str(Path(tmp) / f"run-{attempt}"), args.threads, args.seconds
            )
            rows.append({"attempt": attempt, "raw": raw, "harness": ours})
            print(
                f"  attempt {attempt}: raw {raw['per_s']:.2f} samples/s "
                f"({raw['per_cpu_s']:.2f} per CPU-s), harness {ours['per_s']:.2f} samples/s "
                f"({ours['per_cpu_s']:.2f} per CPU-s, {ours['validity']}, "
                f"{ours['device']['provider']} x{ours['device']['threads']})",
                flush=True,
            )
    wall = statistics.median(r["harness"]["per_s"] / r["raw"]["per_s"] for r in rows)
    cpu = statistics.median(r["harness"]["per_cpu_s"] / r["raw"]["per_cpu_s"] for r in rows)
    for name, ratio in (("wall-clock", wall), ("per CPU-second", cpu)):
        verdict = "met" if ratio >= TARGET_FRACTION else "NOT met"
        print(f"harness / raw, {name}: {ratio:.1%} (target >= {TARGET_FRACTION:.0%}: {verdict})")
    if args.json is not None:
        report = {
            "batch": batch,
            "threads": args.threads,
            "attempts": rows,
            "wall_ratio": wall,
            "cpu_ratio": cpu,
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
