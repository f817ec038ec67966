"""The on-disk cache of generated models and built engines.

Every cached file has a JSON sidecar (`<file>.json`) with its SHA-256, its size and what it was
made from. A file is only used when the sidecar exists, names the same inputs and versions, and
the bytes hash to the recorded digest; anything else (a truncated write, a flipped byte, a file
from another library or backend version) is deleted and made again, never loaded. New files are
written under a temporary name and moved into place, so a reader never sees half a file.

Hashing a full ResNet50 engine costs about 0.12 s of CPU, paid by every worker of every round.
Once a file's bytes have hashed to the recorded digest, the sidecar also records the file's stamp
(inode, size, modification and change times, read from the descriptor that was hashed), and a
file whose stamp is unchanged is not hashed again. Any change made through the file system
changes the stamp: a rewrite in place, a truncation, a replacement by another file, even a
modification time put back with utime (the change time cannot be set back), and then the full
hash decides again. Damage below the file system (a failing disk) keeps the stamp and is not
seen. File systems keep times at a coarse granularity, so a change within the same tick as the
last one could keep them: a stamp is only recorded for a file unchanged for STAMP_SETTLE_S.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shlex
import stat
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mlperf_mig._io import atomic_write_json, ensure_writable_dir, read_json
from mlperf_mig.errors import MlperfMigError, OutputDirError

log = logging.getLogger(__name__)

CACHE_ENV = "MLPERF_MIG_CACHE"
SIDECAR_SUFFIX = ".json"
STAMP_SETTLE_S = 2.0  # longer than any file system's time granularity (FAT: 2 s)
_CHUNK = 1 << 22


def cache_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The cache folder: `cache_dir` if given, else $MLPERF_MIG_CACHE, else the per-user cache.

    A folder that does not exist yet is created 0700 (what it holds decides results: no one
    else may write into it). One that exists must be the user's and writable by no one else,
    as ssh treats its keys: else OutputDirError, one line with the fix (`untrusted_folder`)."""
    root = _cache_path(cache_dir)
    if not os.path.lexists(root):
        with contextlib.suppress(OSError):  # a failed creation is said by the first write
            root.parent.mkdir(parents=True, exist_ok=True)
            root.mkdir(mode=0o700)
    reason = untrusted_folder(root)
    if reason is not None:
        raise OutputDirError(
            f"the cache folder {str(root)!r} {reason}: nothing is read from it (another user "
            "could plant calibrated targets, samples or engines that a run would trust); run "
            f"`chmod go-w {shlex.quote(str(root))}` if it is yours, or pass a folder of your own "
            f"(--cache-dir / cache_dir= / ${CACHE_ENV})"
        )
    return root


