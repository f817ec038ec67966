"""The tests' tree mirrors the package's: tests/<folder> holds the tests of mlperf_mig/<folder>."""

from __future__ import annotations

from pathlib import Path

import mlperf_mig

TESTS = Path(__file__).resolve().parent
PACKAGE = Path(mlperf_mig.__file__).resolve().parent
# tests/correctness checks results against independent computations across folders (its conftest
# says why); fixtures/ folders hold recorded data, not tests.
NOT_MIRRORED = {"correctness"}
DATA_FOLDERS = {"fixtures", "__pycache__"}


def _test_folders() -> list[Path]:
    return sorted(
        folder.relative_to(TESTS)
        for folder in TESTS.rglob("*")
        if folder.is_dir() and not DATA_FOLDERS & set(folder.relative_to(TESTS).parts)
    )


def test_every_test_folder_names_a_package_folder() -> None:
    """Each folder under tests/ (but correctness and data folders) is a folder of mlperf_mig."""
    strays = [
        str(folder)
        for folder in _test_folders()
        if folder.parts[0] not in NOT_MIRRORED and not (PACKAGE / folder / "__init__.py").is_file()
    ]
    assert strays == [], f"tests/<folder> with no mlperf_mig/<folder>: {strays}"
