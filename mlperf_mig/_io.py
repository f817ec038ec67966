"""Small file-system helpers shared by every pillar: atomic writes and writable output folders."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from mlperf_mig.errors import OutputDirError


def ensure_writable_dir(path: str | os.PathLike[str]) -> Path:
    """Create `path` (and parents) if needed and check that files can be written there."""
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-probe-"):
            pass
    except OSError as exc:
        raise OutputDirError(
            f"output folder {str(folder)!r} cannot be written ({exc.strerror or exc}); "
            "pass a folder you can write to"
        ) from None
    return folder


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write `data` to `path` so that readers see either the old file or the whole new one."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Atomic write of UTF-8 text."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> Path:
    """Atomic write of `obj` as indented JSON with a trailing newline."""
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")
