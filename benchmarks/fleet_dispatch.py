"""A whole system's dispatch: 8 emulated A100-SXM4-80GB x 7x 1g.10gb = 56 instances, null
backend, ResNet50, unified mode (one LoadGen for the system, as NVIDIA's DGX-A100 MIG result)
and independent mode (56 LoadGens, the reference).

NVIDIA's `DGX-A100_A100-SXM-80GB-MIG_56x1g.10gb` (v1.1) did 283,469 samples/s Offline and only
70,007 QPS Server on the real GPUs, where its dispatcher, not the GPUs, was the limit. Targets
on this machine (the null backend does no inference, so what is measured is the harness):
    Offline   unified samples/s >= 300,000
    Server    the highest target QPS whose run stays VALID at ResNet50's 15 ms bound, unified,
              >= 70,007
    memory    peak memory of the whole run (runner and every worker, proportional set size) per
              extra instance <= 64 MiB: (peak of 56 instances - peak of 7) / 49

Offline: a sizing run at `--offline-qps`, then a measured run asking 1.5x what it delivered (a
query done before its min_duration is INVALID and counts the test's fixed costs; such a run is
repeated, at most twice, asking 1.5x what it delivered). Server: the
target doubles from `--server-qps` while the run stays VALID, then `--bisect` halvings between the
last VALID and the first INVALID target. In independent mode every LoadGen gets the system's
target / 56. Every run's validity is printed; the load average is printed at start and end.

    .venv/bin/python benchmarks/fleet_dispatch.py [--gpus 8] [--duration-ms 2000] [--bisect 3]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

OFFLINE_TARGET = 300_000
SERVER_TARGET = 70_007
MEMORY_TARGET_MIB = 64
SIZING_MARGIN = 1.5
SERVER_LATENCY_NS = 15_000_000  # ResNet50 Server's bound in mlperf.conf
MODES = ("unified", "independent")


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


def one_run(
    folder: Path,
    name: str,
    *,
    gpus: int,
    mode: str,
    scenario: str,
    target_qps: float,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """One null-backend run of study layout 8 on `gpus` emulated GPUs: the system's result."""
    import mlperf_mig

    per_loadgen = target_qps if mode == "unified" else target_qps / (7 * gpus)
    settings: dict[str, float] = {"min_duration": args.duration_ms, "target_qps": per_loadgen}
    if scenario == "Server":
        settings["target_latency"] = SERVER_LATENCY_NS // 1_000_000
    with PeakMemory() as memory:
        result = mlperf_mig.run(
            scenario=8,
            gpu="A100-SXM4-80GB",
            gpu_count=gpus,
            emulate=True,
            backend="null",
            loadgen_scenario=scenario,
            mode=mode,
            accuracy=False,
            progress=False,
            telemetry=False,
            outdir=folder / name,
            settings=settings,
            timeout_s=args.timeout_s,
        )
    rates = [i.throughput for i in result.instances if i.throughput is not None]
    return {
        "samples_per_s": float(result.total_throughput or 0.0),
        "target_qps": target_qps,
        "valid": bool(result.all_valid),
        "ok": bool(result.ok),
        "fastest_loadgen": float(result.total_throughput or 0.0)
        if mode == "unified"
        else max(rates, default=0.0),
        "peak_mib": memory.peak_mib,
    }


def _word(run: dict[str, Any]) -> str:
    return ("VALID" if run["valid"] else "INVALID") + ("" if run["ok"] else ", a worker FAILED")


