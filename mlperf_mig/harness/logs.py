"""Reading LoadGen's logs: the `:::MLLOG` records of mlperf_log_detail.txt and the accuracy log.

Results always come from the detail log's records (reference/mlperf.md section 1), never from
the human-readable summary.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from mlperf_mig.errors import DatasetError

DETAIL_LOG = "mlperf_log_detail.txt"
SUMMARY_LOG = "mlperf_log_summary.txt"
ACCURACY_LOG = "mlperf_log_accuracy.json"
_PREFIX = ":::MLLOG "


def parse_detail_log(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Return the `:::MLLOG` records of a detail log as {key: value}.

    `path` is the log file or the folder holding it. When a key occurs more than once the last
    value wins, except the error and warning records, whose messages are collected in order under
    "errors" and "warnings".
    """
    log = Path(path)
    if log.is_dir():
        log = log / DETAIL_LOG
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as exc:
        raise DatasetError(
            f"cannot read LoadGen detail log {str(log)!r}: {exc.strerror or exc}"
        ) from None
    records: dict[str, Any] = {"errors": [], "warnings": []}
    for line in lines:
        if not line.startswith(_PREFIX):
            continue
        try:
            record = json.loads(line[len(_PREFIX) :])
        except json.JSONDecodeError:
            continue  # a line cut short when the process died
        key, value = record.get("key"), record.get("value")
        metadata = record.get("metadata") or {}
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
        entries = json.loads(log.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise DatasetError(f"cannot read LoadGen accuracy log {str(log)!r}: {exc}") from None
    return [(int(e["qsl_idx"]), bytes.fromhex(e["data"])) for e in entries]