def _cache_path(cache_dir: str | os.PathLike[str] | None) -> Path:
    if cache_dir is not None:
        if isinstance(cache_dir, str) and not cache_dir.strip():
            raise OutputDirError(
                "the cache folder is an empty name (it would be the current folder); pass a "
                f"folder, or leave it out for ${CACHE_ENV} or ~/.cache/mlperf-mig"
            )
        return Path(cache_dir).expanduser()
    from_env = os.environ.get(CACHE_ENV)
    if from_env:
        return Path(from_env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "mlperf-mig"


def untrusted_folder(path: Path) -> str | None:
    """Why the cache folder `path` must not be read (None: it may, or it does not exist): owned
    by another user, or writable by its group or by anyone (ssh's rule for ~/.ssh)."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    if status.st_uid != os.getuid():
        return f"is owned by uid {status.st_uid}, not by you (uid {os.getuid()})"
    if status.st_mode & 0o022:
        return f"is writable by others (mode {stat.S_IMODE(status.st_mode):04o})"
    return None


def untrusted_entry(status: os.stat_result) -> str | None:
    """Why a file of the cache with this status must not be read (None: it may): owned by
    another user or writable by anyone. (The folder is 0700 and the user's: an entry that is
    not the user's was put there by someone who could.)"""
    if status.st_uid != os.getuid():
        return f"owned by uid {status.st_uid}, not by you (uid {os.getuid()})"
    if status.st_mode & 0o002:
        return f"writable by anyone (mode {stat.S_IMODE(status.st_mode):04o})"
    return None


# The mode of what the cache writes: writable by the user alone whatever the umask (an entry
# writable by anyone is refused when read: untrusted_entry).
ENTRY_MODE = 0o644

# What the cache fed into this process (a worker: its engine, samples file, calibrated target),
# for the error of an instance that fails (runner/worker.py names them).
_fed: list[str] = []


def note_fed(what: str, path: str | os.PathLike[str]) -> None:
    """Record that `path` (a cached `what`) was used by this process."""
    entry = f"{what} {str(path)!r}"
    if entry not in _fed:
        _fed.append(entry)


def fed_from_cache() -> list[str]:
    """Every cached file this process used, as '<what> <path>'."""
    return list(_fed)


def sha256_file(path: str | os.PathLike[str]) -> str:
    return _hashed(path)[0]


def _stamp(status: os.stat_result) -> list[int]:
    return [status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns]


def _hashed(path: str | os.PathLike[str]) -> tuple[str, list[int] | None]:
    """The SHA-256 of the file, and the stamp of the bytes hashed when it can be recorded: the
    file did not change while it was read and was last changed STAMP_SETTLE_S ago or more."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        before = os.fstat(handle.fileno())
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
        after = os.fstat(handle.fileno())
    changed_ns = max(after.st_mtime_ns, after.st_ctime_ns)
    settled = time.time_ns() - changed_ns >= STAMP_SETTLE_S * 1e9
    stamp = _stamp(after)
    return digest.hexdigest(), stamp if settled and _stamp(before) == stamp else None


def sidecar_path(path: Path) -> Path:
    return path.with_name(path.name + SIDECAR_SUFFIX)


def read_valid(path: Path, expected: dict[str, Any]) -> dict[str, Any] | None:
    """The sidecar of `path` if the file is intact and was made from `expected`, else None.

    A damaged or stale file and its sidecar are deleted, so the caller makes them again.
    """
    for entry in (path, sidecar_path(path)):
        if entry.is_dir():
            raise OutputDirError(
                f"the engine cache holds a folder where the file {str(entry)!r} belongs; remove "
                "that folder, or pass another cache folder (--cache-dir / cache_dir=)"
            )
    reason, meta = _invalid_reason(path, expected)
    if reason is None:
        note_fed("cached", path)
        return meta
    if path.exists() or sidecar_path(path).exists():
        log.warning("discarding cached %s: %s", path, reason)
        path.unlink(missing_ok=True)
        sidecar_path(path).unlink(missing_ok=True)
    return None


def _invalid_reason(path: Path, expected: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """Why the cached file cannot be used (None when it can), and its sidecar."""
    if not path.is_file():
        return "missing", {}
    for entry in (path, sidecar_path(path)):
        with contextlib.suppress(OSError):
            reason = untrusted_entry(os.lstat(entry))
            if reason is not None:
                return f"{entry.name} is {reason}", {}
    try:
        meta = read_json(sidecar_path(path), "record")
    except (OSError, MlperfMigError):
        return "no readable checksum file", {}
    if not isinstance(meta, dict):
        return "malformed checksum file", {}
    for key, value in expected.items():
        if meta.get(key) != value:
            return f"{key} is {meta.get(key)!r}, expected {value!r}", meta
    size = path.stat().st_size
    if meta.get("size") != size:
        return f"size {size} bytes, expected {meta.get('size')} (truncated?)", meta
    checked = checked_record(path, meta)
    if checked is None:
        return "checksum mismatch (corrupted)", meta
    if checked != meta:
        meta = _rewrite_sidecar(path, meta, checked)
    return None, meta


def checked_record(path: Path, record: Mapping[str, Any]) -> dict[str, Any] | None:
    """`record` ("size", "sha256" and perhaps the "stamp" of the bytes last verified) when the
    file at `path` still matches it, else None; the returned record carries the stamp of this
    check where one can be recorded (see the module's docstring). A file whose stamp is the
    recorded one is not read."""
    status = path.stat()
    if record.get("size") != status.st_size:
        return None
    if record.get("stamp") is not None and record["stamp"] == _stamp(status):
        return dict(record)
    digest, stamp = _hashed(path)
    if record.get("sha256") != digest:
        return None
    checked = {key: value for key, value in record.items() if key != "stamp"}
    return checked if stamp is None else {**checked, "stamp": stamp}


def _rewrite_sidecar(path: Path, meta: dict[str, Any], checked: dict[str, Any]) -> dict[str, Any]:
    """The sidecar with the stamp of the bytes just verified, written where the cache allows."""
    try:
        atomic_write_json(sidecar_path(path), checked, mode=ENTRY_MODE)
    except OSError as exc:  # a read-only cache: the file is hashed in full every time
        log.debug("cannot record the stamp of %s: %s", path, exc)
        return meta
    return checked


@contextmanager
def _temporary_path(target: Path) -> Iterator[Path]:
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
    finally:
        Path(tmp).unlink(missing_ok=True)


def write_cached(
    path: Path, write: Callable[[Path], None], metadata: dict[str, Any]
) -> dict[str, Any]:
    """Make `path` with `write(tmp_path)`, then move it into place with its sidecar.

    Returns the sidecar written: `metadata` plus sha256 and size.
    """
    ensure_writable_dir(path.parent)
    with _temporary_path(path) as tmp:
        write(tmp)
        sidecar = {**metadata, "sha256": sha256_file(tmp), "size": tmp.stat().st_size}
        # The sidecar goes first: a reader that sees the new file with the old sidecar (or the
        # reverse) finds a checksum mismatch and rebuilds; it never loads a mismatched pair.
        atomic_write_json(sidecar_path(path), sidecar, mode=ENTRY_MODE)
        os.replace(tmp, path)
    return sidecar
