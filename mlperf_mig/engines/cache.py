"""The on-disk cache of generated models and built engines.

Every cached file has a JSON sidecar (`<file>.json`) with its SHA-256, its size and what it was
made from. A file is only used when the sidecar exists, names the same inputs and versions, and
the bytes hash to the recorded digest; anything else (a truncated write, a flipped byte, a file
from another library or backend version) is deleted and made again, never loaded. New files are
written under a temporary name and moved into place, so a reader never sees half a file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mlperf_mig._io import atomic_write_json, ensure_writable_dir
from mlperf_mig.errors import OutputDirError

log = logging.getLogger(__name__)

CACHE_ENV = "MLPERF_MIG_CACHE"
SIDECAR_SUFFIX = ".json"
_CHUNK = 1 << 22


def cache_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The cache folder: `cache_dir` if given, else $MLPERF_MIG_CACHE, else the per-user cache."""
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


def sha256_file(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


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
    reason = _invalid_reason(path, expected)
    if reason is None:
        return json.loads(sidecar_path(path).read_text(encoding="utf-8"))
    if path.exists() or sidecar_path(path).exists():
        log.warning("discarding cached %s: %s", path, reason)
        path.unlink(missing_ok=True)
        sidecar_path(path).unlink(missing_ok=True)
    return None


def _invalid_reason(path: Path, expected: dict[str, Any]) -> str | None:
    if not path.is_file():
        return "missing"
    try:
        meta = json.loads(sidecar_path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "no readable checksum file"
    if not isinstance(meta, dict):
        return "malformed checksum file"
    for key, value in expected.items():
        if meta.get(key) != value:
            return f"{key} is {meta.get(key)!r}, expected {value!r}"
    if meta.get("size") != path.stat().st_size:
        return f"size {path.stat().st_size} bytes, expected {meta.get('size')} (truncated?)"
    if meta.get("sha256") != sha256_file(path):
        return "checksum mismatch (corrupted)"
    return None


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
        atomic_write_json(sidecar_path(path), sidecar)
        os.replace(tmp, path)
    return sidecar
