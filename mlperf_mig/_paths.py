"""Where the shipped data folders (systems/, engines/, harness/) are found, and path fields kept
as text."""

from __future__ import annotations

import os
from pathlib import Path

from mlperf_mig.errors import DataFileError

_PACKAGE = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """Return the shipped data folder `name`: inside the wheel, or at the top of a source checkout."""
    for candidate in (_PACKAGE / "_data" / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise DataFileError(
        f"data folder {name!r} is missing from the installation (looked in {_PACKAGE / '_data'} "
        f"and {_PACKAGE.parent}); reinstall mlperf-mig"
    )


def path_text(path: str | os.PathLike[str]) -> str:
    """`path` as text: the converter of record fields that take a str or a Path and keep a str
    (os.fspath itself also takes bytes, which these fields do not)."""
    return os.fspath(path)


def optional_path_text(path: str | os.PathLike[str] | None) -> str | None:
    """`path_text` of a field whose None means "not given"."""
    return None if path is None else os.fspath(path)
