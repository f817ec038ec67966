"""Every option of every command says what it does in --help, and the commands take the flags
the options declare."""

from __future__ import annotations

import argparse

from mlperf_mig._cli_args import LAYOUT, RUN, STUDY
from mlperf_mig.cli import build_parser
from mlperf_mig.runner.options import RUN_OPTIONS
from mlperf_mig.study.capacity import SEARCH_OPTIONS


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


def _flags_of(command: str) -> set[str]:
    parser = build_parser()
    (commands,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {flag for a in commands.choices[command]._actions for flag in a.option_strings}


def test_run_commands_take_the_declared_flags() -> None:
    """run, plan and sweep take each run option's declared flag: run all of them, plan all but
    the study's, sweep all but --scenario (it has --scenarios)."""
    groups = {"run": (RUN, LAYOUT, STUDY), "plan": (RUN, LAYOUT), "sweep": (RUN, STUDY)}
    for command, taken in groups.items():
        declared = {o.flag.name for o in RUN_OPTIONS if o.flag is not None}
        wanted = {o.flag.name for o in RUN_OPTIONS if o.flag is not None and o.flag.group in taken}
        assert declared & _flags_of(command) == wanted, command


def test_capacity_takes_the_declared_search_flags() -> None:
    """capacity's search flags are those SearchOptions declares."""
    assert {o.flag.name for o in SEARCH_OPTIONS if o.flag is not None} <= _flags_of("capacity")
