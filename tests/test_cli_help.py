"""Every option of every command says what it does in --help."""

from __future__ import annotations

import argparse

from mlperf_mig.cli import build_parser


def _options_without_help(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[str]:
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                missing += _options_without_help(sub, (*path, name))
        elif action.option_strings and not action.help:
            missing.append(f"mlperf-mig {' '.join(path)} {'/'.join(action.option_strings)}")
    return missing


def test_every_option_has_a_help_text() -> None:
    """No option of any sub-command has an empty --help entry."""
    assert _options_without_help(build_parser()) == []
