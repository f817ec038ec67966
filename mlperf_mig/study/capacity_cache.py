"""Cached Server capacities: the highest VALID Server target QPS found per profile.

`mlperf_mig.capacity` (study/capacity.py) writes one entry per (GPU or its emulation, profile,
benchmark, backend, precision, preset, model variant, and the conf model name where a Server test
runs under another one than the workload's own: MLPerf's Interactive, `llama3_1-8b-interactive`,
tighter TTFT and TPOT limits) to the capacity cache file
(runner/capacity_store.py: versioned, locked, read back as untrusted input); a later Server run of
a layout whose instances are all of one profile uses the entry as its target QPS (recorded as
`target_source: "capacity cache"`), and a Server sweep reports each layout's capacity as the sum
of its instances'.
"""

from __future__ import annotations

import logging
import os

import attrs

from mlperf_mig.runner.capacity_store import cache_file, read_capacities
from mlperf_mig.runner.options import RunOptions
from mlperf_mig.runner.plan import RunPlan, make_plan
from mlperf_mig.workloads import Workload, get_workload

log = logging.getLogger(__name__)


def capacity_key(
    *,
    gpu: str,
    emulated: bool,
    profile: str,
    benchmark: str,
    backend: str,
    precision: str | None,
    preset: str,
    variant: str,
    conf_model_name: str | None = None,
) -> str:
    """The entry's key; `conf_model_name` only for a Server test under another conf model name
    than the workload's own (its limits differ, so its capacity does: Interactive)."""
    where = f"{gpu} [emulated]" if emulated else gpu
    parts = [where, profile, benchmark, backend, precision or "default", preset, variant]
    return "|".join(parts + ([f"conf={conf_model_name}"] if conf_model_name else []))


def _other_conf_name(workload: Workload) -> str | None:
    """The conf model name a plan's workload runs its Server test under, where it is not the
    workload's own (MLPerf's Interactive); None for the workload's own tests, whose keys stay as
    they were before Interactive existed."""
    own = get_workload(workload.name).conf_model_name
    return None if workload.conf_model_name == own else workload.conf_model_name


def plan_key(plan: RunPlan, profile: str) -> str:
    """The cache key of `profile` under the settings of a RunPlan."""
    return capacity_key(
        gpu=plan.gpu,
        emulated=plan.deployment.emulated,
        profile=profile,
        benchmark=plan.benchmark.name,
        backend=plan.backend,
        precision=plan.precision,
        preset=plan.preset,
        variant=plan.variant,
        conf_model_name=_other_conf_name(plan.benchmark),
    )


def plan_capacities(
    plan: RunPlan, cache_dir: str | os.PathLike[str] | None = None
) -> dict[str, float]:
    """profile -> cached capacity (QPS) for the profiles of `plan` that have one."""
    entries = read_capacities(cache_dir)
    keys = {slot.profile: plan_key(plan, slot.profile) for slot in plan.slots}
    return {profile: float(entries[key]["qps"]) for profile, key in keys.items() if key in entries}


def with_cached_capacity(options: RunOptions, the_plan: RunPlan) -> tuple[RunOptions, RunPlan]:
    """A Server run with no target of its own (no target_qps setting, no user.conf) of a layout
    whose instances are all of one profile takes that profile's cached capacity as its target.

    The target passes the settings' range check under the cache's name before anything runs,
    and the plan records where it came from (`RunPlan.target_from`) when it is made again with it.
    """
    from mlperf_mig.harness.settings import SettingsSpec, resolve_settings

    own_target = "target_qps" in dict(options.settings) or options.user_conf is not None
    if the_plan.loadgen_scenario != "Server" or own_target:
        return options, the_plan
    capacities = plan_capacities(the_plan, options.cache_dir)
    profiles = {slot.profile for slot in the_plan.slots}
    if len(profiles) != 1 or not capacities:
        if capacities:
            log.info("cached Server capacities not used: a mixed layout needs a target per profile")
        return options, the_plan
    profile = profiles.pop()
    target = capacities[profile]
    origin = (
        f"the capacity cache {str(cache_file(options.cache_dir))!r} "
        f"(entry {plan_key(the_plan, profile)!r})"
    )
    settings = {**dict(options.settings), "target_qps": target}
    resolve_settings(
        SettingsSpec(preset=options.preset, overrides=settings, target_from=origin),
        the_plan.benchmark,
        "Server",
    )
    log.info(
        "Server target %.4g QPS per instance: the cached capacity (mlperf-mig capacity)", target
    )
    options = attrs.evolve(options, settings=tuple(sorted(settings.items())))  # as converted
    return options, attrs.evolve(make_plan(options), target_from=origin)
