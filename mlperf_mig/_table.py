"""Plain-text and Markdown tables for the CLI and the result reports."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def cell_text(value: object) -> str:
    """One table cell: "-" for None, thousands separators and two decimals for floats."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}"
    return str(value)


def text_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """Return `rows` as an aligned text table with a header line; numbers right-aligned."""
    cells = [[cell_text(row.get(col)) for col in columns] for row in rows]
    widths = [max([len(col)] + [len(r[i]) for r in cells]) for i, col in enumerate(columns)]
    numeric = [
        all(isinstance(row.get(col), (int, float)) for row in rows if row.get(col) is not None)
        for col in columns
    ]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)]
        return "  ".join(parts).rstrip()

    header = line(list(columns))
    rule = "  ".join("-" * w for w in widths)
    return "\n".join([header, rule, *(line(r) for r in cells)])


def markdown_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """Return `rows` as a GitHub-flavoured Markdown table."""
    head = "| " + " | ".join(columns) + " |"
    rule = "| " + " | ".join("---" for _ in columns) + " |"
    body = ["| " + " | ".join(cell_text(row.get(c)) for c in columns) + " |" for row in rows]
    return "\n".join([head, rule, *body])