def offline(folder: Path, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    sizing = one_run(
        folder,
        f"offline-{mode}-sizing",
        gpus=args.gpus,
        mode=mode,
        scenario="Offline",
        target_qps=args.offline_qps,
        args=args,
    )
    rate = (
        sizing["samples_per_s"] if mode == "unified" else sizing["fastest_loadgen"] * 7 * args.gpus
    )
    measured = one_run(
        folder,
        f"offline-{mode}",
        gpus=args.gpus,
        mode=mode,
        scenario="Offline",
        target_qps=SIZING_MARGIN * rate,
        args=args,
    )
    for retry in range(
        2
    ):  # a query done before min_duration (INVALID, faster than asked): ask more
        if measured["valid"] or measured["samples_per_s"] <= measured["target_qps"]:
            break
        measured = one_run(
            folder,
            f"offline-{mode}-{retry}",
            gpus=args.gpus,
            mode=mode,
            scenario="Offline",
            target_qps=SIZING_MARGIN * measured["samples_per_s"],
            args=args,
        )
    print(
        f"  Offline {mode}: sizing {sizing['samples_per_s']:,.0f} ({_word(sizing)}), measured "
        f"{measured['samples_per_s']:,.0f} samples/s ({_word(measured)}), peak memory "
        f"{measured['peak_mib']:,.0f} MiB",
        flush=True,
    )
    return measured


def server(folder: Path, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    """The highest VALID Server target found by doubling then bisecting."""
    valid, invalid, target, runs = 0.0, None, args.server_qps, []

    def passes(target: float) -> bool:
        run = one_run(
            folder,
            f"server-{mode}-{len(runs)}",
            gpus=args.gpus,
            mode=mode,
            scenario="Server",
            target_qps=target,
            args=args,
        )
        runs.append(run)
        print(f"  Server {mode} target {target:,.0f} QPS: {_word(run)}", flush=True)
        return bool(run["valid"] and run["ok"])

    while invalid is None and target <= args.server_max_qps:
        if passes(target):
            valid, target = target, target * 2
        else:
            invalid = target
    for _ in range(args.bisect if invalid is not None else 0):
        target = (valid + invalid) / 2 if valid else invalid / 2
        if passes(target):
            valid = target
        else:
            invalid = target
    return {"highest_valid_qps": valid, "first_invalid_qps": invalid, "runs": runs}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=8, help="emulated A100s, 7x 1g.10gb each")
    parser.add_argument("--duration-ms", type=int, default=2000, help="min_duration of every run")
    parser.add_argument(
        "--offline-qps", type=float, default=400_000, help="target of the sizing run"
    )
    parser.add_argument("--server-qps", type=float, default=20_000, help="first Server target")
    parser.add_argument(
        "--server-max-qps", type=float, default=2_000_000, help="stop doubling here"
    )
    parser.add_argument("--bisect", type=int, default=3, help="halvings after the first INVALID")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--skip-server", action="store_true", help="Offline and memory only")
    parser.add_argument(
        "--timeout-s", type=float, default=600.0, help="deadline of each LoadGen test"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = parser.parse_args()
    print(
        f"fleet dispatch: {args.gpus} emulated A100-SXM4-80GB x 7x 1g.10gb = {7 * args.gpus} "
        f"instances, null backend, ResNet50, {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.2f}",
        flush=True,
    )
    started = time.monotonic()
    report: dict[str, Any] = {"gpus": args.gpus, "instances": 7 * args.gpus}
    with tempfile.TemporaryDirectory(prefix="fleet-dispatch-") as tmp:
        folder = Path(tmp)
        for mode in args.modes:
            report[mode] = {"offline": offline(folder, mode, args)}
            if not args.skip_server:
                report[mode]["server"] = server(folder, mode, args)
        one_gpu = one_run(
            folder,
            "memory-one-gpu",
            gpus=1,
            mode="unified",
            scenario="Offline",
            target_qps=args.offline_qps / args.gpus,
            args=args,
        )
    lines = []
    if "unified" in report:
        offline_rate = report["unified"]["offline"]["samples_per_s"]
        lines.append(
            f"Offline unified {offline_rate:,.0f} samples/s (target >= {OFFLINE_TARGET:,}): "
            f"{'met' if offline_rate >= OFFLINE_TARGET else 'NOT met'}"
        )
        if "server" in report["unified"]:
            qps = report["unified"]["server"]["highest_valid_qps"]
            lines.append(
                f"Server unified highest VALID {qps:,.0f} QPS at 15 ms (target >= {SERVER_TARGET:,}): "
                f"{'met' if qps >= SERVER_TARGET else 'NOT met'}"
            )
        extra = (report["unified"]["offline"]["peak_mib"] - one_gpu["peak_mib"]) / (
            7 * (args.gpus - 1) or 1
        )
        report["memory_per_extra_instance_mib"] = extra
        lines.append(
            f"peak memory {report['unified']['offline']['peak_mib']:,.0f} MiB for {7 * args.gpus} "
            f"instances, {one_gpu['peak_mib']:,.0f} MiB for 7: {extra:,.1f} MiB per extra instance "
            f"(target <= {MEMORY_TARGET_MIB}): {'met' if extra <= MEMORY_TARGET_MIB else 'NOT met'}"
        )
    if "independent" in report:
        ind = report["independent"]
        lines.append(
            f"reference, independent: Offline {ind['offline']['samples_per_s']:,.0f} samples/s"
            + (
                f", Server highest VALID {ind['server']['highest_valid_qps']:,.0f} QPS"
                if "server" in ind
                else ""
            )
        )
    print("\n".join(lines))
    print(
        f"took {time.monotonic() - started:.0f} s, load average {os.getloadavg()[0]:.2f} at the end"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
