"""What the host says about the run's worker processes and the CPU package's energy.

Each worker's CPU use and resident memory come from /proc (`/proc/<pid>/stat` utime + stime in
clock ticks, `/proc/<pid>/status` VmRSS): the runner follows the workers the Supervisor starts
(`observe_workers`), with no library of its own to install. CPU use is given as a percentage of
the CPU time the instance may use (an emulated slice's budget: its "utilisation"). Package energy comes from
Linux powercap (RAPL, `/sys/class/powercap/intel-rapl:N/energy_uj`, a counter in µJ that wraps at
`max_energy_range_uj`); where the machine does not expose it (VMs, containers, other CPUs, no read
permission) there is none, and the run says why.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path

POWERCAP = Path("/sys/class/powercap")
_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process `pid` so far (None once it is gone)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()  # the name may hold spaces and ')'
    return (int(fields[11]) + int(fields[12])) / _TICKS


def process_rss_mib(pid: int) -> float | None:
    """Resident memory of process `pid` in MiB (None once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


class WorkerWatch:
    """The worker processes of a round by instance name: `worker_started` / `worker_ended` are
    called by the Supervisor (runner thread), `read` by the sampler thread."""

    def __init__(self, instances: Mapping[str, float]) -> None:
        self._cpus = dict(instances)  # instance -> the CPUs it may use (its emulated budget)
        self._pids: dict[str, int] = {}
        self._last: dict[str, tuple[float, float]] = {}  # instance -> (wall time, CPU seconds)
        self._lock = threading.Lock()

    def worker_started(self, name: str, pid: int) -> None:
        if name in self._cpus:
            with self._lock:
                self._pids[name] = pid
                self._last.pop(name, None)

    def worker_ended(self, name: str) -> None:
        with self._lock:
            self._pids.pop(name, None)

    def columns(self) -> list[str]:
        return [f"{name}:{what}" for name in self._cpus for what in ("cpu_pct", "rss_mib")]

    def read(self) -> dict[str, float | None]:
        """Each instance's CPU use since the last reading (% of its CPUs) and its resident memory."""
        with self._lock:
            pids = dict(self._pids)
        row: dict[str, float | None] = {}
        now = time.monotonic()
        for name, cpus in self._cpus.items():
            pid = pids.get(name)
            seconds = None if pid is None else process_cpu_seconds(pid)
            rss = None if pid is None else process_rss_mib(pid)
            previous = self._last.get(name)
            percent = None
            if seconds is not None and previous is not None and now > previous[0]:
                percent = max(0.0, 100.0 * (seconds - previous[1]) / ((now - previous[0]) * cpus))
            if seconds is not None:
                self._last[name] = (now, seconds)
            row[f"{name}:cpu_pct"] = percent
            row[f"{name}:rss_mib"] = rss
        return row


class PackageEnergy:
    """The CPU packages' RAPL energy since the first reading, summed over packages (J), each
    counter's wraps undone; `why_not` says why there is none."""

    COLUMN = "cpu_package:energy_j"

    def __init__(self, root: Path = POWERCAP) -> None:
        self._zones: list[tuple[Path, float]] = []  # counter file, wrap range in µJ
        self.why_not: str | None = None
        self.source = ""
        self._previous: list[float] | None = None
        self._total_uj = 0.0
        if not root.is_dir():
            self.why_not = (
                f"not exposed by this machine (no {root}: VM, container or no powercap driver)"
            )
            return
        packages = sorted(p for p in root.glob("intel-rapl:*") if p.name.count(":") == 1)
        if not packages:
            self.why_not = f"no RAPL package zone under {root}"
            return
        for zone in packages:
            try:
                (zone / "energy_uj").read_text()
                wrap = float((zone / "max_energy_range_uj").read_text())
            except (OSError, ValueError) as exc:
                self.why_not = f"{zone / 'energy_uj'} is not readable ({getattr(exc, 'strerror', None) or exc}; often root only)"
                self._zones = []
                return
            self._zones.append((zone / "energy_uj", wrap))
        self.source = f"Linux powercap RAPL, {len(self._zones)} package zone(s)"

    @property
    def available(self) -> bool:
        return bool(self._zones)

    def columns(self) -> list[str]:
        """The one column `read` returns (a sampler's Source has both)."""
        return [self.COLUMN]

    def read(self) -> dict[str, float | None]:
        """Energy of the packages since the first reading (J), each counter's wraps undone."""
        values = []
        for counter, _ in self._zones:
            try:
                values.append(float(counter.read_text()))
            except (OSError, ValueError):
                return {self.COLUMN: None}
        if self._previous is None:
            self._previous = values
        for slot, ((_, wrap), value) in enumerate(zip(self._zones, values)):
            delta = value - self._previous[slot]
            self._total_uj += delta if delta >= 0 else delta + wrap  # the counter wrapped
        self._previous = values
        return {self.COLUMN: self._total_uj / 1e6}
