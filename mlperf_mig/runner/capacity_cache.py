"""Cached Server capacities: the highest VALID Server target QPS found per profile.

`mlperf_mig.capacity` (study/capacity.py) writes one entry per (GPU or its emulation, profile,
benchmark, backend, precision, preset, model variant) to `<cache>/capacity.json`; a later Server
run of a layout whose instances are all of one profile uses the entry as its target QPS, and a
Server sweep reports each layout's capacity as the sum of its instances'. The file is small
JSON, rewritten atomically.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from mlperf_mig._io import atomic_write_json

if TYPE_CHECKING:
    from mlperf_mig.runner.options import RunOptions
    from mlperf_mig.runner.plan import RunPlan

log = logging.getLogger(__name__)

CAPACITY_FILE = "capacity.json"


def capacity_key(
    *, gpu: str, emulated: bool, profile: str, benchmark: str, backend: str, precision: str | None,
    preset: str, variant: str,
) -> str:
    where = f"{gpu} [emulated]" if emulated else gpu
    return "|".join([where, profile, benchmark, backend, precision or "default", preset, variant])


def cache_file(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    from mlperf_mig.engines.cache import cache_root

    return cache_root(cache_dir) / CAPACITY_FILE


def read_capacities(cache_dir: str | os.PathLike[str] | None = None) -> dict[str, dict[str, Any]]:
    """Every cached entry by key; an unreadable file counts as empty (and is said so)."""
    path = cache_file(cache_dir)
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        log.warning("ignoring the capacity cache %s: %s", path, exc)
        return {}
    return {k: v for k, v in data.items() if isinstance(v, dict) and isinstance(v.get("qps"), (int, float))}


def store_capacity(key: str, entry: Mapping[str, Any], cache_dir: str | os.PathLike[str] | None = None) -> Path:
    entries = read_capacities(cache_dir)
    entries[key] = dict(entry)
    return atomic_write_json(cache_file(cache_dir), entries)


def plan_key(plan: Any, profile: str) -> str:
    """The cache key of `profile` under the settings of a RunPlan."""
    return capacity_key(
        gpu=plan.gpu, emulated=plan.deployment.emulated, profile=profile, benchmark=plan.benchmark,
        backend=plan.backend, precision=plan.precision, preset=plan.preset, variant=plan.variant,
    )


def plan_capacities(plan: Any, cache_dir: str | os.PathLike[str] | None = None) -> dict[str, float]:
    """profile -> cached capacity (QPS) for the profiles of `plan` that have one."""
    entries = read_capacities(cache_dir)
    keys = {slot.profile: plan_key(plan, slot.profile) for slot in plan.slots}
    return {profile: float(entries[key]["qps"]) for profile, key in keys.items() if key in entries}


def with_cached_capacity(options: RunOptions, the_plan: RunPlan) -> tuple[RunOptions, RunPlan]:
    """A Server run with no target of its own (no target_qps setting, no user.conf) of a layout
    whose instances are all of one profile takes that profile's cached capacity as its target."""
    from mlperf_mig.runner.plan import make_plan

    own_target = "target_qps" in dict(options.settings) or options.user_conf is not None
    if the_plan.loadgen_scenario != "Server" or own_target:
        return options, the_plan
    capacities = plan_capacities(the_plan, options.cache_dir)
    profiles = {slot.profile for slot in the_plan.slots}
    if len(profiles) != 1 or not capacities:
        if capacities:
            log.info("cached Server capacities not used: a mixed layout needs a target per profile")
        return options, the_plan
    target = capacities[profiles.pop()]
    log.info("Server target %.4g QPS per instance: the cached capacity (mlperf-mig capacity)", target)
    options = attrs.evolve(options, settings={**dict(options.settings), "target_qps": target})
    return options, make_plan(options)
