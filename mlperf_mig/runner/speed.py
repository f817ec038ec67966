"""How fast an engine runs on this machine: behind the plan's time estimates and the hang limit.

A LoadGen test lasts its min_duration only when the instance keeps up: a quick Server test of
full BERT on 2 CPUs issues its 32 queries at the calibrated target, and completing them took
300 s where the settings alone said 2 s. So the plan estimates each instance's test from the
engine's speed for the benchmark, variant, backend and precision:
    measured   the Offline throughput of an earlier run here, per CPU-second the instance used
               (emulated partitions; the share of a new run scales it) or per MIG profile (GPUs),
               kept in the engine cache's `capacity.json` under keys `speed|...` (its lock,
               versioning and checks of what is read back)
    table      for the full graphs, the data file's Offline target of the profile (its `cpu`
               row is ONNX Runtime on 2 cores)
    none       the tiny graphs before their first run: the settings alone
The hang limit of a round is five times the longest estimate, at least 600 s and at most a week;
a cached speed outside MIN_SPEED-MAX_SPEED is not used (said in a warning).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from mlperf_mig.errors import MlperfMigError
from mlperf_mig.runner.capacity_store import read_capacities, store_capacity

if TYPE_CHECKING:
    from mlperf_mig.placement.deployment import Deployment, InstanceSlot
    from mlperf_mig.runner.results import RunResult
    from mlperf_mig.workloads import Workload

log = logging.getLogger(__name__)

TABLE_CPUS = 2  # the data files' `cpu` targets were measured on 2 cores
HANG_FACTOR = 5.0
MIN_HANG_S = 600.0
# the range a cached engine speed (samples/s) must lie in to be used
MIN_SPEED = 1e-3
MAX_SPEED = 1e8
MAX_HANG_S = 7 * 24 * 3600.0  # a week: the longest accuracy run of a CPU is hours


class PlannedRun(Protocol):
    """What the estimates read of a plan (runner/plan.py's RunPlan, which imports this module)."""

    @property
    def deployment(self) -> Deployment: ...
    @property
    def slots(self) -> Sequence[InstanceSlot]: ...
    @property
    def gpu(self) -> str: ...
    @property
    def benchmark(self) -> Workload: ...
    @property
    def variant(self) -> str: ...
    @property
    def backend(self) -> str: ...
    @property
    def precision(self) -> str | None: ...
    @property
    def preset(self) -> str: ...
    @property
    def loadgen_scenario(self) -> str: ...
    @property
    def overrides(self) -> Sequence[tuple[str, float]]: ...
    @property
    def accuracy(self) -> bool: ...
    @property
    def cache_dir(self) -> str | None: ...
    @property
    def outdir(self) -> str: ...


def speed_key(
    *, benchmark: str, variant: str, backend: str, precision: str | None, where: str
) -> str:
    """The cache key of an engine's speed: `where` is "cpu" (per CPU-second) or the GPU and profile."""
    return "|".join(["speed", benchmark, variant, backend, precision or "default", where])


def _where(plan: PlannedRun, slot: InstanceSlot) -> str:
    return "cpu" if plan.deployment.emulated else f"{plan.gpu}/{slot.profile}"


def _key(plan: PlannedRun, slot: InstanceSlot) -> str:
    return speed_key(
        benchmark=plan.benchmark.name,
        variant=plan.variant,
        backend=plan.backend,
        precision=plan.precision,
        where=_where(plan, slot),
    )


def slot_speed(
    plan: PlannedRun, slot: InstanceSlot, measured: dict[str, dict[str, Any]]
) -> tuple[float | None, str]:
    """Samples per second the slot's engine should deliver here, and where that comes from."""
    from mlperf_mig.harness.settings import load_settings_data, profile_target

    scale = (
        (slot.cpu_share or float(len(slot.cpus or ()) or 1)) if plan.deployment.emulated else 1.0
    )
    key = _key(plan, slot)
    entry = measured.get(key)
    if entry is not None and plausible_speed(entry["qps"]):
        return entry["qps"] * scale, "measured here"
    if entry is not None:
        log.warning(
            "not using the cached engine speed %r of %r: it is outside %g-%g samples/s, not a "
            "speed this tool measured; run `mlperf-mig capacity` or an Offline run to measure it",
            entry["qps"], key, MIN_SPEED, MAX_SPEED,
        )  # fmt: skip
    if plan.variant != "full" or plan.backend == "null":
        return None, "not measured here yet"
    try:
        data = load_settings_data(plan.benchmark)
        if plan.deployment.emulated:
            return profile_target(
                data, "Offline", None
            ) / TABLE_CPUS * scale, "the data file's CPU target"
        return profile_target(data, "Offline", slot.profile), "the data file's profile target"
    except MlperfMigError:
        return None, "not measured here yet"


def plausible_speed(qps: float) -> bool:
    """Whether a cached engine speed (samples/s, or per CPU-second) can be one this tool
    measured: a speed of 1e-300 would make a hang limit of 1.6e303 s."""
    return MIN_SPEED <= qps <= MAX_SPEED


def test_seconds(plan: PlannedRun, speed: float | None, *, accuracy: bool) -> float:
    """About how long one instance's LoadGen test lasts at `speed` samples/s."""
    from mlperf_mig.harness.settings import expected_test_seconds, load_settings_data, preset_values

    benchmark = plan.benchmark
    overrides = dict(plan.overrides)
    base = expected_test_seconds(benchmark, plan.loadgen_scenario, plan.preset, overrides)
    values = {
        **preset_values(load_settings_data(benchmark), plan.preset, plan.loadgen_scenario),
        **overrides,
    }
    if accuracy:
        samples = values.get("accuracy_sample_count_override") or values.get(
            "performance_sample_count_override"
        )
        return float(samples) / speed if speed and samples else base
    if speed is None or plan.loadgen_scenario == "Offline":
        return base  # the quick Offline query is sized from the measured speed
    per_query = values.get("samples_per_query", 8) if plan.loadgen_scenario == "MultiStream" else 1
    return max(base, float(values.get("min_query_count", 1)) * per_query / speed)


def estimates(plan: PlannedRun) -> tuple[float, float | None, str]:
    """(performance test s, accuracy test s or None, what they rest on) for the slowest slot."""
    try:
        measured = read_capacities(plan.cache_dir)
    except MlperfMigError:
        measured = {}
    speeds = [slot_speed(plan, slot, measured) for slot in plan.slots]
    known = [(s, why) for s, why in speeds if s]
    if not known:
        return (
            test_seconds(plan, None, accuracy=False),
            None,
            "the settings alone (engine speed not measured here yet)",
        )
    slowest, why = min(known)
    perf = test_seconds(plan, slowest, accuracy=False)
    acc = test_seconds(plan, slowest, accuracy=True) if plan.accuracy else None
    return perf, acc, f"{why}: {slowest:.3g} samples/s for the slowest instance"


def hang_limit(performance_s: float, accuracy_s: float | None) -> float:
    """A round's hang limit: five times the longest estimate, at least 600 s, at most
    MAX_HANG_S (an estimate beyond it rests on a number no run measured: a hung worker must
    still be stopped)."""
    return min(MAX_HANG_S, max(MIN_HANG_S, HANG_FACTOR * max(performance_s, accuracy_s or 0.0)))


def record_speeds(plan: PlannedRun, result: RunResult) -> None:
    """Keep the Offline speed of each instance that finished (per CPU-second it used, emulated)."""
    if plan.loadgen_scenario != "Offline" or plan.backend == "null":
        return
    for slot, instance in zip(plan.slots, result.instances):
        rate = instance.throughput
        if not instance.ok or not rate:
            continue
        if plan.deployment.emulated:
            used = instance.cpu_used or instance.cpu_share
            if not used:
                continue
            rate = rate / used
        entry = {
            "qps": rate,
            "folder": plan.outdir,
            "measured_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }
        try:
            store_capacity(_key(plan, slot), entry, plan.cache_dir)
        except MlperfMigError as exc:
            log.warning("engine speed not kept for later estimates: %s", exc)
        return  # one instance per run: the others ran the same engine
