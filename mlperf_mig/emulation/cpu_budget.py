"""CPU budgets of emulated MIG instances: CPU time in proportion to compute slices, on any CPU.

A MIG instance of s compute slices of a G-slice GPU gets s/G of the GPU's SMs. An emulated
instance gets s/G of the CPU time the whole GPU stands for (by default all the CPUs given to that
GPU), also when instances outnumber cores: on 2 CPUs a 1g.10gb of an A100 gets 2/7 of a CPU, a
7g.80gb both CPUs. CPU affinity alone cannot do that (a 1g and a 2g sharing a core get half each),
so each budget is enforced, in this order of preference:

    whole CPUs    the share is a whole number of CPUs the instance has to itself: affinity suffices
    cgroup quota  a CPU cgroup of the worker's own, under the runner's, with a CFS quota of
                  share x period (cgroup v1 `cpu.cfs_quota_us` or v2 `cpu.max`); used where this
                  process may create such a cgroup and move a process into it (probed once)
    duty cycle    inside the worker: after each backend run the worker sleeps until its process
                  CPU time (every thread: the model, LoadGen, Python) is back within its share

Every result says which one was used, and the notes say where a proportion cannot be kept. The
runner never writes to a cgroup other than the ones it creates under its own, and removes them.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import attrs

log = logging.getLogger(__name__)

WHOLE_CPUS = "whole CPUs"
CGROUP_QUOTA = "cgroup quota"
DUTY_CYCLE = "duty cycle"
ENFORCEMENTS = (WHOLE_CPUS, CGROUP_QUOTA, DUTY_CYCLE)
SHARE_ENV = "MLPERF_MIG_CPU_SHARE"
BUDGET_ENV = "MLPERF_MIG_CPU_BUDGET"
CGROUP_PREFIX = "mlperf-mig-"
QUOTA_PERIOD_US = 20_000  # short, so that a throttled instance waits at most a few ms at a time
_DUTY_BURST_S = 0.02  # idle time (barrier, sample loading) earns at most this much CPU time ahead
_probe_lock = threading.Lock()
_probed: tuple[str, str] | None = None


@attrs.frozen(kw_only=True)
class CpuBudget:
    """The CPUs one emulated instance may run on and the CPU time it may use."""

    cpus: tuple[int, ...]  # its CPU affinity
    share: float  # CPU-seconds per second (2/7 of 2 CPUs = 0.571)
    threads: int  # inference threads: enough to use its share, at most its CPUs
    enforced_by: str = attrs.field(validator=attrs.validators.in_(ENFORCEMENTS))


@attrs.frozen(kw_only=True)
class CpuBudgets:
    """The budgets of one emulated GPU's instances, how they are enforced, and what cannot be kept."""

    budgets: tuple[CpuBudget, ...]
    enforcement: str  # CGROUP_QUOTA or DUTY_CYCLE for the instances that need more than affinity
    notes: tuple[str, ...] = ()


def emulated_cpu_budgets(
    compute_slices: Sequence[int],
    gpu_compute_slices: int,
    cpus: Sequence[int],
    *,
    whole_gpu_cpus: float | None = None,
    enforcement: str | None = None,
) -> CpuBudgets:
    """Per-instance CPU budgets of one emulated GPU, in proportion to compute slices.

    The instance with s of the GPU's `gpu_compute_slices` slices gets s/G of `whole_gpu_cpus`
    CPUs' time (default: all of `cpus`). The shares are laid over the sorted CPUs one after the
    other; an instance's affinity is the CPUs under its stretch. `enforcement` None probes this
    machine (a cgroup quota where allowed, else the duty cycle); cluster nodes pass DUTY_CYCLE.
    """
    ordered = sorted(set(cpus))
    if not ordered:
        raise ValueError("no CPUs to emulate the GPU on")
    if gpu_compute_slices <= 0 or any(s <= 0 for s in compute_slices):
        raise ValueError(
            f"compute slices must be positive: {list(compute_slices)} of {gpu_compute_slices}"
        )
    whole = (
        Fraction(len(ordered))
        if whole_gpu_cpus is None
        else Fraction(whole_gpu_cpus).limit_denominator(1000)
    )
    whole = min(whole, Fraction(len(ordered)) * gpu_compute_slices / max(1, sum(compute_slices)))
    if enforcement is None:
        enforcement = quota_support()[0]
    elif enforcement not in (CGROUP_QUOTA, DUTY_CYCLE):
        raise ValueError(
            f"enforcement {enforcement!r}: expected {CGROUP_QUOTA!r} or {DUTY_CYCLE!r}"
        )
    budgets = []
    start = Fraction(0)
    for slices in compute_slices:
        share = whole * slices / gpu_compute_slices
        end = start + share
        first, last = math.floor(start), max(math.floor(start) + 1, math.ceil(end))
        affinity = tuple(ordered[min(i, len(ordered) - 1)] for i in range(first, last))
        # exactly the CPUs under it: affinity alone keeps it, unless a cgroup can also weigh it
        # against other processes as it weighs the others (a busy machine starved a 7g that had
        # no cgroup while the smaller instances were weighted)
        own_whole = share == len(affinity) and start == first and enforcement != CGROUP_QUOTA
        budgets.append(
            CpuBudget(
                cpus=affinity,
                share=round(float(share), 6),
                threads=max(1, min(len(affinity), math.ceil(share))),
                enforced_by=WHOLE_CPUS if own_whole else enforcement,
            )
        )
        start = end
    return CpuBudgets(
        budgets=tuple(budgets), enforcement=enforcement, notes=tuple(_notes(budgets, enforcement))
    )


