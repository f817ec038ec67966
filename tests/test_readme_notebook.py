"""The Python blocks of the README and of the manual's pages in a real Jupyter kernel: each
document one notebook, each block one cell, each claim checked.

The blocks run verbatim, after one setup cell that moves into a scratch folder and makes
`run` and `sweep` default to the null backend (the full graphs would take minutes on a CPU; the
display and the result kinds are the same). nbclient and ipykernel come with the `test` extra.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow  # a Jupyter kernel runs the README

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("pandas")
pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SETUP = """
import functools, os
os.chdir({folder!r})
import mlperf_mig
mlperf_mig.run = functools.partial(mlperf_mig.run, backend="null")
mlperf_mig.sweep = functools.partial(mlperf_mig.sweep, backend="null")
"""


def _python_blocks(document: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", document.read_text(encoding="utf-8"), flags=re.S)


WITH_PYTHON = [document for document in DOCUMENTS if _python_blocks(document)]


def _outputs(
    cell: Any, kind: str, types: tuple[str, ...] = ("execute_result", "display_data")
) -> list[str]:
    """The texts of `kind` (a MIME type, or 'stderr'/'stdout') among a cell's outputs of `types`."""
    texts = []
    for output in cell.outputs:
        if output.output_type == "stream" and output.name == kind:
            texts.append(output.text)
        elif output.output_type in types and kind in output.get("data", {}):
            texts.append(output["data"][kind])
    return texts


def _value(cell: Any) -> str:
    """The HTML of the value a cell shows (its last expression)."""
    (html,) = _outputs(cell, "text/html", ("execute_result",))
    return html


def _execute(document: Path, folder: Path) -> list[Any]:
    """Every Python block of `document` executed as one cell of one notebook, after the setup cell."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(SETUP.format(folder=str(folder)))]
    notebook.cells += [nbformat.v4.new_code_cell(block) for block in _python_blocks(document)]
    # ipykernel's own "python3" kernel runs this interpreter (the project's environment)
    client = nbclient.NotebookClient(
        notebook,
        timeout=1200,
        kernel_name="python3",
        resources={"metadata": {"path": str(folder)}},
    )
    client.execute()
    return notebook.cells[1:]


@pytest.fixture(name="runs", scope="module")
def fixture_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[Path, list[Any]]:
    """Each document with Python blocks, executed once in its own kernel and folder."""
    return {
        document: _execute(document, tmp_path_factory.mktemp(document.stem))
        for document in WITH_PYTHON
    }


@pytest.fixture(name="executed")
def fixture_executed(runs: dict[Path, list[Any]]) -> list[Any]:
    """The executed cells of every document, in order."""
    return [cell for cells in runs.values() for cell in cells]


def _cell(executed: list[Any], marker: str) -> Any:
    return next(cell for cell in executed if marker in cell.source)


def test_the_readme_and_the_manual_have_python_blocks() -> None:
    """The README has a Python block, and so has the manual's page on measuring a layout."""
    assert {ROOT / "README.md", ROOT / "docs" / "measuring.md"} <= set(WITH_PYTHON)


def test_every_block_runs_in_a_kernel(runs: dict[Path, list[Any]]) -> None:
    """No block of the README or the manual raises in a real kernel (nbclient raises CellExecutionError otherwise) and none writes a traceback."""
    for document, cells in runs.items():
        assert len(cells) == len(_python_blocks(document))
        assert not any("Traceback" in text for cell in cells for text in _outputs(cell, "stderr"))


def test_run_result_shows_its_table_in_the_notebook(executed: list[Any]) -> None:
    """The cell ending in `result` shows the per-instance table with the sum as HTML."""
    html = _value(_cell(executed, "result = mlperf_mig.run("))
    assert "<table" in html and "total (sum)" in html


def test_progress_in_a_notebook_without_widgets_is_one_area_per_round(executed: list[Any]) -> None:
    """Without ipywidgets the progress is an output area updated in place: no tqdm warning, no text bars on stderr."""
    cell = _cell(executed, "result = mlperf_mig.run(")
    stderr = "".join(_outputs(cell, "stderr"))
    assert "TqdmWarning" not in stderr and "[performance]" not in stderr
    progress = _outputs(cell, "text/html", ("display_data",))
    assert any("[performance] done in" in text for text in progress)


def test_to_pandas_shows_one_row_per_instance(executed: list[Any]) -> None:
    """`result.to_pandas()` is a DataFrame with a row for each of layout 7's four instances."""
    html = _value(_cell(executed, "result.to_pandas()"))
    assert "dataframe" in html and "4 rows" in html


def test_sweep_shows_its_chart_inline(executed: list[Any]) -> None:
    """The sweep's cell shows its table and the bar chart as an inline SVG image."""
    html = _value(_cell(executed, "mlperf_mig.sweep("))
    assert "<table" in html and "data:image/svg+xml;base64," in html


def test_plan_block_prints_what_it_says(executed: list[Any]) -> None:
    """The plan block prints the layout its comment promises."""
    cell = _cell(executed, "mlperf_mig.plan(")
    promised = re.search(r"# (\S+): ", cell.source).group(1)
    assert "".join(_outputs(cell, "stdout")).strip() == promised
