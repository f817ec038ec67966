"""Resident memory of N emulated ResNet50 instances in unified mode (N = 1, 2, 4, 7).

Unified mode keeps the sample set once, in shared memory, instead of one copy per instance. This
runs `mlperf_mig.run(mode="unified")` on N emulated 1g.10gb instances of the A100-80GB with the
official performance sample count (1024 ResNet50 samples, 616.6 MB) and samples the memory of
every process of the run (coordinator, instance workers, resource tracker) every 0.2 s:
    PSS  proportional set size: shared pages split between the processes that map them, so the
         shared sample set counts once; the sum over processes is the run's real footprint
    RSS  resident set size: shared pages counted in every process that touched them
The peak PSS sum is reported per N; the cost of an extra instance is the slope between N values,
to be compared with the size of the sample set. At the peak, each process's PSS is split (from
smaps_rollup) into anonymous memory (its own heap: interpreter, imported modules, ONNX Runtime's
arena and buffers), file-backed memory (shared libraries and the mapped engine weights, split
between the processes mapping them) and shared memory (the sample set); the breakdown printed
is that of the largest instance worker at the largest N. Then one worker's steps are replayed
in a process started as the run's workers are (the runner's Supervisor context: a fork of the fork
server where the runner uses one, else a spawned interpreter): interpreter, numpy, the worker's own
modules, ONNX Runtime, the session on the cached engine (opened by the backend itself, with the
run's thread count, so with its session options and samples per run), its first and later
batches, with the process's private anonymous memory after each (anonymous pages that no other
process maps: what this worker adds to the machine; pages it still shares with the fork server
are paid once for all workers). The last lines say where an extra instance's MiB go:
the replay's steps grouped into Python (interpreter, numpy, modules), ONNX Runtime (library and
session) and activations (the arena after the batches), against the largest worker's PSS by kind.

    .venv/bin/python benchmarks/instance_memory.py [--counts 1,2,4,7] [--variant full]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path

import mlperf_mig
from mlperf_mig._table import text_table

MIB = 2**20
SAMPLE_BYTES = 3 * 224 * 224 * 4


def _children(root: int) -> list[int]:
    """Every live descendant of process `root`."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        kids = [pid for pid, ppid in parents.items() if ppid == parent]
        found += kids
        frontier += kids
    return found


KINDS = ("Pss_Anon:", "Pss_File:", "Pss_Shmem:")


def _memory_kib(pid: int) -> dict[str, int]:
    """PSS, RSS and PSS by kind of one process in KiB, from /proc/<pid>/smaps_rollup."""
    values = dict.fromkeys(("Pss:", "Rss:", *KINDS), 0)
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            key, _, rest = line.partition(" ")
            if key in values:
                values[key] = int(rest.split()[0])
    except OSError:
        pass
    return values


def _is_worker(pid: int) -> bool:
    """An instance worker (it has loaded ONNX Runtime), not the coordinator or a helper."""
    try:
        return "onnxruntime" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


