"""Command-line arguments that several sub-commands share (the harness's and the runner's)."""

from __future__ import annotations

import argparse
import re

from mlperf_mig.errors import SettingsError


def whole_number(text: str) -> int:
    """An argparse type: ASCII digits with an optional sign (int() also takes '٣' as 3)."""
    if re.fullmatch(r"\s*[+-]?[0-9]+\s*", text):
        return int(text)
    raise argparse.ArgumentTypeError(f"{text!r} is not a whole number in digits 0-9, e.g. 3")


def decimal_number(text: str) -> float:
    """An argparse type: a finite number in ASCII digits (float() also takes '٣', 'nan' and 'inf')."""
    if re.fullmatch(r"\s*[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\s*", text):
        return float(text)
    raise argparse.ArgumentTypeError(f"{text!r} is not a finite number in digits 0-9, e.g. 2.5")


def add_settings_option(parser: argparse.ArgumentParser) -> None:
    """`--set KEY=VALUE`, repeatable: a LoadGen setting in user.conf keys and units."""
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a LoadGen setting in user.conf keys and units, e.g. min_duration=5000 (repeatable)",
    )


def parse_overrides(pairs: list[str]) -> dict[str, float]:
    """`["min_duration=5000"]` -> `{"min_duration": 5000}`; SettingsError on malformed pairs."""
    overrides: dict[str, float] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        try:
            number = float(value)
        except ValueError:
            number = None
        if not sep or not key.strip() or number is None:
            raise SettingsError(
                f"--set {pair!r} is not KEY=NUMBER (user.conf keys and units, e.g. "
                "min_duration=5000)"
            )
        overrides[key.strip()] = int(number) if number.is_integer() else number
    return overrides
