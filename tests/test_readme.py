"""The README's promises: its quickstart is what CI runs, and the manual's plan example prints what it says."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
MANUAL = ROOT / "docs"


def _blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def _python_blocks() -> list[str]:
    """Every Python block of the README and the manual's pages."""
    texts = [README] + [page.read_text(encoding="utf-8") for page in sorted(MANUAL.rglob("*.md"))]
    return [block for text in texts for block in _blocks(text, "python")]


def test_quickstart_is_two_commands_and_ci_runs_the_test_one() -> None:
    """The quickstart has exactly two commands and .ci/run runs the second one verbatim."""
    commands = [line for line in _blocks(README, "bash")[0].splitlines() if line.strip()]
    assert len(commands) == 2
    assert commands[1] in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_plan_example_runs_and_prints_what_it_says(capsys: pytest.CaptureFixture[str]) -> None:
    """The manual's plan() example runs and prints the layout its comment promises."""
    example = next(block for block in _python_blocks() if "plan(" in block)
    exec(compile(example, "docs/measuring.md", "exec"), {})
    promised = re.search(r"# (\S+): ", example).group(1)
    assert capsys.readouterr().out.strip() == promised


def test_fast_subset_deselects_a_declared_marker_and_ci_runs_everything() -> None:
    """The README's fast subset leaves out a marker pyproject declares; .ci/run leaves out none."""
    fast = re.search(r'`\.venv/bin/python -m pytest -q -m "not (\w+)"`', README)
    assert fast, "the README names its fast subset under the quickstart"
    ini = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    markers = ini["tool"]["pytest"]["ini_options"]["markers"]
    assert any(line.startswith(f"{fast.group(1)}:") for line in markers)
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert [line for line in ci.splitlines() if re.search(r"pytest\b.* -[mk] ", line)] == []


def test_ci_builds_the_manual_strictly_with_the_docs_extra() -> None:
    """.ci/run installs the docs extra and builds the manual with --strict."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"pip install .*-e '\.\[[\w,]*docs[\w,]*\]'", ci)
    assert re.search(r"^[^#]*mkdocs build --strict", ci, flags=re.M)
