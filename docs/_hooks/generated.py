"""The manual's generated sections: a MkDocs hook (mkdocs.yml `hooks:`).

docs/cli.md and docs/gpus.md hold a marker line each; at build time the marker is replaced by the
reference made from the code itself, so neither can drift: the CLI from `build_parser()` (every
sub-command, its usage and every option with its --help text), the catalog from the registry's
`default_catalog()` (every GPU with its profiles and provenance, the study's layouts on it).
A page that lost its marker fails the build. tests/test_docs.py checks the CLI section against
each command's `--help`.
"""

from __future__ import annotations

import argparse
import re
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

CLI_MARKER = "<!-- generated: cli -->"
CATALOG_MARKER = "<!-- generated: catalog -->"


def _cell(text: str) -> str:
    """Text for a Markdown table cell: `|` escaped, and outside code spans `<`, `>`, `*`, `_`
    shown as themselves (argparse help says `<outdir>/repeat-<k>` and `--gpu-count`)."""
    parts = re.split(r"(`[^`]*`)", " ".join(text.split()))
    escaped = []
    for part in parts:
        if part.startswith("`") and part.endswith("`") and len(part) > 1:
            escaped.append(part.replace("|", r"\|"))
        else:
            part = part.replace("\\", "\\\\").replace("|", r"\|")
            part = part.replace("<", "&lt;").replace(">", "&gt;")
            escaped.append(re.sub(r"([*_\[\]])", r"\\\1", part))
    return "".join(escaped)


