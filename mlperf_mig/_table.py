"""Plain-text, Markdown and HTML tables for the CLI and the reports (and pandas, when installed)."""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
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


def html_table(rows: Sequence[Mapping[str, Any]], columns: Iterable[str]) -> str:
    """Return `rows` as an HTML table, every cell escaped."""
    columns = list(columns)
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>"
        + "".join(f"<td>{html.escape(cell_text(row.get(c)))}</td>" for c in columns)
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def require_pandas() -> Any:
    """The pandas module, or ImportError saying how to install it (mlperf-mig does not)."""
    try:
        import pandas
    except ImportError:
        raise ImportError(
            "to_pandas() needs pandas, which mlperf-mig does not install; run `pip install pandas`"
        ) from None
    return pandas
