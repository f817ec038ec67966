"""Where the shipped data folders (systems/, engines/, harness/) are found."""

from __future__ import annotations

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
