"""Work that does not change between runs, kept in the cache folder: measured targets and
generated samples.

A second `run --scenario 7` used to time every instance's backend again (calibration, 1.3-4.5 s)
and generate its samples again (1.2-5 s, more under an emulated CPU budget); both depend only on
their inputs, so they are kept under a key of those inputs:

- `<cache>/calibration/<key>.json`: the target calibration measured (calibration.py), keyed by
  the engine (its whole EngineSpec: model, variant, backend and its version, precision, batch
  sizes, GPU and MIG profile), the benchmark, the LoadGen scenario, the preset, the batch size,
  the samples per query, the sample source (seed, count or dataset), the path that was timed
  and the machine (`machine_identity`: CPU model, the worker's CPU set, its emulated CPU budget
  and threads, the visible CUDA devices). A worker calibrated under another CPU budget or on
  other CPUs has another key. The null backend is never cached (its calibration costs
  microseconds, and tests put other backends behind it). A target from this cache is labelled
  `target_source: "cached calibration"` in every result, never passed off as measured now; a
  Server or stream test that came out INVALID with a cached target drops the entry, so the next
  run measures again. A unified worker keys its target by the path it timed (rows copied out
  of shared memory) and sends the key with it; the coordinator labels the layout's target and
  drops those keys after an INVALID test. Cluster actors still measure every round, and so
  does every repeat and alone run of a study (REUSE_TARGETS_ENV): a study compares its runs'
  numbers, which would otherwise be copies of one calibrated target.
- `<cache>/samples/<key>.bin` (+ `<key>.json`): the synthetic samples of one LoadGen load, the
  rows of each input one after another, keyed by the benchmark, seed, sample counts, input
  layouts and the loaded indices. A run maps the file read-only (MAP_POPULATE: the pages are
  read at load time, outside the timed phase) and serves straight from it: no generation, no
  copy, and the instances of a layout share one copy in the page cache (ResNet50: 588 MiB a
  worker before).

Everything read back is untrusted: the cache folder is the user's and writable by no one else
(engines/cache.py `cache_root`), a record or samples file not owned by the user or writable by
anyone is a miss, a record is read with `_io.read_json` (no link, a regular file, bounded size
and nesting), must carry this format and version, the very inputs asked for (not just their
hash) and a target within calibration's own bounds for its LoadGen scenario; whatever the cache
fed a worker is named in the error of a worker that fails (runner/worker.py); a samples file
must be a regular file reached without links, of exactly the size its key implies, and its
bytes must hash to the recorded SHA-256, or carry the stamp (inode, size, modification and change times) recorded
when they last did (see engines/cache.py for why a stamp is enough). Anything else is a miss
(logged, never loaded) and is made again. Writes are atomic (a reader sees the old file or the
new one, never half), a samples file is written by one process at a time (a lock beside it; the
others go on without writing the same bytes), and a failed write only costs the reuse. A file
this tool wrote is only ever replaced, never changed in place; a samples file truncated in place
by something else while a test maps it ends that worker with SIGBUS (a failed worker, never a
wrong result).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import math
import mmap
import os
import platform
import re
import stat
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mlperf_mig._io import (
    JSON_LIMITS,
    atomic_write_json,
    finite_number,
    inside,
    read_json,
)
from mlperf_mig.engines.cache import ENTRY_MODE, note_fed, untrusted_entry
from mlperf_mig.errors import MlperfMigError
from mlperf_mig.harness.calibration import (
    MIN_LATENCY_MS,
    OFFLINE_CAP_QPS,
    SERVER_CAP_QPS,
)
from mlperf_mig.harness.samples import SampleLibrary
from mlperf_mig.workloads.samples import SampleSource, SyntheticSource

logger = logging.getLogger(__name__)

FORMAT = "mlperf-mig reuse"
VERSION = 1
CALIBRATION_DIR = "calibration"
# "0" in a worker's environment: use no cached target, measure (runner/jobs.py sets it for the
# repeats and alone runs of a study, whose numbers must each be measured, not copied)
REUSE_TARGETS_ENV = "MLPERF_MIG_REUSE_TARGETS"
SAMPLES_DIR = "samples"
# The lowest QPS a calibrated target may have: one sample a thousand seconds (what a Server run
# of 334 QPS where the machine does 400-490 came from was a planted record, refused by owner).
MIN_TARGET_QPS = 1e-3
RECORD_LIMIT = JSON_LIMITS["record"]  # a record holds a key and a number
# A load larger than this is generated every time (a full-dataset synthetic accuracy run).
SAMPLES_LIMIT_BYTES = 2 << 30
STAMP_SETTLE_S = 2.0  # as engines/cache.py: longer than any file system's time granularity
_CHUNK = 1 << 22
_KEY = re.compile(r"[0-9a-f]{32}")  # key_digest's form


def machine_identity(threads: int | None) -> dict[str, Any]:
    """What of this machine and this worker a measured target depends on."""
    from mlperf_mig.emulation.cpu_budget import budget_from_env

    budget = budget_from_env()
    return {
        "cpu_model": cpu_model(),
        "cpus": sorted(os.sched_getaffinity(0)),
        "cpu_budget": None if budget is None else [round(budget[0], 6), budget[1]],
        "threads": threads,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what the platform module says."""
    with contextlib.suppress(OSError, UnicodeDecodeError):
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "cpu model"):
                return value.strip()
    return f"{platform.machine()} {platform.processor()}".strip()