def _commands(
    parser: argparse.ArgumentParser,
) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """(name, one-line help, parser) of each sub-command, in the order `--help` lists them."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, helps.get(name, ""), sub


def _invocation(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    formatter = parser._get_formatter()
    return formatter._format_action_invocation(action)


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    formatter = parser._get_formatter()
    return formatter._expand_help(action) if action.help else ""


def _default(action: argparse.Action) -> str:
    """The default a value option falls back on; none for flags (a `--no-x` flag's True is not
    something the user types)."""
    if not isinstance(action, argparse._StoreAction | argparse._AppendAction):
        return ""
    if action.default in (None, "", [], argparse.SUPPRESS) or not action.option_strings:
        return ""
    return f"`{action.default}`"


def command_section(name: str, summary: str, parser: argparse.ArgumentParser) -> str:
    """One sub-command: its summary, description, usage and a table of every argument."""
    lines = [f"### `mlperf-mig {name}` {{#{name}}}", ""]
    if summary:
        lines += [_cell(summary[0].upper() + summary[1:]) + ".", ""]
    if parser.description:
        lines += [_cell(parser.description), ""]
    # argparse indents the usage's later lines under "usage: ", which is not printed here
    usage = parser.format_usage().removeprefix("usage: ").strip().replace("\n       ", "\n")
    lines += ["```text", usage, "```", ""]
    rows = [
        f"| `{_invocation(parser, action)}` | {_default(action)} | {_cell(_help(parser, action))} |"
        for action in parser._actions
        if action.help != argparse.SUPPRESS and "-h" not in action.option_strings
    ]
    if rows:
        lines += ["| argument | default | what it does |", "| --- | --- | --- |", *rows, ""]
    if parser.epilog:
        lines += [_cell(parser.epilog), ""]
    return "\n".join(lines)


def cli_reference() -> str:
    """The CLI reference: every sub-command of `mlperf-mig`, made from its parser."""
    from mlperf_mig.cli import build_parser

    parser = build_parser()
    commands = list(_commands(parser))
    index = ["| command | what it does |", "| --- | --- |"]
    index += [f"| [`{name}`](#{name}) | {_cell(summary)} |" for name, summary, _ in commands]
    top = [
        f"| `{_invocation(parser, a)}` | {_cell(_help(parser, a))} |"
        for a in parser._actions
        if a.option_strings and "-h" not in a.option_strings
    ]
    lines = [
        *index,
        "",
        "Options every command takes before its name (`mlperf-mig -v run ...`):",
        "",
        "| option | what it does |",
        "| --- | --- |",
        *top,
        "",
    ]
    return "\n".join(lines + [command_section(*command) for command in commands])


def _ids(values: tuple[int, ...]) -> str:
    return ", ".join(f"0x{value:04X}" for value in values) or "-"


def _study_layouts(gpu: Any, catalog: Any) -> str:
    from mlperf_mig.errors import LayoutError
    from mlperf_mig.registry.study import study_layout, study_scenarios

    cells = []
    for scenario in study_scenarios(catalog):
        try:
            cells.append(f"{scenario.scenario}: `{study_layout(scenario.scenario, gpu, catalog)}`")
        except LayoutError:
            cells.append(f"{scenario.scenario}: does not fit")
    return "; ".join(cells)


def gpu_section(gpu: Any, catalog: Any) -> str:
    """One GPU of the catalog: its facts, provenance and profile table."""
    facts = [
        ("aliases", ", ".join(f"`{a}`" for a in gpu.aliases) or "-"),
        ("PCI device IDs", _ids(gpu.pci_device_ids)),
        ("PCI subsystem IDs", _ids(gpu.pci_subsystem_ids) if gpu.pci_subsystem_ids else ""),
        ("architecture", gpu.architecture),
        ("memory", f"{gpu.memory_gib:g} GiB" if gpu.memory_gib else ""),
        ("slices (compute/memory)", f"{gpu.compute_slices}/{gpu.memory_slices}"),
        ("minimum driver", gpu.min_driver),
        ("before MIG", _cell(gpu.prerequisites)),
        ("provenance", gpu.provenance),
        ("inferred fields", ", ".join(gpu.inferred_fields)),
        ("study layouts 1-8", _study_layouts(gpu, catalog)),
        ("sources", _cell("; ".join(gpu.sources))),
    ]
    lines = [f"### {gpu.name}", ""]
    lines += [f"- **{label}**: {value}" for label, value in facts if value]
    lines += [
        "",
        "| profile | ID | compute/memory slices | memory | SMs | max instances | placements "
        "(start slices) | provenance | inferred |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for p in gpu.profiles:
        memory = f"{p.memory_gib:g} GiB" if p.memory_gib else "-"
        starts = " ".join(str(s) for s in p.placement_starts)
        lines.append(
            f"| `{p.name}` | {p.profile_id} | {p.compute_slices}/{p.memory_slices} | {memory} | "
            f"{p.sms if p.sms is not None else 'unknown'} | {p.max_instances} | {starts} | "
            f"{p.provenance} | {', '.join(p.inferred_fields) or '-'} |"
        )
    return "\n".join([*lines, ""])


def catalog_reference() -> str:
    """The catalog: a summary row per GPU, then each GPU's section, made from the registry."""
    from mlperf_mig.registry.catalog import default_catalog

    catalog = default_catalog()
    rows = [
        "| GPU (catalog name) | PCI device IDs | compute/memory slices | profiles | source | "
        "inferred fields |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for gpu in catalog:
        anchor = re.sub(r"[^a-z0-9-]", "", gpu.name.lower().replace(" ", "-"))
        rows.append(
            f"| [{gpu.name}](#{anchor}) | {_ids(gpu.pci_device_ids)} | "
            f"{gpu.compute_slices}/{gpu.memory_slices} | {len(gpu.profiles)} | {gpu.provenance} | "
            f"{', '.join(gpu.inferred_fields) or '-'} |"
        )
    sections = [gpu_section(gpu, catalog) for gpu in catalog]
    return "\n".join([*rows, "", *sections])


GENERATORS: dict[str, tuple[str, Callable[[], str]]] = {
    "cli.md": (CLI_MARKER, cli_reference),
    "gpus.md": (CATALOG_MARKER, catalog_reference),
}


def expand(src_uri: str, markdown: str) -> str:
    """The page's Markdown with its marker replaced by the generated reference."""
    if src_uri not in GENERATORS:
        return markdown
    marker, generate = GENERATORS[src_uri]
    if marker not in markdown:
        raise ValueError(f"docs/{src_uri} lost its marker line {marker!r}; put it back")
    return markdown.replace(marker, generate())


def on_config(config: Any, **_: Any) -> Any:
    """MkDocs hook, before any page: the API pages inspect `mlperf_mig.run` and its neighbours at
    run time (their docstrings' option lists are made at import), and griffe's inspection imports
    every module of the package; mlperf_mig/__main__.py would run the CLI with mkdocs' own
    arguments, so in the build it is an empty module."""
    sys.modules.setdefault("mlperf_mig.__main__", types.ModuleType("mlperf_mig.__main__"))
    return config


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """MkDocs hook: fill in the generated sections of cli.md and gpus.md."""
    return expand(page.file.src_uri, markdown)
