"""What this host can start: the memory and open files the instances of a deployment need.

Everything here decides before anything starts; a run that cannot fit is one line, and a quick
run whose sample sets alone would not fit loads fewer samples (and says so).
"""

from __future__ import annotations

import resource
from typing import TYPE_CHECKING

import attrs

from mlperf_mig.errors import SettingsError
from mlperf_mig.placement.deployment import Deployment

if TYPE_CHECKING:
    from mlperf_mig.workloads import Workload


# What one more instance costs the host, measured with benchmarks/fleet_dispatch.py and
# benchmarks/instance_memory.py: a null-backend worker dirties about 20 MiB after the fork, an
# ONNX Runtime one about 90 MiB (independent mode); both rounded up so that a run that passes
# this check does not start swapping.
WORKER_BYTES_NULL = 32 * 2**20
WORKER_BYTES_MODEL = 128 * 2**20
# descriptors the runner holds per worker (its pipes, the log file, the fork server's sockets)
FILES_PER_WORKER = 8
FILES_RESERVED = 64  # the runner's own files, LoadGen's and the interpreter's


@attrs.frozen(kw_only=True)
class HostMemory:
    """What the instances of a run hold in memory at once, against half of this machine's."""

    workers: int  # instance workers (+ the coordinator in unified mode)
    worker_bytes: int  # one worker's own memory, without its samples
    sample_bytes: int  # one sample of every input
    samples: int  # LoadGen's performance sample count: what each LoadGen loads
    sample_sets: int  # 1 in unified mode (shared memory), one per instance in independent mode
    budget: float  # half of this machine's memory (or of its control group's limit)

    def need(self, samples: int | None = None) -> float:
        count = self.samples if samples is None else samples
        return self.workers * self.worker_bytes + self.sample_sets * count * self.sample_bytes

    def samples_that_fit(self) -> int:
        """The most samples each LoadGen may load so that the run fits."""
        room = self.budget - self.workers * self.worker_bytes
        return max(0, int(room // (self.sample_sets * self.sample_bytes)))

    def most_instances(self, mode: str) -> int:
        """The most instances this host holds with this sample count."""
        if mode == "unified":
            return max(
                0, int((self.budget - self.samples * self.sample_bytes) // self.worker_bytes) - 1
            )
        return int(self.budget // (self.worker_bytes + self.samples * self.sample_bytes))


# a quick run of many instances loads fewer samples rather than none: at least this many
MIN_QUICK_SAMPLES = 64


def host_memory(
    deployment: Deployment, *, runs_model: bool, mode: str, benchmark: Workload, samples: int
) -> HostMemory:
    """The memory model of the run on this host (see HostMemory)."""
    import numpy as np

    from mlperf_mig.harness.samples import input_layouts
    from mlperf_mig.harness.settings import machine_memory_bytes

    sample_bytes = sum(
        int(np.prod(t.shape)) * np.dtype(t.dtype).itemsize for t in input_layouts(benchmark)
    )
    unified = mode == "unified"
    return HostMemory(
        workers=len(deployment.slots) + (1 if unified else 0),
        worker_bytes=WORKER_BYTES_MODEL if runs_model else WORKER_BYTES_NULL,
        sample_bytes=max(1, sample_bytes),
        samples=samples,
        sample_sets=1 if unified else len(deployment.slots),
        budget=machine_memory_bytes() / 2,
    )


def fit_host(
    deployment: Deployment,
    *,
    runs_model: bool,
    mode: str,
    benchmark: Workload,
    samples: int,
    samples_given: bool,
    preset: str,
) -> tuple[int | None, str | None]:
    """Refuse more instances than this host can start; for a quick run whose instances'
    sample sets alone would not fit, the performance sample count that fits (with the note that
    says so), else (None, None)."""
    files = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    workers = len(deployment.slots) + (1 if mode == "unified" else 0)
    if files != resource.RLIM_INFINITY and workers * FILES_PER_WORKER + FILES_RESERVED > files:
        most = max(
            0, (files - FILES_RESERVED) // FILES_PER_WORKER - (1 if mode == "unified" else 0)
        )
        raise SettingsError(
            f"{len(deployment.slots)} instances on {len(deployment.parts)} GPU(s), but this host "
            f"can start at most {most} ({files} open files, ulimit -n, at {FILES_PER_WORKER} per "
            "worker); raise ulimit -n, select fewer GPUs (--gpus), or spread them over nodes with --cluster"
        )
    memory = host_memory(
        deployment, runs_model=runs_model, mode=mode, benchmark=benchmark, samples=samples
    )
    if memory.need() <= memory.budget:
        return None, None
    fit = min(memory.samples_that_fit(), samples)
    if preset == "quick" and not samples_given and fit >= MIN_QUICK_SAMPLES:
        fewer = 2 ** (fit.bit_length() - 1)  # a power of two: runs of a size are comparable
        note = (
            f"quick preset: each of the {len(deployment.slots)} LoadGens loads {fewer} of "
            f"{benchmark.name}'s {samples} performance samples ({memory.sample_bytes / 1024:,.0f} KiB "
            f"each), so that all fit half of this host's {2 * memory.budget / 2**30:.1f} GiB; "
            "preset='submission' loads them all (mode='unified' shares one set)"
        )
        return fewer, note
    raise SettingsError(
        f"{len(deployment.slots)} instances on {len(deployment.parts)} GPU(s) need about "
        f"{memory.need() / 2**30:.1f} GiB ({samples} samples of {memory.sample_bytes / 1024:,.0f} KiB "
        f"per LoadGen, {memory.worker_bytes // 2**20} MiB per worker), but this host can start at most "
        f"{memory.most_instances(mode)} in half of its {2 * memory.budget / 2**30:.1f} GiB; select "
        "fewer GPUs (--gpus), lower --set performance_sample_count_override, use --mode unified "
        "(one sample set for all), or spread them over nodes with --cluster"
    )