def key_digest(inputs: Mapping[str, Any]) -> str:
    """A file name for `inputs`: the SHA-256 of their canonical JSON (the record keeps them all)."""
    canonical = json.dumps(inputs, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:32]


def _canonical(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """`inputs` as they read back from JSON (tuples become lists), for comparison."""
    return json.loads(json.dumps(inputs, sort_keys=True, default=str))


class WorkCache:
    """The reusable work of one worker, in `root` (None: nothing is reused)."""

    def __init__(self, root: Path | None) -> None:
        self.root = root

    @classmethod
    def for_cache_dir(cls, cache_dir: str | os.PathLike[str] | None) -> WorkCache:
        from mlperf_mig.engines.cache import cache_root

        return cls(cache_root(cache_dir))

    # --- calibrated targets ------------------------------------------------------------------
    def target(self, inputs: Mapping[str, Any]) -> float | None:
        """The target measured for `inputs` before, or None (a miss, said in the log; always
        None in a worker of a study's run, which measures its own: REUSE_TARGETS_ENV)."""
        if os.environ.get(REUSE_TARGETS_ENV) == "0":
            logger.info("not using a cached target: this run of a study measures its own")
            return None
        path = self._path(CALIBRATION_DIR, f"{key_digest(inputs)}.json")
        if path is None or not os.path.lexists(path):
            return None
        data = _record(path)
        if data is None:
            return None
        if not isinstance(data, dict):
            _miss(path, "not a JSON object")
            return None
        if data.get("format") != FORMAT or data.get("version") != VERSION:
            _miss(path, f"format {data.get('format')!r} version {data.get('version')!r}")
            return None
        if data.get("inputs") != _canonical(inputs):
            _miss(path, "made from other inputs")
            return None
        target = data.get("target")
        if not finite_number(target) or not plausible_target(inputs, target):
            _miss(
                path,
                f"target {target!r} is not a plausible {inputs.get('loadgen_scenario')} target",
            )
            return None
        note_fed("calibrated target", path)
        return float(target)

    def store_target(self, inputs: Mapping[str, Any], target: float) -> None:
        """Keep `target` for `inputs` (a failed write is logged: it only costs the reuse)."""
        if not (finite_number(target) and target > 0):
            return
        path = self._path(CALIBRATION_DIR, f"{key_digest(inputs)}.json")
        if path is None:
            return
        record = {
            "format": FORMAT,
            "version": VERSION,
            "inputs": _canonical(inputs),
            "target": target,
        }
        try:
            atomic_write_json(path, record, mode=ENTRY_MODE)
        except (MlperfMigError, OSError) as exc:
            logger.warning("cannot keep the calibrated target in %s: %s", path, exc)

    def forget_target(self, inputs: Mapping[str, Any], why: str) -> None:
        """Drop the target kept for `inputs`: the next run measures again."""
        self.forget_key(key_digest(inputs), why)

    def forget_key(self, key: str, why: str) -> None:
        """Drop the target kept under `key` (a `key_digest`, e.g. one a unified worker sent)."""
        if not _KEY.fullmatch(key):
            logger.warning("not dropping cached target %r: not a key of this cache", key)
            return
        path = self._path(CALIBRATION_DIR, f"{key}.json")
        if path is None:
            return
        with contextlib.suppress(OSError):
            path.unlink()
            logger.info("dropped the cached target %s: %s", path, why)

    # --- generated samples -------------------------------------------------------------------
    def load_samples(
        self, library: SampleLibrary, indices: Sequence[int], source: SampleSource
    ) -> None:
        """`library.load(indices, source)`, from the cache when these samples are in it (then
        the library serves the mapped file), else generated and kept for the next run."""
        unique = library.place(indices)
        rows = library.rows(len(unique))
        inputs = _samples_inputs(source, unique, rows)
        if inputs is None:
            source.fill(unique, rows)
            return
        started = time.monotonic()
        mapped = self._mapped_samples(inputs, rows)
        if mapped is not None:
            library.adopt(mapped)
            logger.info(
                "samples from the cache (%d in %.3f s): %s", len(unique), time.monotonic() - started,
                self._path(SAMPLES_DIR, f"{key_digest(inputs)}.bin"),
            )  # fmt: skip
            return
        source.fill(unique, rows)
        self._store_samples(inputs, rows)

    def _mapped_samples(
        self, inputs: Mapping[str, Any], rows: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray] | None:
        digest = key_digest(inputs)
        data = self._path(SAMPLES_DIR, f"{digest}.bin")
        meta_path = self._path(SAMPLES_DIR, f"{digest}.json")
        if data is None or meta_path is None or not os.path.lexists(meta_path):
            return None
        meta = _record(meta_path)
        if meta is None:
            return None
        expected = sum(a.nbytes for a in rows.values())
        if (
            not isinstance(meta, dict)
            or meta.get("format") != FORMAT
            or meta.get("version") != VERSION
        ):
            _miss(meta_path, "not a samples record of this version")
            return None
        if meta.get("inputs") != _canonical(inputs):
            _miss(meta_path, "made from other inputs")
            return None
        if meta.get("size") != expected or not isinstance(meta.get("sha256"), str):
            _miss(meta_path, f"size {meta.get('size')!r}, expected {expected}")
            return None
        try:
            fd = os.open(data, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                return None
            _miss(data, "a symbolic link" if exc.errno == errno.ELOOP else str(exc))
            return None
        try:
            status = os.fstat(fd)
            if not stat.S_ISREG(status.st_mode):
                _miss(data, "not a regular file")
                return None
            untrusted = untrusted_entry(status)
            if untrusted is not None:
                _miss(data, f"{untrusted}; remove it")
                return None
            if status.st_size != expected:
                _miss(data, f"{status.st_size} bytes, expected {expected} (truncated?)")
                return None
            if meta.get("stamp") != _stamp(status):
                digest_now, stamp = _hash_fd(fd)
                if digest_now != meta["sha256"]:
                    _miss(data, "checksum mismatch (corrupted)")
                    return None
                if stamp is not None:
                    self._write_record(meta_path, {**meta, "stamp": stamp})
            flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
            mapping = mmap.mmap(fd, expected, flags=flags, prot=mmap.PROT_READ)
        except OSError as exc:
            _miss(data, str(exc))
            return None
        finally:
            os.close(fd)
        note_fed("samples file", data)
        arrays, offset = {}, 0
        for name, like in rows.items():
            arrays[name] = np.frombuffer(mapping, like.dtype, like.size, offset).reshape(like.shape)
            offset += like.nbytes
        return arrays

    def _store_samples(self, inputs: Mapping[str, Any], rows: Mapping[str, np.ndarray]) -> None:
        """Write the samples just generated, unless another process is writing them now."""
        digest = key_digest(inputs)
        data = self._path(SAMPLES_DIR, f"{digest}.bin")
        meta_path = self._path(SAMPLES_DIR, f"{digest}.json")
        if data is None or meta_path is None:
            return
        try:
            with _only_writer(data.with_name(f"{digest}.lock")) as writing:
                if writing:
                    meta = _write_samples(data, rows)
                    self._write_record(
                        meta_path,
                        {
                            "format": FORMAT,
                            "version": VERSION,
                            "inputs": _canonical(inputs),
                            **meta,
                        },
                    )
        except (MlperfMigError, OSError) as exc:
            logger.warning("cannot keep the generated samples in %s: %s", data, exc)

    def _write_record(self, path: Path, record: Mapping[str, Any]) -> None:
        try:
            atomic_write_json(path, record, mode=ENTRY_MODE)
        except (MlperfMigError, OSError) as exc:  # a read-only cache: hashed again next time
            logger.debug("cannot write %s: %s", path, exc)

    def _path(self, folder: str, name: str) -> Path | None:
        """`root/folder/name`, or None when the cache is off or a link is on the way (said)."""
        if self.root is None:
            return None
        try:
            return inside(self.root, f"{folder}/{name}", "cached work")
        except MlperfMigError as exc:
            logger.warning("not reusing cached work: %s", exc)
            return None


def _record(path: Path) -> Any:
    """A record of the cache read bounded (`_io.read_json`), or None (a miss, said) when it
    cannot be read or is not the user's (`engines/cache.untrusted_entry`)."""
    try:
        untrusted = untrusted_entry(os.lstat(path))
        if untrusted is not None:
            _miss(path, f"{untrusted}; remove it")
            return None
        return read_json(path, "record", fix="it is made again")
    except (MlperfMigError, OSError) as exc:
        _miss(path, str(exc) or type(exc).__name__)
        return None


def plausible_target(inputs: Mapping[str, Any], target: float) -> bool:
    """Whether a cached target can be one calibration measured: within calibration.py's own
    bounds for its LoadGen scenario (QPS up to its cap, a latency from its floor to a minute)."""
    if not math.isfinite(target) or target <= 0:
        return False
    scenario = inputs.get("loadgen_scenario")
    if scenario in ("SingleStream", "MultiStream"):
        return MIN_LATENCY_MS <= target <= 60_000.0
    cap = SERVER_CAP_QPS if scenario == "Server" else OFFLINE_CAP_QPS
    return MIN_TARGET_QPS <= target <= cap


def _miss(path: Path, why: str) -> None:
    logger.warning("not reusing %s: %s; making it again", path, why)


def _samples_inputs(
    source: SampleSource, unique: Sequence[int], rows: Mapping[str, np.ndarray]
) -> dict[str, Any] | None:
    """The key of a load of synthetic samples, or None when it is not kept (a dataset, which
    is read, not generated; a load too large)."""
    if not isinstance(source, SyntheticSource) or not unique:
        return None
    if sum(a.nbytes for a in rows.values()) > SAMPLES_LIMIT_BYTES:
        return None
    index_bytes = np.asarray(unique, dtype=np.int64).tobytes()
    return {
        "kind": "synthetic samples",
        "benchmark": source.benchmark.name,
        "seed": source.seed,
        "total_count": source.total_count,
        "performance_count": source.performance_count,
        "inputs": [[name, list(a.shape[1:]), a.dtype.str] for name, a in rows.items()],
        "count": len(unique),
        "indices_sha256": hashlib.sha256(index_bytes).hexdigest(),
    }


def _stamp(status: os.stat_result) -> list[int]:
    return [status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns]


def _settled(status: os.stat_result) -> bool:
    changed_ns = max(status.st_mtime_ns, status.st_ctime_ns)
    return time.time_ns() - changed_ns >= STAMP_SETTLE_S * 1e9


def _hash_fd(fd: int) -> tuple[str, list[int] | None]:
    """The SHA-256 of the open file, and its stamp when the bytes hashed can be vouched for by
    it (unchanged while read, last changed STAMP_SETTLE_S ago or more)."""
    before = os.fstat(fd)
    digest = hashlib.sha256()
    offset = 0
    while chunk := os.pread(fd, _CHUNK, offset):
        digest.update(chunk)
        offset += len(chunk)
    after = os.fstat(fd)
    same = _stamp(before) == _stamp(after)
    return digest.hexdigest(), _stamp(after) if same and _settled(after) else None


def _write_samples(path: Path, rows: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Write the rows of every input into `path` (atomically); their size, SHA-256 and stamp.

    The stamp is recorded at once (not after STAMP_SETTLE_S, as for a file found in the
    cache): the bytes hashed are the ones this process wrote, into a file no other process
    had a name for until the rename, and the stamp is read from the written descriptor after
    the rename. Without it the next run would hash the whole file (588 MiB for ResNet50).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    digest = hashlib.sha256()
    size = 0
    try:
        os.fchmod(fd, ENTRY_MODE)
        for array in rows.values():
            view = np.ascontiguousarray(array).data.cast("B")
            digest.update(view)
            while view:
                written = os.write(fd, view)
                view = view[written:]
                size += written
        os.replace(tmp, path)
        stamp = _stamp(os.fstat(fd))
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        os.close(fd)
    return {"size": size, "sha256": digest.hexdigest(), "stamp": stamp}


@contextlib.contextmanager
def _only_writer(lock: Path) -> Iterator[bool]:
    """True while this process holds `lock` (no other writer); False when another one does."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)
