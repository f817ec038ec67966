"""The report base: a title, a table (columns and rows) and notes, in every form a report takes.

Every report of the project (a run, a repeated run, a sweep, the plan, the advisor's ranking)
says four things: `title()`, `columns()`, `rows()` and `notes()`. `Report` turns them into the
CLI's plain-text table (`table()`, `str()`), Markdown (`to_markdown()`), a notebook's HTML
(`_repr_html_()`), a page of its own (`to_html()`) and a DataFrame (`to_pandas()`), the same
way for every kind, so a new kind of report writes only its four parts.

The parts hold text read back from files (a device, an error, a host note from results.json):
every form a report takes passes its lines through `_text.printable`, so a control character
(ESC, BEL, a bidi override) is shown escaped and never reaches a terminal or a page raw.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from mlperf_mig._table import html_table, markdown_table, require_pandas, text_table
from mlperf_mig._text import printable


def printable_lines(text: str) -> str:
    """`text` with every line through `printable`: its line breaks kept, every other control
    character shown escaped."""
    return "\n".join(printable(line) for line in text.split("\n"))


class Report:
    """A title, the columns and rows of one table, and the notes that qualify its numbers."""

    __slots__ = ()

    # what the plain-text table puts in front of each note (Markdown and HTML list them bare)
    text_note_prefix: ClassVar[str] = ""
    # the notes stand between the title and the table (the plan's settings lines)
    notes_first: ClassVar[bool] = False

    def title(self) -> str:
        raise NotImplementedError

    def columns(self) -> Sequence[str]:
        raise NotImplementedError

    def rows(self) -> Sequence[Mapping[str, Any]]:
        raise NotImplementedError

    def notes(self) -> list[str]:
        return []

    def frame_rows(self) -> Sequence[Mapping[str, Any]]:
        """The rows of `to_pandas()` (the table's own, unless a kind adds columns)."""
        return self.rows()

    def _html_extra(self) -> str:
        """HTML shown between the table and its notes (a sweep's chart); none by default."""
        return ""

    def _shown_title(self) -> str:
        return printable(self.title())

    def _shown_notes(self) -> list[str]:
        return [printable(note) for note in self.notes()]

    def _shown_rows(self) -> list[dict[str, Any]]:
        """The rows with every text cell as one printable line (numbers kept for alignment)."""
        return [
            {
                key: printable(value) if isinstance(value, str) else value
                for key, value in row.items()
            }
            for row in self.rows()
        ]

    def table(self) -> str:
        """The plain-text report: title, table and notes, one per line."""
        body = text_table(self._shown_rows(), self.columns())
        notes = [f"{self.text_note_prefix}{note}" for note in self._shown_notes()]
        lines = [*notes, body] if self.notes_first else [body, *notes]
        return printable_lines("\n".join([self._shown_title(), *lines]))

    def to_markdown(self) -> str:
        body = markdown_table(self._shown_rows(), self.columns())
        notes = "\n".join(f"- {note}" for note in self._shown_notes())
        parts = [notes, body] if self.notes_first else [body, notes]
        return printable_lines("\n\n".join([f"**{self._shown_title()}**", *parts]) + "\n")

    def _repr_html_(self) -> str:
        body = html_table(self._shown_rows(), self.columns()) + self._html_extra()
        notes = (
            "<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in self._shown_notes()) + "</ul>"
        )
        parts = [notes, body] if self.notes_first else [body, notes]
        return printable_lines(f"<p><b>{html.escape(self._shown_title())}</b></p>" + "".join(parts))

    def __str__(self) -> str:
        return self.table()

    def to_html(self) -> str:
        """The report as one self-contained HTML page."""
        title = html.escape(self._shown_title())
        return printable_lines(
            f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title></head>"
            f"<body>{self._repr_html_()}</body></html>\n"
        )

    def to_pandas(self) -> Any:
        """The table as a DataFrame (needs pandas)."""
        pandas = require_pandas()
        return pandas.DataFrame(list(self.frame_rows()))
