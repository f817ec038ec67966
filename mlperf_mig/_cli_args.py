"""Command-line arguments that several sub-commands share (the harness's and the runner's)."""

from __future__ import annotations

import argparse

from mlperf_mig.errors import SettingsError


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
