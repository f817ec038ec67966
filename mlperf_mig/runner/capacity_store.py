"""The capacity cache file: `<engine cache>/capacity.json`, entries of measured rates by key.

Two kinds of entry live in it: Server capacities (the highest VALID Server target QPS per
profile; study/capacity.py writes them, study/capacity_cache.py turns them into later Server
targets) and engine speeds (`speed|...`, runner/speed.py: behind the plan's time estimates). This
module is only the file, below both, so that the runner reads and writes it without importing
the study.

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
import logging
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs

from mlperf_mig._io import atomic_write_json, finite_number, read_json, write_failed
from mlperf_mig.errors import MlperfMigError, OutputDirError

log = logging.getLogger(__name__)

CAPACITY_FILE = "capacity.json"
CACHE_FORMAT = "mlperf-mig capacity cache"
CACHE_VERSION = 1
LOCK_WAIT_S = 30.0


ENTRY_MODE = 0o644  # engines/cache.py's: writable by the user alone


def cache_file(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    from mlperf_mig.engines.cache import cache_root

    return cache_root(cache_dir) / CAPACITY_FILE


def usable_qps(value: object) -> bool:
    """A capacity that can be a Server target: a finite positive number (not a bool)."""
    return finite_number(value) and value > 0


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
    from mlperf_mig.engines.cache import untrusted_entry

    with contextlib.suppress(OSError):  # a missing or unreachable file: read_json says which
        untrusted = untrusted_entry(os.lstat(path))
        if untrusted is not None:
            _warn_once("ignoring the capacity cache %s: it is %s; remove it", path, untrusted)
            return _Loaded({}, unwritable=f"it is {untrusted}")
    try:
        data = read_json(path, "store", fix="move it away to cache capacities again")
    except FileNotFoundError:
        return _Loaded({})
    except MlperfMigError as exc:
        _warn_once("ignoring the capacity cache: %s", exc)
        return _Loaded({}, unwritable=str(exc))
    if not isinstance(data, dict):
        _warn_once(
            "ignoring the capacity cache %s: it holds JSON %s, not a capacity cache object; it is "
            "not overwritten: move it away to cache capacities again",
            path,
            type(data).__name__,
        )
        return _Loaded({}, unwritable=f"it holds JSON {type(data).__name__}, not a capacity cache")
    if "version" in data:
        if data.get("version") != CACHE_VERSION or data.get("format") != CACHE_FORMAT:
            _warn_once(
                "ignoring the capacity cache %s: format %r version %r, this mlperf-mig reads %r "
                "version %d",
                path,
                data.get("format"),
                data.get("version"),
                CACHE_FORMAT,
                CACHE_VERSION,
            )
            return _Loaded(
                {}, unwritable=f"it is version {data.get('version')!r}, not {CACHE_VERSION}"
            )
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
            "run `mlperf-mig capacity` again for them",
            path,
            len(ignored),
            "y" if len(ignored) == 1 else "ies",
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
            path,
            {"format": CACHE_FORMAT, "version": CACHE_VERSION, "entries": entries},
            mode=ENTRY_MODE,
        )
