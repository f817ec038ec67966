"""Reading LoadGen's logs: the `:::MLLOG` records of mlperf_log_detail.txt and the accuracy log.

Results always come from the detail log's records (reference/mlperf.md section 1), never from
the human-readable summary.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from mlperf_mig._io import read_bounded, read_json
from mlperf_mig.errors import DatasetError

DETAIL_LOG = "mlperf_log_detail.txt"
SUMMARY_LOG = "mlperf_log_summary.txt"
ACCURACY_LOG = "mlperf_log_accuracy.json"
_PREFIX = ":::MLLOG "
# A detail log is a few KiB; one with an error record for every sample of a long run is a few
# MiB. A larger file is refused before a byte of it is read.
DETAIL_LOG_LIMIT = 64 << 20


def read_detail_lines(path: Path, refused: Callable[[str], Exception]) -> list[str]:
    """The lines of the detail log `path`, read with bounds (a regular file reached without a
    link, at most DETAIL_LOG_LIMIT bytes; bytes that are not UTF-8 replaced). Any failure,
    also a missing file, raises `refused(reason)`, the reason a phrase that reads after "it is"."""
    try:
        data = read_bounded(path, DETAIL_LOG_LIMIT, refused, kind="LoadGen detail log")
    except FileNotFoundError:
        raise refused("missing") from None
    return data.decode("utf-8", errors="replace").splitlines()


def parse_detail_log(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Return the `:::MLLOG` records of a detail log as {key: value}.

    `path` is the log file or the folder holding it. When a key occurs more than once the last
    value wins, except the error and warning records, whose messages are collected in order under
    "errors" and "warnings".
    """
    log = Path(path)
    if log.is_dir():
        log = log / DETAIL_LOG

    def refused(reason: str) -> DatasetError:
        return DatasetError(f"cannot read LoadGen detail log {str(log)!r}: it is {reason}")

    lines = read_detail_lines(log, refused)
    records: dict[str, Any] = {"errors": [], "warnings": []}
    for line in lines:
        if not line.startswith(_PREFIX):
            continue
        try:
            record = json.loads(line[len(_PREFIX) :])
        except json.JSONDecodeError:
            continue  # a line cut short when the process died
        key = record.get("key") if isinstance(record, dict) else None
        if not isinstance(key, str) or key in ("errors", "warnings"):
            continue  # not a record LoadGen writes (those two keys are the lists kept here)
        value = record.get("value")
        metadata = record.get("metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        if metadata.get("is_error") or str(key).startswith("error"):
            records["errors"].append(f"{key}: {value}")
        elif metadata.get("is_warning") or str(key).startswith("warning"):
            records["warnings"].append(f"{key}: {value}")
        records[key] = value
    return records


def read_accuracy_log(path: str | os.PathLike[str]) -> list[tuple[int, bytes]]:
    """Return (qsl_idx, payload bytes) of every record of mlperf_log_accuracy.json."""
    log = Path(path)
    if log.is_dir():
        log = log / ACCURACY_LOG
    try:
        entries = read_json(log, "log", error=DatasetError)
        return [(int(e["qsl_idx"]), bytes.fromhex(e["data"])) for e in entries]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DatasetError(f"cannot read LoadGen accuracy log {str(log)!r}: {exc}") from None


@attrs.frozen(kw_only=True)
class TokenEntry:
    """One logged response of a generative workload: its output tokens, the first token LoadGen
    was given on its own (None where none was logged: Offline) and the `token_count` reported."""

    index: int
    tokens: np.ndarray
    first: np.ndarray | None
    count: int | None


def read_token_log(path: str | os.PathLike[str]) -> list[TokenEntry]:
    """The int32 token records of mlperf_log_accuracy.json (`data`, `token_data`,
    `token_count`), checked like any file read back: a record that is not what LoadGen writes
    is refused in one line naming the file."""
    log = Path(path)
    if log.is_dir():
        log = log / ACCURACY_LOG
    try:
        records = read_json(log, "log", error=DatasetError)
        entries = []
        for record in records:
            first = record.get("token_data")
            count = record.get("token_count")
            entries.append(
                TokenEntry(
                    index=int(record["qsl_idx"]),
                    tokens=np.frombuffer(bytes.fromhex(record["data"]), dtype=np.int32),
                    first=None
                    if first is None
                    else np.frombuffer(bytes.fromhex(first), dtype=np.int32),
                    count=None if count is None else int(count),
                )
            )
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise DatasetError(
            f"cannot read the token records of LoadGen accuracy log {str(log)!r}: "
            f"{type(exc).__name__}: {exc}"
        ) from None
    return entries
