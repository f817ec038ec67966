"""How much the harness costs on top of LoadGen, measured with the null backend (no model).

1. Offline: samples/s of our Offline SUT (run_instance, null backend) against a bare FastSUT
   that reuses POOL_SIZE LoadGen QuerySampleResponse objects, setting only their ids, and
   completes POOL_SIZE samples a call: LoadGen's own ceiling on this machine. Target: ours >= 90%
   of it, in the same run (alternating). Also shown: the bare FastSUT that makes one response
   per sample (our SUT used to be measured against it, target 95%), and the process's CPU time
   per sample while the query is issued (on a busy machine samples/s swings by tens of percent
   from run to run; CPU time much less).
2. Server: the highest target QPS whose run stays VALID with a 15 ms p99 latency bound, through
   our Server SUT (issue only enqueues, a batcher thread completes), next to the bare deque SUT's.
   Target: at or above the bare deque SUT's highest VALID target.

Every LoadGen test runs in its own spawned process (LoadGen is process-global). Offline uses
ResNet50 by default: its payload is 4 bytes like the bare SUT's, and the Offline SUT orders the
samples so that batches are views of the library; BERT's reference payload is 3 KiB a sample.
Server uses BERT by default: a Server batch gathers scattered samples, 9 KiB each for BERT but
588 KiB for ResNet50, which at 40k samples/s would need 24 GB/s of copying.

    .venv/bin/python benchmarks/harness_overhead.py [--benchmark resnet50] [--server-benchmark bert]
        [--only offline|server]
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

OFFLINE_TARGET_FRACTION = 0.90  # of the bare pooled SUT (LoadGen's ceiling)
POOL_SIZE = 1024
SERVER_LATENCY_MS = 15


def _load() -> str:
    return "load average " + " ".join(f"{v:.2f}" for v in os.getloadavg())


class IssueCpu:
    """CPU time of the process (all threads, LoadGen's too) while an Offline query's issue
    callback runs, per sample: what the SUT and LoadGen spend on each sample, much less
    sensitive to other work on the machine than samples/s."""

    def __init__(self) -> None:
        self.cpu_s = 0.0
        self.samples = 0

    def wrap(self, issue: Any, *, method: bool = False) -> Any:
        def timed(*args: Any) -> None:
            ids = args[1] if method else args[0]
            began = time.process_time()
            issue(*args)
            self.cpu_s += time.process_time() - began
            self.samples += len(ids)

        return timed

    def per_sample_ns(self) -> float | None:
        return self.cpu_s / self.samples * 1e9 if self.samples else None


def in_child(function: Any, *args: Any) -> Any:
    """Run `function(*args)` in a fresh spawned process (one LoadGen test per process)."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        return pool.submit(function, *args).result(timeout=600)


def bare_run(
    benchmark: str,
    scenario: str,
    outdir: str,
    overrides: dict[str, float],
    pooled: bool = False,
) -> dict[str, Any]:
    """A bare FastSUT that does nothing but complete samples with a 4-byte payload.

    Offline completes each query inside the issue callback with one QuerySamplesComplete call;
    Server is the minimal threaded design (the issue callback appends to a deque, one thread
    drains it and completes), to show what this machine allows at the moment of the run.
    `pooled`: POOL_SIZE responses are made before the test and reused, only their ids set,
    completing POOL_SIZE samples a call (as our SUT does).
    """
    import collections
    import itertools
    import threading

    import mlperf_loadgen as lg
    import numpy as np

    from mlperf_mig.harness import parse_detail_log
    from mlperf_mig.harness.result import latencies
    from mlperf_mig.workloads import get_workload

    model = get_workload(benchmark).conf_model_name
    conf = Path(outdir) / "user.conf"
    conf.write_text("".join(f"{model}.{scenario}.{k} = {v}\n" for k, v in overrides.items()))
    settings = lg.TestSettings()
    if settings.FromConfig(str(conf), model, scenario) != 0:
        raise RuntimeError("LoadGen rejected the benchmark's user.conf")
    settings.scenario = getattr(lg.TestScenario, scenario)
    settings.mode = lg.TestMode.PerformanceOnly
    payload = np.zeros(1, dtype=np.int32)
    address = payload.ctypes.data
    queue: collections.deque[list[int]] = collections.deque()
    wakeup = threading.Event()
    stopping = threading.Event()

    pool = [lg.QuerySampleResponse(0, address, 4) for _ in range(POOL_SIZE if pooled else 0)]

    def complete(ids: list[int]) -> None:
        if not pooled:
            response = lg.QuerySampleResponse
            lg.QuerySamplesComplete([response(qid, address, 4) for qid in ids])
            return
        for start in range(0, len(ids), POOL_SIZE):
            chunk = ids[start : start + POOL_SIZE]
            responses = pool[: len(chunk)]
            collections.deque(map(setattr, responses, itertools.repeat("id"), chunk), maxlen=0)
            lg.QuerySamplesComplete(responses)

    def drain() -> None:
        while not stopping.is_set() or queue:
            if not queue:
                wakeup.wait(0.001)
                wakeup.clear()
                continue
            ids: list[int] = []
            while queue:
                ids.extend(queue.popleft())
            complete(ids)

    def enqueue(ids: list[int], indices: list[int]) -> None:
        queue.append(ids)
        wakeup.set()

    threaded = scenario == "Server"
    thread = threading.Thread(target=drain, daemon=True)
    if threaded:
        thread.start()
    log = lg.LogSettings()
    log.log_output.outdir = outdir
    log.log_output.copy_summary_to_stdout = False
    log.enable_trace = False
    issue_cpu = IssueCpu()
    issue = enqueue if threaded else issue_cpu.wrap(lambda ids, indices: complete(ids))
    sut = lg.ConstructFastSUT(issue, lambda: None)
    qsl = lg.ConstructQSL(1024, 64, lambda indices: None, lambda indices: None)
    lg.StartTestWithLogSettings(sut, qsl, settings, log, str(Path(outdir) / "audit.config"))
    stopping.set()
    if threaded:
        thread.join()
    lg.DestroyQSL(qsl)
    lg.DestroyFastSUT(sut)
    records = parse_detail_log(outdir)
    key = (
        "result_samples_per_second" if scenario == "Offline" else "result_scheduled_samples_per_sec"
    )
    return {
        "issue_cpu_ns_per_sample": issue_cpu.per_sample_ns(),
        "validity": records["result_validity"],
        "throughput": float(records[key]),
        "latency_ns": latencies(records, scenario),
    }


def harness_run(
    benchmark: str,
    scenario: str,
    outdir: str,
    overrides: dict[str, float],
    batch: int,
    window_ms: float | None,
) -> dict[str, Any]:
    """Our harness with the null backend; returns the result as a dict."""
    from mlperf_mig.harness import InstanceTask, SettingsSpec, run_instance

    task = InstanceTask(
        benchmark=benchmark,
        loadgen_scenario=scenario,
        outdir=outdir,
        settings=SettingsSpec(overrides=overrides),
        batch_size=batch,
        batch_window_ms=window_ms,
    )
    from mlperf_mig.harness import sut

    issue_cpu = IssueCpu()
    sut.BatchRunner.run_offline = issue_cpu.wrap(
        sut.BatchRunner.run_offline, method=True
    )  # this child only
    return {**run_instance(task).to_dict(), "issue_cpu_ns_per_sample": issue_cpu.per_sample_ns()}


def offline(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """Alternating triples: bare FastSUT, bare FastSUT with reused responses, ours."""
    rows = []
    overrides = {
        "min_duration": args.duration_ms,
        "target_qps": args.offline_qps,
        "min_query_count": 1,
        "performance_sample_count_override": args.samples,
    }
    for attempt in range(args.repeats):
        bare = {}
        cpu = {}
        for pooled in (False, True):
            bare_dir = root / f"bare-{attempt}-{'pooled' if pooled else 'plain'}"
            bare_dir.mkdir()
            result = in_child(bare_run, args.benchmark, "Offline", str(bare_dir), overrides, pooled)
            bare[pooled] = result["throughput"]
            cpu[pooled] = result["issue_cpu_ns_per_sample"]
        result = in_child(
            harness_run,
            args.benchmark,
            "Offline",
            str(root / f"ours-{attempt}"),
            overrides,
            args.offline_batch,
            None,
        )
        ours = result["throughput"]
        cpu["ours"] = result["issue_cpu_ns_per_sample"]
        rows.append(
            {
                "attempt": attempt,
                "bare_fastsut": bare[False],
                "bare_pooled": bare[True],
                "ours": ours,
                "ratio": ours / bare[False],
                "ratio_pooled": ours / bare[True],
                "cpu_ns_per_sample": {
                    "bare": cpu[False],
                    "bare_pooled": cpu[True],
                    "ours": cpu["ours"],
                },
            }
        )
        print(
            f"  offline {attempt}: bare {bare[False]:>11,.0f}  bare pooled {bare[True]:>11,.0f}  "
            f"ours {ours:>11,.0f} samples/s; CPU in the issue callback: bare pooled "
            f"{cpu[True]:.0f} ns, ours {cpu['ours']:.0f} ns a sample ({_load()})",
            flush=True,
        )
    best = {key: max(r[key] for r in rows) for key in ("bare_fastsut", "bare_pooled", "ours")}
    ratio = best["ours"] / best["bare_pooled"]
    return {
        "attempts": rows,
        "best_bare_samples_per_s": best["bare_fastsut"],
        "best_bare_pooled_samples_per_s": best["bare_pooled"],
        "best_ours_samples_per_s": best["ours"],
        "ratio_of_best": best["ours"] / best["bare_fastsut"],
        "median_pair_ratio": statistics.median(r["ratio"] for r in rows),
        "ratio_of_best_pooled": best["ours"] / best["bare_pooled"],
        "median_pair_ratio_pooled": statistics.median(r["ratio_pooled"] for r in rows),
        "target": OFFLINE_TARGET_FRACTION,
        "met": ratio >= OFFLINE_TARGET_FRACTION,
        "cpu_ratio_pooled": statistics.median(r["cpu_ns_per_sample"]["bare_pooled"] for r in rows)
        / statistics.median(r["cpu_ns_per_sample"]["ours"] for r in rows),
        "load_average": os.getloadavg(),
    }


def server(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    rows = []
    highest_valid = highest_bare = 0
    for qps in args.server_qps:
        overrides = {
            "min_duration": args.duration_ms,
            "target_qps": qps,
            "target_latency": SERVER_LATENCY_MS,
            "min_query_count": 1024,
            "performance_sample_count_override": 64,
        }
        result = in_child(
            harness_run,
            args.server_benchmark,
            "Server",
            str(root / f"server-{qps}"),
            overrides,
            args.server_batch,
            args.window_ms,
        )
        bare_dir = root / f"bare-server-{qps}"
        bare_dir.mkdir()
        bare = in_child(bare_run, args.server_benchmark, "Server", str(bare_dir), overrides)
        p99_ms = result["latency_ns"].get("99.00", 0) / 1e6
        bare_p99_ms = bare["latency_ns"].get("99.00", 0) / 1e6
        rows.append(
            {
                "target_qps": qps,
                "validity": result["validity"],
                "p99_ms": round(p99_ms, 3),
                "bare_validity": bare["validity"],
                "bare_p99_ms": round(bare_p99_ms, 3),
            }
        )
        print(
            f"  server {qps:>7}: ours {result['validity']:<7} p99 {p99_ms:8.3f} ms | bare deque "
            f"SUT {bare['validity']:<7} p99 {bare_p99_ms:8.3f} ms ({_load()})",
            flush=True,
        )
        if result["validity"] == "VALID":
            highest_valid = max(highest_valid, qps)
        if bare["validity"] == "VALID":
            highest_bare = max(highest_bare, qps)
    return {
        "runs": rows,
        "highest_valid_qps": highest_valid,
        "bare_highest_valid_qps": highest_bare,
        "latency_bound_ms": SERVER_LATENCY_MS,
        "met": highest_valid >= highest_bare,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--benchmark", default="resnet50", help="Offline benchmark (resnet50)")
    parser.add_argument("--server-benchmark", default="bert", help="Server benchmark (bert)")
    parser.add_argument("--duration-ms", type=int, default=3000, help="min_duration of every run")
    parser.add_argument("--offline-qps", type=float, default=400_000, help="Offline expected QPS")
    parser.add_argument(
        "--offline-batch",
        type=int,
        default=1024,
        help="our Offline batch size (a whole-GPU recipe's)",
    )
    parser.add_argument(
        "--samples", type=int, default=1024, help="performance sample count of our Offline runs"
    )
    parser.add_argument("--server-batch", type=int, default=32, help="our Server batch size")
    parser.add_argument("--window-ms", type=float, default=1.0, help="Server batching window")
    parser.add_argument("--repeats", type=int, default=2, help="Offline attempts (best counts)")
    parser.add_argument(
        "--server-qps",
        type=int,
        nargs="+",
        default=[60_000, 90_000, 120_000, 150_000],
    )
    parser.add_argument("--only", choices=("offline", "server"), help="run only one part")
    parser.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = parser.parse_args()
    print(
        f"harness overhead, null backend, Offline {args.benchmark}, Server {args.server_benchmark}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    started = time.monotonic()
    report: dict[str, Any] = {
        "offline_benchmark": args.benchmark,
        "server_benchmark": args.server_benchmark,
    }
    with tempfile.TemporaryDirectory(prefix="harness-overhead-") as tmp:
        root = Path(tmp)
        if args.only in (None, "offline"):
            report["offline"] = off = offline(args, root)
            print(
                f"Offline: ours {off['best_ours_samples_per_s']:,.0f} samples/s against the bare "
                f"FastSUT with reused responses {off['best_bare_pooled_samples_per_s']:,.0f} "
                f"samples/s (LoadGen's ceiling): {off['ratio_of_best_pooled']:.1%} (median of the "
                f"alternating triples {off['median_pair_ratio_pooled']:.1%}) (target >= "
                f"{OFFLINE_TARGET_FRACTION:.0%}: {'met' if off['met'] else 'NOT met'}); against "
                f"the bare FastSUT making a response per sample "
                f"({off['best_bare_samples_per_s']:,.0f} samples/s): {off['ratio_of_best']:.1%} "
                f"(median {off['median_pair_ratio']:.1%}); {_load()}",
                flush=True,
            )
            print(
                f"Offline, CPU time a sample while the query is issued (all threads; what other "
                f"work on the machine disturbs least): ours at {off['cpu_ratio_pooled']:.1%} of "
                f"the bare pooled SUT's rate (medians)",
                flush=True,
            )
        if args.only in (None, "server"):
            report["server"] = srv = server(args, root)
            print(
                f"Server: highest VALID target at {SERVER_LATENCY_MS} ms: "
                f"{srv['highest_valid_qps']:,} QPS, the bare deque SUT's on this machine now: "
                f"{srv['bare_highest_valid_qps']:,} QPS (target: at or above it: "
                f"{'met' if srv['met'] else 'NOT met'}); {_load()}"
            )
    print(f"took {time.monotonic() - started:.0f} s; {_load()}")
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
