"""The README's promises: its runnable example works and CI runs its test command."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


def test_quickstart_is_two_commands_and_ci_runs_the_test_one() -> None:
    """The quickstart has exactly two commands and .ci/run runs the second one verbatim."""
    commands = [line for line in _blocks("bash")[0].splitlines() if line.strip()]
    assert len(commands) == 2
    assert commands[1] in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_plan_example_runs_and_prints_what_it_says(capsys: pytest.CaptureFixture[str]) -> None:
    """The README's plan() example runs and prints the layout its comment promises."""
    example = next(block for block in _blocks("python") if "plan(" in block)
    exec(compile(example, "README.md", "exec"), {})
    promised = re.search(r"# (\S+): ", example).group(1)
    assert capsys.readouterr().out.strip() == promised
