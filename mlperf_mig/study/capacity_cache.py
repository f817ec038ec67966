"""Cached Server capacities: the highest VALID Server target QPS found per profile.

`mlperf_mig.capacity` (study/capacity.py) writes one entry per (GPU or its emulation, profile,
benchmark, backend, precision, preset, model variant) to `<cache>/capacity.json`; a later Server
run of a layout whose instances are all of one profile uses the entry as its target QPS (recorded
as `target_source: "capacity cache"`), and a Server sweep reports each layout's capacity as the
sum of its instances'.

The file is read back like any input the project did not just write: it is versioned
(`{"format": ..., "version": 1, "entries": {key: {"qps": ...}}}`; the unversioned mapping of
earlier releases is read too), an entry whose qps is not a finite positive number is ignored
with one warning naming the file, and a file that is not such an object is ignored with a
warning and never overwritten. Writers take an exclusive lock on `capacity.json.lock` beside it
for the whole read-modify-write, so that processes storing different keys at once keep them all;
the file itself is replaced atomically.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from mlperf_mig._io import atomic_write_json, finite_number, write_failed
from mlperf_mig.errors import OutputDirError

if TYPE_CHECKING:
    from mlperf_mig.runner.options import RunOptions
    from mlperf_mig.runner.plan import RunPlan

log = logging.getLogger(__name__)

CAPACITY_FILE = "capacity.json"
CACHE_FORMAT = "mlperf-mig capacity cache"
CACHE_VERSION = 1
LOCK_WAIT_S = 30.0


def capacity_key(
    *, gpu: str, emulated: bool, profile: str, benchmark: str, backend: str, precision: str | None,
    preset: str, variant: str,
) -> str:
    where = f"{gpu} [emulated]" if emulated else gpu
    return "|".join([where, profile, benchmark, backend, precision or "default", preset, variant])


def cache_file(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    from mlperf_mig.engines.cache import cache_root

    return cache_root(cache_dir) / CAPACITY_FILE


def usable_qps(value: object) -> bool:
    """A capacity that can be a Server target: a finite positive number (not a bool)."""
    return finite_number(value) and value > 0  # type: ignore[operator]


_warned: set[str] = set()


def _warn_once(message: str, *args: object) -> None:
    """One warning per problem and file in a process (a sweep reads the cache once a layout)."""
    text = message % args
    if text not in _warned:
        _warned.add(text)
        log.warning("%s", text)


@attrs.frozen
class _Loaded:
    """What a read of the cache file found: its usable entries, and why it cannot be rewritten."""

    entries: dict[str, dict[str, Any]]
    unwritable: str | None = None  # the reason a store must not replace the file


def _load(path: Path) -> _Loaded:
    """Read `path`; every problem is one warning naming the file, never an exception."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return _Loaded({})
    except (OSError, UnicodeDecodeError) as exc:
        reason = f"cannot be read ({getattr(exc, 'strerror', None) or exc})"
        _warn_once("ignoring the capacity cache %s: it %s", path, reason)
        return _Loaded({}, unwritable=f"it {reason}")
    try:
        data = json.loads(text)
    except ValueError as exc:
        _warn_once("ignoring the capacity cache %s: it is not JSON (%s)", path, exc)
        return _Loaded({}, unwritable="it is not JSON")
    if not isinstance(data, dict):
        _warn_once(
            "ignoring the capacity cache %s: it holds JSON %s, not a capacity cache object; it is "
            "not overwritten: move it away to cache capacities again", path, type(data).__name__,
        )
        return _Loaded({}, unwritable=f"it holds JSON {type(data).__name__}, not a capacity cache")
    if "version" in data:
        if data.get("version") != CACHE_VERSION or data.get("format") != CACHE_FORMAT:
            _warn_once(
                "ignoring the capacity cache %s: format %r version %r, this mlperf-mig reads %r "
                "version %d", path, data.get("format"), data.get("version"), CACHE_FORMAT, CACHE_VERSION,
            )
            return _Loaded({}, unwritable=f"it is version {data.get('version')!r}, not {CACHE_VERSION}")
        raw = data.get("entries")
        if not isinstance(raw, dict):
            _warn_once("ignoring the capacity cache %s: its entries are not an object", path)
            return _Loaded({}, unwritable="its entries are not an object")
    else:
        raw = data  # the unversioned file of earlier releases: key -> entry
    entries = {k: v for k, v in raw.items() if isinstance(v, dict) and usable_qps(v.get("qps"))}
    ignored = sorted(set(raw) - set(entries))
    if ignored:
        _warn_once(
            "capacity cache %s: ignoring %d entr%s whose qps is not a finite positive number (%s); "
            "run `mlperf-mig capacity` again for them", path, len(ignored), "y" if len(ignored) == 1 else "ies",
            ", ".join(repr(k) for k in ignored[:3]) + (", ..." if len(ignored) > 3 else ""),
        )
    return _Loaded(entries)


def read_capacities(cache_dir: str | os.PathLike[str] | None = None) -> dict[str, dict[str, Any]]:
    """Every usable cached entry by key; an unreadable file counts as empty (and is said so)."""
    return _load(cache_file(cache_dir)).entries


@contextlib.contextmanager
def _write_lock(path: Path) -> Iterator[None]:
    """Hold the exclusive lock beside `path` (released by the kernel however the process ends)."""
    lock = path.with_name(path.name + ".lock")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise write_failed(lock, exc) from None
    try:
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise OutputDirError(
                        f"the capacity cache {str(path)!r} stayed locked by another mlperf-mig for "
                        f"{LOCK_WAIT_S:.0f} s ({str(lock)!r}); try again when it has finished"
                    ) from None
                time.sleep(0.02)
        yield
    finally:
        os.close(fd)


def store_capacity(
    key: str, entry: Mapping[str, Any], cache_dir: str | os.PathLike[str] | None = None
) -> Path:
    """Add or replace one entry, keeping every other one; raises OutputDirError (one line) when
    the file cannot be written or is not a capacity cache this version may replace."""
    if not usable_qps(entry.get("qps")):
        raise ValueError(f"a capacity entry needs a finite positive qps, got {entry.get('qps')!r}")
    path = cache_file(cache_dir)
    with _write_lock(path):
        loaded = _load(path)
        if loaded.unwritable is not None:
            raise OutputDirError(
                f"the capacity cache {str(path)!r} is not replaced: {loaded.unwritable}; move it "
                "away and run again"
            )
        entries = {**loaded.entries, key: dict(entry)}
        return atomic_write_json(
            path, {"format": CACHE_FORMAT, "version": CACHE_VERSION, "entries": entries}
        )


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


def with_cached_capacity(
    options: RunOptions, the_plan: RunPlan, make_plan: Callable[[RunOptions], RunPlan]
) -> tuple[RunOptions, RunPlan]:
    """A Server run with no target of its own (no target_qps setting, no user.conf) of a layout
    whose instances are all of one profile takes that profile's cached capacity as its target.

    The target passes the settings' range check under the cache's name before anything runs,
    and the plan records where it came from (`RunPlan.target_from`); `make_plan` (plan.py's,
    passed in: the plan reads this cache for its time estimates) makes the plan again with it.
    """
    from mlperf_mig.benchmark import get_benchmark
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
        get_benchmark(the_plan.benchmark), "Server",
    )
    log.info("Server target %.4g QPS per instance: the cached capacity (mlperf-mig capacity)", target)
    options = attrs.evolve(options, settings=settings)
    return options, attrs.evolve(make_plan(options), target_from=origin)