def _notes(budgets: Sequence[CpuBudget], enforcement: str) -> list[str]:
    notes = []
    if any(b.enforced_by != WHOLE_CPUS for b in budgets):
        how = (
            "a cgroup CPU quota per worker"
            if enforcement == CGROUP_QUOTA
            else "a duty cycle inside each worker (the worker sleeps after each batch until its "
            f"CPU time is within its share; {quota_support()[1] if enforcement == DUTY_CYCLE else ''})"
        )
        notes.append(
            "emulated CPU time in proportion to compute slices, "
            + ", ".join(f"{b.share:.3g} CPU" for b in budgets)
            + f", enforced by {how}"
        )
    small = [b for b in budgets if b.share < 0.1]
    if small:
        notes.append(
            f"proportion not kept: {len(small)} instance(s) get less than 0.1 CPU, below which "
            "the scheduler's and LoadGen's own overhead dominate; give the run more CPUs"
        )
    return notes


# --- cgroup quota -----------------------------------------------------------------------------------
def _own_cpu_cgroup() -> tuple[Path, int] | None:
    """This process's CPU cgroup folder and its version (1 or 2), or None when there is none."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    memberships = {}
    for line in lines:
        _, controllers, path = line.split(":", 2)
        memberships[controllers] = path
    for mount in mounts:
        fields = mount.split()
        sep = fields.index("-")
        fstype, options = (
            fields[sep + 1],
            fields[sep + 3].split(",") if len(fields) > sep + 3 else [],
        )
        root, point = fields[3], fields[4]
        if fstype == "cgroup" and "cpu" in options:
            member = next((p for c, p in memberships.items() if "cpu" in c.split(",")), None)
        elif fstype == "cgroup2":
            member = memberships.get("")
        else:
            continue
        if member is None or not member.startswith(root):
            continue
        folder = Path(point) / member[len(root) :].lstrip("/")
        if folder.is_dir():
            return folder, 1 if fstype == "cgroup" else 2
    return None


def _write_quota(folder: Path, version: int, share: float) -> None:
    """A quota of `share` CPUs, and a weight in proportion to it, four times an ordinary
    process's per CPU: when other processes keep the CPUs busy, the instances still get close to
    their quotas (which cap them) and divide what they get in proportion to their slices."""
    quota = max(1000, round(share * QUOTA_PERIOD_US))
    if version == 1:
        (folder / "cpu.cfs_period_us").write_text(str(QUOTA_PERIOD_US))
        (folder / "cpu.cfs_quota_us").write_text(str(quota))
        (folder / "cpu.shares").write_text(str(max(2, round(4 * 1024 * share))))
    else:
        (folder / "cpu.max").write_text(f"{quota} {QUOTA_PERIOD_US}")
        (folder / "cpu.weight").write_text(str(min(10000, max(1, round(4 * 100 * share)))))


def _probe() -> tuple[str, str]:
    """Whether a worker could have a CPU quota of its own: create a cgroup under ours, give it a
    quota, move a short-lived process into it, remove it again."""
    own = _own_cpu_cgroup()
    if own is None:
        return DUTY_CYCLE, "this process has no CPU cgroup it can see"
    folder, version = own
    probe = folder / f"{CGROUP_PREFIX}probe-{os.getpid()}"
    sleeper = None
    try:
        probe.mkdir()
        _write_quota(probe, version, 0.5)
        sleep = shutil.which("sleep")
        if sleep is None:
            return DUTY_CYCLE, "no `sleep` program to test moving a process into a cgroup"
        sleeper = subprocess.Popen([sleep, "5"])
        (probe / "cgroup.procs").write_text(str(sleeper.pid))
        return CGROUP_QUOTA, f"cgroup v{version} under {folder}"
    except OSError as exc:
        return DUTY_CYCLE, f"no cgroup CPU quota here ({folder} refused: {exc.strerror or exc})"
    finally:
        if sleeper is not None:
            sleeper.kill()
            sleeper.wait()
        with contextlib.suppress(OSError):
            probe.rmdir()


def quota_support() -> tuple[str, str]:
    """(CGROUP_QUOTA or DUTY_CYCLE, why), probed once per process."""
    global _probed
    with _probe_lock:
        if _probed is None:
            _probed = _probe()
            log.info("emulated CPU budgets: %s (%s)", *_probed)
        return _probed


def _worker_cgroup_name(pid: int) -> str:
    return f"{CGROUP_PREFIX}{pid}"


def _pid_alive(text: str) -> bool:
    """Whether the process `text` names still exists (its cgroup may be being set up)."""
    if not text.isdigit():
        return True
    try:
        os.kill(int(text), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_cgroups() -> None:
    """Remove the quota cgroups of workers that have ended (a local:N cluster's actors, whose
    processes Ray ends): only empty ones, of processes that no longer exist."""
    own = _own_cpu_cgroup()
    if own is None:
        return
    for stale in own[0].glob(f"{CGROUP_PREFIX}[0-9]*"):
        if not _pid_alive(stale.name[len(CGROUP_PREFIX) :]):
            with contextlib.suppress(OSError):
                stale.rmdir()  # only an empty cgroup can be removed


def join_quota_cgroup(share: float) -> Path:
    """Move this process into a cgroup of its own, under its current one, with a quota of `share`
    CPUs. Empty ones that earlier workers left (killed before their runner removed them) go."""
    own = _own_cpu_cgroup()
    if own is None:
        raise OSError("no CPU cgroup visible to this process")
    folder, version = own
    remove_stale_cgroups()
    mine = folder / _worker_cgroup_name(os.getpid())
    mine.mkdir(exist_ok=True)
    _write_quota(mine, version, share)
    (mine / "cgroup.procs").write_text(str(os.getpid()))
    return mine


def remove_worker_cgroup(pid: int | None) -> None:
    """Remove the (now empty) quota cgroup of the ended worker `pid`, if it made one."""
    if pid is None:
        return
    own = _own_cpu_cgroup()
    if own is not None:
        with contextlib.suppress(OSError):
            (own[0] / _worker_cgroup_name(pid)).rmdir()


# --- the worker side ------------------------------------------------------------------------------
def budget_env(share: float | None, enforced_by: str | None) -> dict[str, str]:
    """The environment variables that carry a budget to its worker (none for no budget)."""
    if share is None or enforced_by in (None, WHOLE_CPUS):
        return {}
    return {SHARE_ENV: repr(float(share)), BUDGET_ENV: enforced_by}


def budget_from_env() -> tuple[float, str] | None:
    """(share, enforcement) this worker was given, or None."""
    kind = os.environ.get(BUDGET_ENV)
    text = os.environ.get(SHARE_ENV)
    if kind not in (CGROUP_QUOTA, DUTY_CYCLE) or text is None:
        return None
    share = float(text)
    if not (0 < share < 1e6):
        raise ValueError(f"{SHARE_ENV}={text!r} is not a CPU share")
    return share, kind


def enter_budget() -> str | None:
    """Put this worker under the budget its environment carries; returns how it is enforced.

    A cgroup quota that cannot be set up here (the probe said it could) is an error of the
    worker, never a silent run without a budget."""
    budget = budget_from_env()
    if budget is None:
        return None
    share, kind = budget
    if kind == CGROUP_QUOTA:
        path = join_quota_cgroup(share)
        log.info("CPU budget %.3f CPU by cgroup quota %s", share, path)
    else:
        log.info("CPU budget %.3f CPU by duty cycle", share)
    return kind


class DutyCycle:
    """A token bucket of CPU time: `share` CPU-seconds accrue per second (idle time earns at most
    a short burst ahead); `settle()` sleeps until the CPU this process used is paid for."""

    def __init__(
        self,
        share: float,
        *,
        clock: Any = time.monotonic,
        cpu_clock: Any = time.process_time,
        sleep: Any = time.sleep,
    ) -> None:
        self.share = share
        self._clock, self._cpu_clock, self._sleep = clock, cpu_clock, sleep
        self._lock = threading.Lock()
        self._wall = clock()
        self._cpu = cpu_clock()
        self._tokens = 0.0
        self.slept_s = 0.0

    def settle(self) -> None:
        with self._lock:
            wall, cpu = self._clock(), self._cpu_clock()
            earned, used = (wall - self._wall) * self.share, cpu - self._cpu
            self._tokens = min(self._tokens + earned - used, _DUTY_BURST_S * self.share)
            self._wall, self._cpu = wall, cpu
            debt = -self._tokens / self.share if self._tokens < 0 else 0.0
            if debt > 0:
                self._sleep(debt)
                self.slept_s += debt


class DutyCycledBackend:
    """A backend whose every run is followed by the duty cycle's settling (the batch's latency
    includes it, as a smaller slice's would)."""

    def __init__(self, backend: Any, duty: DutyCycle) -> None:
        self._backend = backend
        self.duty = duty

    def run(self, feeds: Any) -> Any:
        outputs = self._backend.run(feeds)
        self.duty.settle()
        return outputs

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def __enter__(self) -> DutyCycledBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self._backend.close()


def budgeted(backend: Any) -> Any:
    """`backend` under this worker's duty cycle, if it has one (a cgroup quota needs nothing here)."""
    budget = budget_from_env()
    if budget is None or budget[1] != DUTY_CYCLE:
        return backend
    return DutyCycledBackend(backend, DutyCycle(budget[0]))
