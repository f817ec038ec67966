"""The type tests of values that come from people and files, written once.

Python counts True as the number 1, so a check written as `isinstance(value, int)` takes
`repeats=True` or a results file's `"samples": false`; these tests refuse a bool wherever a number
is expected. Each caller raises its own error (a SettingsError for an argument, a DataFileError
for a file), which names the value and what was expected.
"""

from __future__ import annotations

import math
from typing import TypeGuard


def is_whole(value: object, low: float | None = None, high: float | None = None) -> TypeGuard[int]:
    """Whether `value` is an int (never a bool) from `low` to `high`, where they are given."""
    if isinstance(value, bool) or not isinstance(value, int):
        return False
    return (low is None or value >= low) and (high is None or value <= high)


def is_number(
    value: object, low: float | None = None, high: float | None = None
) -> TypeGuard[int | float]:
    """Whether `value` is a finite int or float (never a bool, NaN or infinity) from `low` to
    `high`, where they are given."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if isinstance(value, float) and not math.isfinite(value):
        return False  # an int is always finite (and may be too large for math.isfinite)
    return (low is None or value >= low) and (high is None or value <= high)
