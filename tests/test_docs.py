"""The manual's promises: the generated CLI page lists what `--help` lists, the catalog page every
GPU, the API reference every public name, and the README's links land on pages and headings."""

from __future__ import annotations

import argparse
import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

import mlperf_mig
from mlperf_mig.cli import build_parser
from mlperf_mig.registry import default_catalog

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = (ROOT / "README.md").read_text(encoding="utf-8")


@pytest.fixture(name="hook", scope="module")
def fixture_hook() -> ModuleType:
    """docs/_hooks/generated.py, the MkDocs hook that writes the generated sections."""
    spec = importlib.util.spec_from_file_location(
        "docs_generated", DOCS / "_hooks" / "generated.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(name="cli_page", scope="module")
def fixture_cli_page(hook: ModuleType) -> str:
    """docs/cli.md as the build renders it: its marker replaced by the generated reference."""
    return hook.expand("cli.md", (DOCS / "cli.md").read_text(encoding="utf-8"))


def _commands() -> dict[str, argparse.ArgumentParser]:
    (subparsers,) = [
        a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)
    ]
    return dict(subparsers.choices)


def _section(page: str, command: str) -> str:
    """The generated section of one command: from its heading to the next command's."""
    start = page.index(f"### `mlperf-mig {command}`")
    end = page.find("\n### ", start + 1)
    return page[start : end if end != -1 else len(page)]


def _help_options(parser: argparse.ArgumentParser) -> set[str]:
    """Every option string `mlperf-mig <command> --help` prints, -h and --help aside."""
    flags = set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", parser.format_help()))
    return flags - {"-h", "--help"}


@pytest.mark.parametrize("command", sorted(_commands()))
def test_cli_page_lists_every_option_help_lists(cli_page: str, command: str) -> None:
    """The generated section of each command names every option its --help prints."""
    section = _section(cli_page, command)
    missing = {flag for flag in _help_options(_commands()[command]) if f"{flag}" not in section}
    assert missing == set(), f"mlperf-mig {command}: {sorted(missing)} not on the CLI page"


def test_cli_page_has_a_section_for_each_command_and_no_other(cli_page: str) -> None:
    """The generated page has one section per sub-command of `mlperf-mig`."""
    sections = re.findall(r"^### `mlperf-mig ([\w-]+)`", cli_page, flags=re.M)
    assert sections == list(_commands())


def test_a_page_that_lost_its_marker_is_refused(hook: ModuleType) -> None:
    """The hook raises for cli.md without its marker instead of publishing an empty reference."""
    with pytest.raises(ValueError, match="marker"):
        hook.expand("cli.md", "# CLI\n")


def test_catalog_page_lists_every_gpu_and_profile(hook: ModuleType) -> None:
    """The generated catalog has a section per GPU of the registry with each of its profiles."""
    page = hook.expand("gpus.md", (DOCS / "gpus.md").read_text(encoding="utf-8"))
    for gpu in default_catalog():
        section = page[page.index(f"### {gpu.name}\n") :]
        section = section[: section.find("\n### ", 1) if "\n### " in section[1:] else None]
        assert [p.name for p in gpu.profiles] == re.findall(r"^\| `([^`]+)` \|", section, re.M)


def test_catalog_summary_has_a_row_per_gpu_with_its_slices_and_source(hook: ModuleType) -> None:
    """The catalog's summary table has one row per shipped GPU, with its slices and source (the
    hand-kept table the README had, now generated)."""
    page = hook.expand("gpus.md", (DOCS / "gpus.md").read_text(encoding="utf-8"))
    rows = [line.split(" | ") for line in page.splitlines() if line.startswith("| [")]
    table = {re.sub(r"^\| \[(.+?)\].*", r"\1", cells[0]): (cells[2], cells[4]) for cells in rows}
    assert table == {
        gpu.name: (f"{gpu.compute_slices}/{gpu.memory_slices}", gpu.provenance)
        for gpu in default_catalog()
    }


def test_api_reference_documents_every_public_name() -> None:
    """Every name `mlperf_mig` exports has its entry in the API reference."""
    page = (DOCS / "reference" / "api.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^::: mlperf_mig\.(\w+)", page, flags=re.M))
    assert set(mlperf_mig.__all__) <= documented


def _slug(heading: str) -> str:
    """A heading's anchor as MkDocs (Python-Markdown's toc) and GitHub both make it, for the
    plain headings the manual uses."""
    text = re.sub(r"[^\w\s-]", "", heading).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {_slug(h) for h in re.findall(r"^#+ (.+)$", text, flags=re.M)}


def test_readme_links_land_on_pages_and_headings() -> None:
    """Each relative link of the README names a file that exists and, with #, a heading in it."""
    links = re.findall(r"\]\(([^)\s]+)\)", README)
    relative = [link for link in links if not re.match(r"\w+://", link)]
    assert relative, "the README links into the manual"
    broken = []
    for link in relative:
        path, _, anchor = link.partition("#")
        target = ROOT / path
        if not target.exists() or (anchor and anchor not in _anchors(target)):
            broken.append(link)
    assert broken == []


def test_readme_answers_the_newcomers_questions_in_one_click() -> None:
    """The README's manual table links the pages on unified mode, an H100 and the energy column."""
    table = README[README.index("## The manual") :]
    for question, page in [
        ("unified", "docs/trust.md"),
        ("H100", "docs/real-gpu.md"),
        ("energy", "docs/telemetry.md"),
    ]:
        assert re.search(rf"^\|[^\n]*{question}[^\n]*\]\({re.escape(page)}\)", table, re.M)


def test_readme_reads_in_three_minutes() -> None:
    """The README stays about 150 lines; the rest belongs in the manual."""
    assert len(README.splitlines()) <= 170


def test_every_page_is_in_the_navigation() -> None:
    """Each Markdown page and the notebook under docs/ is listed in mkdocs.yml's nav."""
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = set(re.findall(r"^\s+- (?:[^:\n]+: )?([\w/.-]+\.(?:md|ipynb))$", config, flags=re.M))
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*") if p.suffix in (".md", ".ipynb")}
    assert pages - {p for p in pages if p.startswith("_")} == nav


def test_option_lists_become_an_args_section() -> None:
    """The Griffe extension moves `name: text` entries of the function's own parameters into an
    Args section, in signature order, and leaves prose with a colon alone."""
    pytest.importorskip(
        "griffe", reason="griffe comes with the docs extra (pip install -e '.[docs]')"
    )
    spec = importlib.util.spec_from_file_location(
        "docs_options", DOCS / "_hooks" / "option_lists.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = "Run it.\n\nnote: prose stays\nmode:     one\n          of two\nbackend:  auto\n"
    assert module.as_args_section(text, ["backend", "mode"]) == (
        "Run it.\n\nnote: prose stays\n\nArgs:\n    backend: auto\n    mode: one of two\n"
    )


def test_development_page_names_every_benchmark_script() -> None:
    """docs/development.md lists every script in benchmarks/, and names none that is gone."""
    page = (DOCS / "development.md").read_text(encoding="utf-8")
    scripts = {p.name for p in (ROOT / "benchmarks").glob("*.py")}
    named = set(re.findall(r"`benchmarks/([a-z_]+\.py)`", page))
    assert scripts and named == scripts, (scripts - named, named - scripts)
