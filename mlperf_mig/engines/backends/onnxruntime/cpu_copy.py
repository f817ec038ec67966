"""One copy of a CPU engine's weights per machine, shared by every worker process that loads it.

The engine file holds the graph after the portable optimisations (ONNX Runtime's EXTENDED level).
Loading it with ENABLE_ALL rewrites the convolutions for this CPU (NCHWc-blocked weights) and
pre-packs the GEMM weights: every session then keeps its own copies on the heap, about 250 MiB
for the 97 MiB ResNet50, in each emulated instance. Instead, the first load on a machine saves the
fully optimised graph once, with every initializer (pre-packed ones included) in an external data
file, and sessions load that copy with the optimisations off: ONNX Runtime maps the data file, so
the page cache holds the weights once for all worker processes.

The copy is only valid on the CPU type and ONNX Runtime version that made it (the NCHWc block
size and the packed layouts depend on both), so its folder name carries a fingerprint of them. It
lives next to the engine in the cache: `<engine file>.cpu-<fingerprint>/` with `model.onnx`,
`weights.data` and `manifest.json` (what it was made from, sizes and SHA-256 of the files, and
the stamp of their last check, as the engine cache keeps it: an unchanged file is not hashed again). It is
written into a temporary folder and renamed into place, under a lock, so concurrent workers make it
once and a reader never sees half of it; a damaged or stale copy is deleted and made again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mlperf_mig._io import atomic_write_json, ensure_writable_dir, read_json
from mlperf_mig.engines import cache

log = logging.getLogger(__name__)

MODEL_NAME = "model.onnx"
WEIGHTS_NAME = "weights.data"
MANIFEST_NAME = "manifest.json"
# Initializers from this size on go to the mapped file; smaller ones stay in the graph.
EXTERNAL_MIN_BYTES = 1024
_LOCK_WAIT_S = 600.0
_LOCK_POLL_S = 0.1
# /proc/cpuinfo fields that decide which kernels and packed layouts ONNX Runtime chooses.
_CPU_FIELDS = ("vendor_id", "model name", "flags", "CPU implementer", "CPU part", "Features")


@functools.cache
def cpu_fingerprint() -> str:
    """12 hex digits naming this CPU type and ONNX Runtime version."""
    import onnxruntime as ort

    described = [ort.__version__, platform.machine(), *_cpu_description()]
    return hashlib.sha256("\n".join(described).encode("utf-8")).hexdigest()[:12]


def _cpu_description() -> list[str]:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return [platform.processor()]
    first_cpu = text.split("\n\n", 1)[0].splitlines()
    return [line for line in first_cpu if line.split(":", 1)[0].strip() in _CPU_FIELDS]


def shared_model_folder(engine_path: str | os.PathLike[str]) -> Path:
    """Where the copy of `engine_path` for this CPU lives."""
    engine = Path(engine_path)
    return engine.with_name(f"{engine.name}.cpu-{cpu_fingerprint()}")


def shared_model(engine_path: str | os.PathLike[str], write: Callable[[Path], None]) -> Path | None:
    """The graph file of this CPU's copy of `engine_path`, made first if missing or damaged.

    `write(folder)` saves the optimised graph as `folder/MODEL_NAME` with its initializers in
    `folder/WEIGHTS_NAME`. Returns None (and logs why) where the copy cannot be written, e.g. in
    a read-only cache: the caller then loads the engine file itself.
    """
    folder = shared_model_folder(engine_path)
    made_from = _made_from(Path(engine_path))
    with _exclusive(folder.with_name(folder.name + ".lock")):
        reason = _invalid_reason(folder, made_from)
        if reason is None:
            return folder / MODEL_NAME
        if folder.exists():
            log.warning("discarding %s: %s", folder, reason)
            shutil.rmtree(folder, ignore_errors=True)
        try:
            _make(folder, write, made_from)
        except OSError as exc:
            if _invalid_reason(folder, made_from) is None:  # another process was quicker
                return folder / MODEL_NAME
            log.warning(
                "cannot save the shared CPU copy of %s (%s); each session keeps its own weights",
                engine_path,
                exc,
            )
            return None
    log.info("saved the CPU copy of %s in %s", engine_path, folder)
    return folder / MODEL_NAME


def _made_from(engine_path: Path) -> dict[str, Any]:
    """What a copy must have been made from: the engine's bytes, ONNX Runtime and the CPU."""
    import onnxruntime as ort

    try:
        sidecar = read_json(cache.sidecar_path(engine_path), "record")
        engine_sha256 = sidecar["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        engine_sha256 = cache.sha256_file(engine_path)
    return {
        "engine_sha256": engine_sha256,
        "onnxruntime": ort.__version__,
        "cpu": cpu_fingerprint(),
    }


def _file_record(path: Path) -> dict[str, Any]:
    return {"size": path.stat().st_size, "sha256": cache.sha256_file(path)}


def _invalid_reason(folder: Path, made_from: dict[str, Any]) -> str | None:
    try:
        manifest = read_json(folder / MANIFEST_NAME, "store")
    except (OSError, ValueError):
        return "no readable manifest"
    if not isinstance(manifest, dict) or manifest.get("made_from") != made_from:
        return "made from another engine, ONNX Runtime or CPU"
    files = manifest.get("files")
    if not isinstance(files, dict) or MODEL_NAME not in files:
        return "malformed manifest"
    checked = {}
    for name, record in files.items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        verified = cache.checked_record(path, record) if isinstance(record, dict) else None
        if verified is None:
            return f"{name} does not match its checksum (truncated or corrupted)"
        checked[name] = verified
    if checked != files:  # record the stamps, so that unchanged files are not hashed again
        try:
            atomic_write_json(folder / MANIFEST_NAME, {**manifest, "files": checked})
        except OSError as exc:  # a read-only cache: the files are hashed in full every time
            log.debug("cannot record the stamps of %s: %s", folder, exc)
    return None


def _make(folder: Path, write: Callable[[Path], None], made_from: dict[str, Any]) -> None:
    ensure_writable_dir(folder.parent)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.", suffix=".tmp"))
    try:
        write(tmp)
        files = {path.name: _file_record(path) for path in sorted(tmp.iterdir())}
        manifest = {"made_from": made_from, "files": files}
        (tmp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        os.rename(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `lock_path` for a bounded time, where locking is possible.

    Without a lock (no fcntl, a read-only folder, a holder that never lets go) the caller still
    works: copies are renamed into place whole, so the worst case is one copy made twice.
    """
    try:
        import fcntl

        handle = open(lock_path, "a+b")  # noqa: SIM115 - closed below, after the unlock
    except (ImportError, OSError):
        yield
        return
    try:
        deadline = time.monotonic() + _LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    log.warning(
                        "%s is still locked after %.0f s; going on", lock_path, _LOCK_WAIT_S
                    )
                    break
                time.sleep(_LOCK_POLL_S)
        yield
    finally:
        handle.close()  # closing the file releases the lock
