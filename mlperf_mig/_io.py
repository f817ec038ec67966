"""Small file-system helpers shared by every pillar: atomic writes, writable and claimed folders.

A write that fails (a full disk, a read-only file system) raises OutputDirError naming the path
and the free space left, and leaves the file that was there before untouched.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeGuard

from mlperf_mig._checks import is_number
from mlperf_mig.errors import (
    DataFileError,
    MlperfMigError,
    OutputDirError,
    SettingsError,
    UntrustedPathError,
)

# Plain data as json.loads gives it and json.dumps takes it: dicts, lists, text, numbers, None.
JsonData = Any


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


LOCK_FILE = ".mlperf-mig.lock"
# The longest path a run writes below its folder, e.g.
# "i0-7g.80gb/accuracy/.mlperf_log_accuracy.json.12345678.tmp"; a longer folder fails in LoadGen.
_LONGEST_INSIDE = 96
_NAME_MAX = 255
_PATH_MAX = 4096


def check_output_path(name: str, path: str) -> None:
    """Refuse an output folder the file system cannot hold: empty, not UTF-8, a name or a whole
    path too long for what the run writes inside it."""
    if not path:
        raise OutputDirError(
            f"{name} is empty (that would write into the current folder); pass a folder name"
        )
    try:
        encoded = path.encode("utf-8")
    except UnicodeEncodeError:
        raise OutputDirError(
            f"{name} {path!r} is not valid UTF-8 (LoadGen and results.json need UTF-8 names); "
            "pass a folder name in UTF-8"
        ) from None
    long_name = next(
        (part for part in path.split(os.sep) if len(part.encode("utf-8")) > _NAME_MAX), None
    )
    if long_name is not None:
        raise OutputDirError(
            f"{name}: the folder name {long_name[:40]!r}... is {len(long_name.encode('utf-8'))} bytes, "
            f"more than the {_NAME_MAX} a file name may have; pass a shorter name"
        )
    absolute = os.path.abspath(encoded)
    if len(absolute) + _LONGEST_INSIDE > _PATH_MAX:
        raise OutputDirError(
            f"{name} is {len(absolute)} bytes long as an absolute path; the files of a run inside "
            f"it need at most {_PATH_MAX - _LONGEST_INSIDE}; pass a shorter path"
        )


def check_text_file(path: str, what: str, error: type[MlperfMigError] = SettingsError) -> None:
    """A text file the library will read: it must be readable and UTF-8."""
    try:
        Path(path).read_bytes().decode("utf-8")
    except OSError as exc:
        raise error(f"cannot read {what} {path!r}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise error(
            f"{what} {path!r} is not UTF-8 text (byte {exc.start}: {exc.reason}); pass a UTF-8 file"
        ) from None


SMALL_FILE_LIMIT = 1 << 20  # records, verify files and audit.configs are far smaller


def read_bounded(
    path: str | os.PathLike[str],
    limit: int,
    refused: Callable[[str], Exception],
    *,
    kind: str = "file",
    follow_links: bool = False,
) -> bytes:
    """The bytes of the regular file `path`, at most `limit` (its size checked before a byte
    is read). Opened without blocking, so a FIFO or a device is refused rather than waited on;
    a symbolic link is refused without being followed unless `follow_links` (a file the user
    names, not one read back). Any failure raises `refused(reason)`, the reason a phrase that
    reads after "<file> is " ("not a regular file ..."); FileNotFoundError when the file is not
    there at all, for the caller to word."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_links:
            raise refused("a symbolic link (nothing read back is followed)") from None
        raise refused(f"unreadable ({exc.strerror or exc})") from None
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise refused("not a regular file (a FIFO, a device or a folder)")
        if status.st_size > limit:
            raise refused(f"{status.st_size} bytes, more than the {limit} a {kind} may hold")
        data = os.read(fd, limit + 1)
    except OSError as exc:
        raise refused(f"unreadable ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    if len(data) > limit:  # it grew after the check
        raise refused(f"larger than the {limit} bytes a {kind} may hold")
    return data


def read_small_text(path: Path, limit: int = SMALL_FILE_LIMIT) -> str:
    """The UTF-8 text of the regular file `path`, not following a link, at most `limit` bytes;
    SettingsError saying why not, a phrase that reads after "<file> is " (a link, not a
    regular file, too large, unreadable, not UTF-8)."""
    try:
        data = read_bounded(path, limit, SettingsError)
    except FileNotFoundError as exc:
        raise SettingsError(f"unreadable ({exc.strerror or exc})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SettingsError("not UTF-8 text") from None


# --- JSON read back -----------------------------------------------------------------------------
# The most bytes each kind of JSON file the project reads back may hold: far above what this
# tool writes (a results.json of 56 instances with telemetry is well under 1 MiB), far below
# what would exhaust memory. A larger file is refused before a byte of it is read.
JSON_LIMITS: dict[str, int] = {
    "results": 32 << 20,  # results.json, plan.json, smoke.json
    "index": 16 << 20,  # repeats.json, sweep.json
    "store": 4 << 20,  # the cache's capacity and speed stores
    "record": 1 << 16,  # a cache record or sidecar: a key, a digest and a number
    # LoadGen's mlperf_log_accuracy.json: hex payloads, e.g. BERT's 10,833 x 3 KiB x 2 = 66 MB
    "log": 1 << 30,
}
# Deeper than anything this tool writes (results.json: 7 levels); a deeper file is refused
# in one line instead of a RecursionError.
JSON_DEPTH_LIMIT = 64


def read_json(
    path: str | os.PathLike[str],
    kind: str,
    *,
    error: type[MlperfMigError] = DataFileError,
    fix: str = "pass a file this tool wrote, or write it again",
) -> JsonData:
    """The JSON value of the file at `path`, read with bounds: a regular file reached without
    following a link (a FIFO, a device or a symlink is refused without opening it for reading
    or waiting on it), at most JSON_LIMITS[kind] bytes (checked before reading), UTF-8, nested
    at most JSON_DEPTH_LIMIT deep. Any failure is one `error` naming the file, what was wrong
    and `fix`; FileNotFoundError when the file is not there at all."""
    name = str(path)

    def refused(reason: str) -> MlperfMigError:
        return error(f"{name!r} is {reason}; {fix}")

    data = read_bounded(path, JSON_LIMITS[kind], refused, kind=f"{kind} file")
    try:
        value = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise refused(f"not UTF-8 text (byte {exc.start})") from None
    except RecursionError:
        raise refused(f"nested deeper than {JSON_DEPTH_LIMIT} levels") from None
    except ValueError as exc:
        raise refused(f"not JSON ({exc})") from None
    if json_depth(value) > JSON_DEPTH_LIMIT:
        raise refused(f"nested deeper than {JSON_DEPTH_LIMIT} levels")
    return value


def json_depth(value: JsonData) -> int:
    """How deep lists and objects nest in `value` (0 for a scalar), without recursion."""
    deepest = 0
    stack: list[tuple[JsonData, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[JsonData] = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth + 1)
        if deepest > JSON_DEPTH_LIMIT:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


def free_space(path: str | os.PathLike[str]) -> str:
    """The free space of the file system holding `path` (or its nearest existing parent)."""
    folder = Path(path).absolute()
    while folder != folder.parent:
        try:
            if folder.exists():
                break
        except OSError:  # a name too long to look up: its parent holds the answer
            pass
        folder = folder.parent
    try:
        free: float = shutil.disk_usage(folder).free
    except OSError:
        return "unknown free space"
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if free < 1024 or unit == "GiB":
            return f"{free:.0f} {unit} free" if unit == "bytes" else f"{free:.1f} {unit} free"
        free /= 1024
    return f"{free:.1f} TiB free"


def write_failed(path: str | os.PathLike[str], exc: OSError) -> OutputDirError:
    """One line for a write that failed: the path, the reason and the free space left."""
    return OutputDirError(
        f"cannot write {str(path)!r}: {exc.strerror or exc} ({free_space(path)}); what was "
        "already written is kept; free some space or pass an output folder on another disk"
    )


def atomic_write_bytes(
    path: str | os.PathLike[str], data: bytes, *, mode: int | None = None
) -> Path:
    """Write `data` to `path` so that readers see either the old file or the whole new one,
    with `mode` (default: what the user's umask gives any file).

    A failed write (full disk) raises OutputDirError and leaves the old file as it was.
    """
    destination = Path(path)
    try:
        destination.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(
            dir=destination.parent, prefix=f".{destination.name}.", suffix=".tmp"
        )
    except OSError as exc:
        raise write_failed(destination, exc) from None
    try:
        # mkstemp makes the file 0600; a shared output gets what the user's umask gives any file.
        os.fchmod(fd, 0o666 & ~current_umask() if mode is None else mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, destination)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise write_failed(destination, exc) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return destination


def current_umask() -> int:
    """The process's umask (read by setting it and putting it back at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | os.PathLike[str], text: str, *, mode: int | None = None) -> Path:
    """Atomic write of UTF-8 text."""
    return atomic_write_bytes(path, text.encode("utf-8"), mode=mode)


def atomic_write_json(
    path: str | os.PathLike[str], obj: object, *, mode: int | None = None
) -> Path:
    """Atomic write of `obj` as indented JSON with a trailing newline."""
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n", mode=mode)


@contextlib.contextmanager
def claim_folder(
    path: str | os.PathLike[str], *, refuse: str | None = None, what: str = "a run"
) -> Iterator[Path]:
    """Create `path` if needed and hold it for the duration of the block.

    The claim is an exclusive lock on `path/.mlperf-mig.lock` (released by the kernel when the
    process ends, however it ends), so a second claim, from this process or another, is refused
    with one line. A folder that already holds `refuse` (the file a finished run leaves) is
    refused too, checked again once the lock is held.
    """
    folder = Path(path)
    _refuse_in_use(folder)
    _refuse_existing(folder, refuse, what)
    folder = ensure_writable_dir(folder)
    lock = folder / LOCK_FILE
    try:
        # O_NOFOLLOW: a lock planted as a symlink must not truncate the file it points to
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        raise write_failed(lock, exc) from None
    try:
        _lock(fd, fcntl.LOCK_EX, folder)
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        except OSError as exc:
            raise write_failed(lock, exc) from None
        _refuse_existing(folder, refuse, what)
        yield folder
    finally:
        os.close(fd)


def _lock(fd: int, kind: int, folder: Path) -> None:
    """flock without waiting; a folder another claim holds is refused with the holder's pid."""
    try:
        fcntl.flock(fd, kind | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", errors="replace").strip() or "unknown"
        raise OutputDirError(
            f"{str(folder)!r} is in use by another mlperf-mig run (pid {holder}); wait for it to "
            "finish or pass another output folder"
        ) from None


def _refuse_in_use(folder: Path) -> None:
    """Refuse a folder whose lock is held, before looking at what it holds (a running run's
    results.json is not a finished run)."""
    try:
        fd = os.open(folder / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        _lock(fd, fcntl.LOCK_SH, folder)
    finally:
        os.close(fd)


def _refuse_existing(folder: Path, name: str | None, what: str) -> None:
    if name is not None and (folder / name).exists():
        raise OutputDirError(
            f"{str(folder)!r} already holds {what} ({name}) that this one would overwrite; pass a "
            "new output folder, or move that one away first"
        )


# --- paths and values read back from files the project does not trust ----------------------
def finite_number(value: object) -> TypeGuard[int | float]:
    """A JSON number that is one: an int or float, finite, not a bool (json reads NaN and
    Infinity, and True is an int)."""
    return is_number(value)


# A name that becomes one path component: no separators, no leading dot, no control characters.
_SAFE_NAME = re.compile(r"[A-Za-z0-9_+@=][A-Za-z0-9._+@=,-]{0,127}")


def safe_name(value: object, what: str, source: str | os.PathLike[str]) -> str:
    """`value`, read from `source`, as a name that is one path component of its folder.

    Refused with one line naming the file, the field and the pattern: a name with '/', '..', a
    leading dot, spaces or control characters would write or read outside the folder it names.
    """
    if isinstance(value, str) and _SAFE_NAME.fullmatch(value) and ".." not in value:
        return value
    raise UntrustedPathError(
        f"{str(source)!r}: {what} {value!r} is not a plain name (letters, digits and . _ + @ = , -, "
        "not starting with a dot, no '/' or '..'); the file was edited or is not one this tool "
        "wrote: fix that field or write the folder again"
    )


def inside(folder: str | os.PathLike[str], relative: object, what: str) -> Path:
    """`folder/relative`, refused unless it stays inside `folder` with no symlink on the way.

    `relative` comes from a file the project reads back (an index, results.json, a tree): an
    absolute path, a `..` that climbs out, or a symlink anywhere below `folder` is refused with
    one line naming it. The path need not exist; what exists of it is checked.
    """
    base = Path(folder)
    if not isinstance(relative, (str, os.PathLike)) or not str(relative):
        raise UntrustedPathError(
            f"{what} in {str(base)!r} is {relative!r}, not a path relative to that folder; "
            "fix the field or write the folder again"
        )
    rel = Path(relative)
    if rel.is_absolute() or ".." in rel.parts:
        raise UntrustedPathError(
            f"{what} {str(relative)!r} leaves {str(base)!r} (an absolute path or '..'); paths "
            "read back must stay inside their folder: fix the field or write the folder again"
        )
    path = base
    for part in rel.parts:
        path = path / part
        if path.is_symlink():
            raise UntrustedPathError(
                f"{str(path)!r} ({what}) is a symbolic link; nothing is followed out of "
                f"{str(base)!r}: replace the link with the file itself"
            )
    return path


def refuse_links_below(folder: str | os.PathLike[str], what: str) -> None:
    """Refuse a folder that holds a symlink anywhere below it (before copying or chmod-ing it)."""
    base = Path(folder)
    if base.is_symlink():
        raise UntrustedPathError(
            f"{str(base)!r} ({what}) is a symbolic link; pass the folder itself"
        )
    for root, dirs, files in os.walk(base, followlinks=False):
        for name in dirs + files:
            path = Path(root) / name
            if path.is_symlink():
                raise UntrustedPathError(
                    f"{str(path)!r} in {what} {str(base)!r} is a symbolic link; nothing is "
                    "followed out of a folder the tool reads: replace the link with the file itself"
                )
