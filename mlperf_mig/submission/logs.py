"""Reading LoadGen's mlperf_log_detail.txt for the submission rules, as the checker reads it.

The submission checker (parsers/loadgen_parser.py) requires the `:::MLLOG` marker on the first
line, stops with "Encountered invalid line" at any `:::MLLOG` line that is not JSON, takes the
first record of a key that occurs twice, and counts the records whose metadata says `is_error`.
This module reads a log the same way, so our checks see what the MLCommons checker sees.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import attrs

from mlperf_mig.errors import SubmissionError
from mlperf_mig.harness.logs import read_detail_lines

LogValue = Any  # a record's value in a LoadGen log, as JSON gives it (a number, text or a list)

MARKER = ":::MLLOG"


@attrs.frozen(kw_only=True)
class DetailLog:
    """The records of one mlperf_log_detail.txt and the errors LoadGen logged in it."""

    path: Path
    values: dict[str, Any]
    errors: tuple[str, ...]
    invalid_lines: tuple[int, ...] = ()  # 1-based numbers of `:::MLLOG` lines that are not JSON

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> DetailLog:
        """Parse `path`; raises SubmissionError when it is not a LoadGen detail log."""
        log_path = Path(path)
        lines = read_detail_lines(
            log_path, lambda reason: SubmissionError(f"{log_path}: cannot be read (it is {reason})")
        )
        if not lines or not lines[0].startswith(MARKER):
            raise SubmissionError(
                f"{log_path}: not a LoadGen detail log (first line lacks {MARKER})"
            )
        values: dict[str, Any] = {}
        errors: list[str] = []
        invalid: list[int] = []
        for number, line in enumerate(lines, start=1):
            if not line.startswith(MARKER):
                continue
            try:
                record = json.loads(line[len(MARKER) :])
                key = record["key"]
            except (ValueError, TypeError, KeyError):
                invalid.append(number)
                continue
            value = record.get("value")
            metadata = record.get("metadata")
            if isinstance(metadata, dict) and metadata.get("is_error"):
                errors.append(f"{key}: {value}")
            values.setdefault(key, value)  # the checker takes a key's first record
        return cls(path=log_path, values=values, errors=tuple(errors), invalid_lines=tuple(invalid))

    def get(self, key: str, default: object = None) -> LogValue:
        return self.values.get(key, default)

    @property
    def scenario(self) -> str | None:
        return self.values.get("effective_scenario")

    @property
    def test_mode(self) -> str | None:
        return self.values.get("effective_test_mode")
