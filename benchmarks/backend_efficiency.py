"""Offline ResNet50 on ONNX Runtime (CPU) through the harness against the raw session.

Three sides run the same engine, batch size (the recipe's CPU Offline batch) and intra-op
threads, each in its own spawned process, in turn:
  raw       a bare InferenceSession on the engine file, ONNX Runtime's usual throughput options
  backend   the library's backend (open_backend: its session options, the saved CPU copy, its
            runs of at most 2 samples per thread), called in a loop without LoadGen
  harness   run_instance: LoadGen Offline, our SUT (ordering, gather, payloads, completion)
so that harness/raw splits into backend/raw (what the backend's choices cost) and
harness/backend (what LoadGen and the SUT cost). Two ratios each: wall-clock samples/s (median
of the rounds), which a machine shared with other work makes noisy, and samples per CPU-second
of the process (all its threads: ONNX Runtime's, LoadGen's and ours), which contention moves
less. Target: the harness keeps at least 98% of the raw session's rate.

The harness run is given TARGET_MARGIN x the best rate of the round's raw and backend runs as
its target, so that its one Offline query holds more than `--seconds` of work and the test
lasts past its min_duration (VALID) unless the harness is much faster than both. Rounds
alternate the order of the sides (raw, backend, harness; then the reverse), so that a change
of load over time does not favour one side; each round prints the load average before it. (With the quick preset's measured target the query would hold only its
`offline_query_s` = 2 s of work: a few batches, and LoadGen calls the run INVALID for its
duration.) An INVALID harness run is named in the summary.

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

from mlperf_mig.workloads import get_workload

TARGET_FRACTION = 0.98
TARGET_MARGIN = 1.3
SIDES = ("raw", "backend", "harness")


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


def backend_loop(spec: Any, batch: int, threads: int, seconds: float) -> dict[str, float]:
    """Samples per second and per CPU-second of the library's backend called in a loop."""
    import numpy as np

    from mlperf_mig.engines import open_backend

    with open_backend(spec, threads=threads) as backend:
        feeds = {
            "input_tensor:0": np.random.default_rng(0)
            .uniform(-124, 152, (batch, 3, 224, 224))
            .astype(np.float32)
        }
        backend.run(feeds)
        done = 0
        cpu = time.process_time()
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            backend.run(feeds)
            done += batch
        wall = time.perf_counter() - started
        return {"per_s": done / wall, "per_cpu_s": done / (time.process_time() - cpu)}


def harness(
    spec: Any, outdir: str, threads: int, seconds: float, target_qps: float
) -> dict[str, Any]:
    """Offline through run_instance (quick preset, target `target_qps`, min_duration `seconds`):
    LoadGen's samples/s and the samples per CPU-second from StartTest to the parsed result."""
    from mlperf_mig.harness import InstanceTask, SettingsSpec, run_instance

    task = InstanceTask(
        benchmark="resnet50",
        loadgen_scenario="Offline",
        outdir=outdir,
        engine=spec,
        threads=threads,
        settings=SettingsSpec(
            overrides={"min_duration": int(seconds * 1000), "target_qps": target_qps}
        ),
    )
    marks: list[float] = []
    result = run_instance(task, before_start=lambda: marks.append(time.process_time()))
    cpu = time.process_time() - marks[0]
    return {
        "per_s": result.throughput,
        "per_cpu_s": result.samples_completed / cpu,
        "samples": result.samples_completed,
        "validity": result.validity,
        "invalid_reasons": list(result.invalid_reasons),
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

    from mlperf_mig.engines import build_engine, resolve_spec

    spec = resolve_spec(
        get_workload("resnet50"), backend="onnxruntime", variant="full", loadgen_scenario="Offline",
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
    target = 0.0
    with tempfile.TemporaryDirectory(prefix="backend-efficiency-") as tmp:
        for attempt in range(args.repeats):
            load = os.getloadavg()[0]
            done: dict[str, dict[str, Any]] = {}
            for side in SIDES if attempt % 2 == 0 else SIDES[::-1]:
                if side == "raw":
                    done[side] = in_child(
                        raw_session, str(engine.path), batch, args.threads, args.seconds
                    )
                elif side == "backend":
                    done[side] = in_child(backend_loop, spec, batch, args.threads, args.seconds)
                else:  # harness: last in forward rounds, first in reversed ones
                    if "raw" in done:
                        target = TARGET_MARGIN * max(done["raw"]["per_s"], done["backend"]["per_s"])
                    outdir = str(Path(tmp) / f"run-{attempt}")
                    done[side] = in_child(
                        harness, spec, outdir, args.threads, args.seconds, round(target, 2)
                    )
            # the next reversed round's harness runs first: its target comes from this round
            target = TARGET_MARGIN * max(done["raw"]["per_s"], done["backend"]["per_s"])
            raw, loop, ours = done["raw"], done["backend"], done["harness"]
            rows.append(
                {"attempt": attempt, "load": load, "raw": raw, "backend": loop, "harness": ours}
            )
            print(
                f"  round {attempt} (load {load:.2f}): "
                + ", ".join(
                    f"{side} {r['per_s']:.2f} samples/s ({r['per_cpu_s']:.2f} per CPU-s)"
                    for side, r in (("raw", raw), ("backend", loop), ("harness", ours))
                )
                + f"; harness {ours['samples']} samples, {ours['validity']}"
                + (f" ({'; '.join(ours['invalid_reasons'])})" if ours["invalid_reasons"] else "")
                + f", {ours['device']['provider']} x{ours['device']['threads']}",
                flush=True,
            )
    ratios = {}
    for over, under in (("harness", "raw"), ("backend", "raw"), ("harness", "backend")):
        for name, key in (("wall-clock", "per_s"), ("per CPU-second", "per_cpu_s")):
            ratio = statistics.median(r[over][key] / r[under][key] for r in rows)
            ratios[f"{over}/{under} {name}"] = ratio
            verdict = ""
            if (over, under) == ("harness", "raw"):
                met = "met" if ratio >= TARGET_FRACTION else "NOT met"
                verdict = f" (target >= {TARGET_FRACTION:.0%}: {met})"
            print(f"{over} / {under}, {name}: {ratio:.1%}{verdict}")
    invalid = [r["attempt"] for r in rows if r["harness"]["validity"] != "VALID"]
    if invalid:
        print(
            f"harness runs of rounds {invalid} were INVALID: their samples/s is not a valid result"
        )
    print(f"load average {os.getloadavg()[0]:.2f} at the end", flush=True)
    if args.json is not None:
        report = {
            "batch": batch,
            "threads": args.threads,
            "rounds": rows,
            "ratios": ratios,
            "invalid_rounds": invalid,
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