class PeakSampler(threading.Thread):
    """Samples the summed PSS and RSS of this process's descendants until stopped."""

    def __init__(self, interval_s: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.interval_s = interval_s
        self.peak_pss_kib = 0
        self.peak_rss_kib = 0
        self.peak_processes = 0
        self.peak_worker: dict[str, int] = {}
        self._stopping = threading.Event()

    def run(self) -> None:
        me = os.getpid()
        while not self._stopping.wait(self.interval_s):
            pids = _children(me)
            memory = {pid: _memory_kib(pid) for pid in pids}
            pss = sum(m["Pss:"] for m in memory.values())
            rss = sum(m["Rss:"] for m in memory.values())
            if pss > self.peak_pss_kib:
                self.peak_pss_kib, self.peak_rss_kib, self.peak_processes = pss, rss, len(pids)
                workers = [memory[pid] for pid in pids if _is_worker(pid)]
                self.peak_worker = max(workers, key=lambda m: m["Pss:"], default={})

    def stop(self) -> None:
        self._stopping.set()
        self.join()


def _private_anon_kib() -> int:
    """This process's anonymous memory that no other process maps, in KiB: per mapping, its
    anonymous pages up to its privately dirtied ones (copy-on-write pages still shared with a
    parent are left out)."""
    total = 0
    anonymous = private = 0
    for line in Path("/proc/self/smaps").read_text().splitlines():
        key, _, rest = line.partition(" ")
        if key == "Anonymous:":
            anonymous = int(rest.split()[0])
        elif key == "Private_Dirty:":
            private = int(rest.split()[0])
        elif key == "VmFlags:":  # the last field of a mapping
            total += min(anonymous, private)
            anonymous = private = 0
    return total


def replay_steps(engine_json: str, threads: int | None) -> list[tuple[str, int]]:
    """A worker's steps in this process, started as the workers are: (step, private anonymous
    KiB after it)."""
    import json

    steps = [("interpreter", _private_anon_kib())]
    import numpy as np

    steps.append(("+ numpy", _private_anon_kib()))
    import mlperf_mig.harness.instance
    import mlperf_mig.runner.unified
    import mlperf_mig.runner.worker  # noqa: F401

    steps.append(("+ worker modules", _private_anon_kib()))
    import onnxruntime  # noqa: F401

    steps.append(("+ onnxruntime import", _private_anon_kib()))
    from mlperf_mig.engines import open_backend
    from mlperf_mig.engines.spec import EngineSpec

    spec = EngineSpec.from_dict(json.loads(Path(engine_json).read_text())["spec"])
    backend = open_backend(spec, threads=threads)
    steps.append(("+ session (mapped weights)", _private_anon_kib()))
    batch = spec.max_batch_size
    feeds = {
        t.name: np.zeros((batch, *t.shape[1:]), dtype=t.dtype) for t in backend.benchmark.inputs
    }
    backend.run(feeds)
    per_run = min(batch, backend.samples_per_run or batch)
    steps.append((f"+ first batch of {batch} (arena: runs of {per_run})", _private_anon_kib()))
    for _ in range(3):
        backend.run(feeds)
    steps.append(("+ three more batches", _private_anon_kib()))
    return steps


def _engine_of(outdir: Path) -> tuple[Path, int | None] | None:
    """The engine an instance worker of the run in `outdir` loaded (its .json description), and
    the intra-op threads it loaded it with (None: ONNX Runtime's default)."""
    import re

    pattern = r"loaded (\S+?\.onnx)(?:\.cpu-\w+/model\.onnx)? on \S+ \(threads (\w+)"
    for log in sorted(outdir.rglob("worker.log")):
        match = re.search(pattern, log.read_text())
        if match:
            threads = int(match.group(2)) if match.group(2).isdigit() else None
            return Path(match.group(1) + ".json"), threads
    return None


def measure(count: int, *, variant: str, sample_count: int, outdir: Path) -> dict[str, float]:
    sampler = PeakSampler()
    sampler.start()
    began = time.monotonic()
    result = mlperf_mig.run(
        f"{count}x1g.10gb",
        mode="unified",
        backend="onnxruntime",
        variant=variant,
        accuracy=False,
        progress=False,
        outdir=outdir / f"n{count}",
        settings={"performance_sample_count_override": sample_count},
    )
    sampler.stop()
    if not result.ok:
        raise SystemExit(f"the run with {count} instances failed:\n{result.table()}")
    return {
        "instances": count,
        "processes": sampler.peak_processes,
        "peak PSS MiB": sampler.peak_pss_kib / 1024,
        "peak RSS MiB": sampler.peak_rss_kib / 1024,
        "samples/s": result.total_throughput,
        "wall s": time.monotonic() - began,
        "worker": sampler.peak_worker,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="1,2,4,7", help="instance counts (default 1,2,4,7)")
    parser.add_argument("--variant", default="full", choices=("full", "tiny"))
    parser.add_argument("--sample-count", type=int, default=1024, help="samples in the shared set")
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    sample_set_mib = args.sample_count * SAMPLE_BYTES / MIB
    rows = []
    with tempfile.TemporaryDirectory(prefix="instance-memory-") as folder:
        for count in counts:
            row = measure(
                count, variant=args.variant, sample_count=args.sample_count, outdir=Path(folder)
            )
            if rows:
                previous = rows[-1]
                row["MiB per extra instance"] = (row["peak PSS MiB"] - previous["peak PSS MiB"]) / (
                    count - previous["instances"]
                )
            rows.append(row)
            print(f"{count} instances: peak PSS {row['peak PSS MiB']:.0f} MiB", flush=True)
        engine = _engine_of(Path(folder) / f"n{counts[-1]}")
    columns = [
        "instances",
        "processes",
        "peak PSS MiB",
        "peak RSS MiB",
        "MiB per extra instance",
        "samples/s",
        "wall s",
    ]
    print(
        f"\nResNet50 ({args.variant}) on ONNX Runtime CPU, unified mode, emulated 1g.10gb instances"
    )
    print(f"shared sample set: {args.sample_count} samples = {sample_set_mib:.1f} MiB (held once)")
    print(text_table(rows, columns))
    steps: list[tuple[str, int]] = []
    if engine is not None:
        from concurrent.futures import ProcessPoolExecutor

        from mlperf_mig.runner.supervisor import Supervisor

        engine_json, threads = engine
        with ProcessPoolExecutor(1, mp_context=Supervisor().context) as pool:
            steps = pool.submit(replay_steps, str(engine_json), threads).result()
        print(
            f"one worker's private anonymous memory, step by step ({engine_json.name}, "
            f"threads {threads or 'auto'}):"
        )
        previous = 0
        for step, kib in steps:
            print(f"    {step:<40} {kib / 1024:7.1f} MiB  ({(kib - previous) / 1024:+.1f})")
            previous = kib
    worker = rows[-1]["worker"]
    if worker:
        parts = ", ".join(f"{kind[4:-1].lower()} {worker[kind] / 1024:.1f}" for kind in KINDS)
        print(
            f"largest instance worker at {rows[-1]['instances']} instances: PSS "
            f"{worker['Pss:'] / 1024:.1f} MiB = {parts} MiB (RSS {worker['Rss:'] / 1024:.1f} MiB)"
        )
    if steps and len(rows) > 1:
        print(where_it_goes(rows[-1]["MiB per extra instance"], rows[-1]["instances"], steps))


def where_it_goes(per_instance_mib: float, count: int, steps: list[tuple[str, int]]) -> str:
    """The cost of an extra instance split into the replayed worker's parts and the rest.

    `steps` are replay_steps' (interpreter, numpy, modules, onnxruntime, session, batches...).
    """
    python_mib = steps[2][1] / 1024
    onnxruntime_mib = (steps[4][1] - steps[2][1]) / 1024
    activations_mib = (steps[-1][1] - steps[4][1]) / 1024
    rest = per_instance_mib - python_mib - onnxruntime_mib - activations_mib
    lines = [
        f"where an extra instance's {per_instance_mib:.1f} MiB go (slope up to {count} instances):",
        f"    {'Python: interpreter, numpy, worker modules':<52} {python_mib:6.1f} MiB",
        f"    {'ONNX Runtime: library and session':<52} {onnxruntime_mib:6.1f} MiB",
        f"    {'activations: ONNX Runtime arena after the batches':<52} {activations_mib:6.1f} MiB",
        f"    {'the rest':<52} {rest:6.1f} MiB",
        "      (worker buffers outside the replay, such as the batch gather buffer and pipes;",
        "      private file pages; the coordinator's share per instance)",
        "    (the mapped weights, libraries and sample set are shared: N instances split them)",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
