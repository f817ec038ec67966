"""The report base (mlperf_mig/_report.py): four parts give every form of a report."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from mlperf_mig._report import Report


class _Fruit(Report):
    """A toy report of two rows and a note."""

    def title(self) -> str:
        return "fruit <&>"

    def columns(self) -> list[str]:
        return ["name", "kg"]

    def rows(self) -> list[dict[str, Any]]:
        return [{"name": "apple", "kg": 1.5}, {"name": "pear", "kg": None}]

    def notes(self) -> list[str]:
        return ["weighed once"]


class _Plan(_Fruit):
    notes_first = True
    text_note_prefix = "note: "


def test_text_is_title_table_notes() -> None:
    """table() and str() are the title, the aligned table and the notes, one per line."""
    lines = _Fruit().table().splitlines()
    assert lines == [
        "fruit <&>",
        "name     kg",
        "-----  ----",
        "apple  1.50",
        "pear      -",
        "weighed once",
    ]
    assert str(_Fruit()) == _Fruit().table()


def test_markdown_lists_the_notes_under_the_table() -> None:
    """to_markdown() is the bold title, the table and the notes as a list."""
    text = _Fruit().to_markdown()
    assert text.startswith("**fruit <&>**\n\n| name | kg |") and text.endswith(
        "\n\n- weighed once\n"
    )


def test_html_escapes_every_text() -> None:
    """_repr_html_() and the page of to_html() escape the title, cells and notes."""
    page = _Fruit().to_html()
    assert page.startswith("<!DOCTYPE html>") and "fruit &lt;&amp;&gt;" in page
    assert "<td>apple</td>" in page and "<li>weighed once</li>" in page


def test_notes_can_stand_above_the_table_with_a_prefix_in_text() -> None:
    """A kind whose notes come first (the plan) has them above the table; its prefix is text-only."""
    report = _Plan()
    assert report.table().splitlines()[:2] == ["fruit <&>", "note: weighed once"]
    assert report.to_markdown().index("- weighed once") < report.to_markdown().index("| name")
    assert "<li>weighed once</li>" in report._repr_html_()


@pytest.mark.skipif(importlib.util.find_spec("pandas") is None, reason="pandas is not installed")
def test_to_pandas_has_the_table_rows() -> None:
    """to_pandas() is one DataFrame row per table row."""
    frame = _Fruit().to_pandas()
    assert list(frame["name"]) == ["apple", "pear"]
