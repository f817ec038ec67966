"""The manual's CLI page says which commands take --json, and the CLI agrees."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from mlperf_mig.cli import build_parser

CLI_PAGE = (Path(__file__).resolve().parent.parent / "docs" / "cli.md").read_text(encoding="utf-8")


def _commands() -> dict[str, argparse.ArgumentParser]:
    (subparsers,) = [
        a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)
    ]
    return dict(subparsers.choices)


def _takes_json(parser: argparse.ArgumentParser) -> bool:
    return any("--json" in action.option_strings for action in parser._actions)


def _page_lists() -> tuple[list[str], list[str]]:
    """(commands the CLI page says take --json, commands it says print no table)."""
    match = re.search(
        r"`--json`\s+prints\s+machine-readable\s+output\s+instead\s+of\s+the\s+table\s+in\s+(.*?);"
        r"(.*?)\s+print\s+no\s+table",
        CLI_PAGE,
        flags=re.S,
    )
    assert match, "docs/cli.md no longer says which commands take --json"
    return re.findall(r"`([\w-]+)`", match.group(1)), re.findall(r"`([\w-]+)`", match.group(2))


def test_commands_the_cli_page_lists_take_json() -> None:
    """Every command the CLI page lists with --json has the option."""
    with_json, _ = _page_lists()
    commands = _commands()
    assert [name for name in with_json if not _takes_json(commands[name])] == []


def test_commands_the_cli_page_lists_without_a_table_have_no_json() -> None:
    """The commands the CLI page says print no table have no --json (else the page is stale)."""
    _, tables_only = _page_lists()
    commands = _commands()
    assert tables_only and [name for name in tables_only if _takes_json(commands[name])] == []


def test_every_command_with_json_is_on_the_cli_page() -> None:
    """No command takes --json without the CLI page saying so."""
    with_json, _ = _page_lists()
    assert sorted(n for n, p in _commands().items() if _takes_json(p)) == sorted(with_json)
