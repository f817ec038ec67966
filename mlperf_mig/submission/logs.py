"""Reading LoadGen's mlperf_log_detail.txt for the submission rules.

The records come from the harness's parse_detail_log; on top, the submission checker
(parsers/loadgen_parser.py) requires the `:::MLLOG` marker on the first line, which is checked
here, and counts records whose metadata says `is_error`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import attrs

from mlperf_mig.errors import MlperfMigError, SubmissionError
from mlperf_mig.harness.logs import parse_detail_log

MARKER = ":::MLLOG"


@attrs.frozen(kw_only=True)
class DetailLog:
    """The records of one mlperf_log_detail.txt and the errors LoadGen logged in it."""

    path: Path
    values: dict[str, Any]
    errors: tuple[str, ...]

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> DetailLog:
        """Parse `path`; raises SubmissionError when it is not a LoadGen detail log."""
        log_path = Path(path)
        try:
            with log_path.open(encoding="utf-8", errors="replace") as handle:
                first = handle.readline()
            records = parse_detail_log(log_path)
        except (OSError, MlperfMigError) as exc:
            raise SubmissionError(f"{log_path}: cannot be read ({exc})") from None
        if not first.startswith(MARKER):
            raise SubmissionError(f"{log_path}: not a LoadGen detail log (first line lacks {MARKER})")
        errors = tuple(records.pop("errors", ()))
        records.pop("warnings", None)
        return cls(path=log_path, values=records, errors=errors)

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    @property
    def scenario(self) -> str | None:
        return self.values.get("effective_scenario")

    @property
    def test_mode(self) -> str | None:
        return self.values.get("effective_test_mode")
