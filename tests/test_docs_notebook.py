"""examples/quickstart.ipynb, the notebook a user opens first, runs in a real Jupyter kernel.

Its cells run verbatim after one setup cell (a scratch folder, `run` and `sweep` on the null
backend, as tests/test_readme_notebook.py does): each step shows what its text promises. The
committed copy, which the manual renders, is checked for errors without a kernel.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest

NOTEBOOK = Path(__file__).resolve().parent.parent / "examples" / "quickstart.ipynb"
SETUP = """
import functools, os
os.chdir({folder!r})
import mlperf_mig
mlperf_mig.run = functools.partial(mlperf_mig.run, backend="null")
mlperf_mig.sweep = functools.partial(mlperf_mig.sweep, backend="null")
"""


@functools.cache
def _committed() -> dict[str, Any]:
    return json.loads(NOTEBOOK.read_text(encoding="utf-8"))


def test_committed_notebook_shows_no_error() -> None:
    """The committed notebook (rendered into the manual) holds no error output and every code
    cell was run, in order."""
    cells = [c for c in _committed()["cells"] if c["cell_type"] == "code"]
    assert [o for c in cells for o in c["outputs"] if o["output_type"] == "error"] == []
    assert [c["execution_count"] for c in cells] == list(range(1, len(cells) + 1))


def test_docs_page_is_the_notebook() -> None:
    """docs/quickstart.ipynb is a link to the example, so the manual renders the same file."""
    page = NOTEBOOK.parent.parent / "docs" / "quickstart.ipynb"
    assert page.is_symlink() and page.resolve() == NOTEBOOK.resolve()


def _text(cell: Any, kind: str, types: tuple[str, ...] = ("execute_result",)) -> str:
    """The text of MIME type or stream `kind` among a cell's outputs of `types`."""
    texts = []
    for output in cell.outputs:
        if output.output_type == "stream" and output.name == kind:
            texts.append(output.text)
        elif output.output_type in types and kind in output.get("data", {}):
            texts.append(output["data"][kind])
    return "".join(texts)


@pytest.fixture(name="executed", scope="module")
def fixture_executed(tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    """The notebook's code cells, executed in a kernel after the setup cell."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    folder = tmp_path_factory.mktemp("quickstart")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    setup = nbformat.v4.new_code_cell(SETUP.format(folder=str(folder)))
    notebook.cells = [setup, *notebook.cells]
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs = []
    nbclient.NotebookClient(
        notebook, timeout=1200, kernel_name="python3", resources={"metadata": {"path": str(folder)}}
    ).execute()
    return [cell for cell in notebook.cells[1:] if cell.cell_type == "code"]


def _cell(executed: list[Any], marker: str) -> Any:
    return next(cell for cell in executed if marker in cell.source)


@pytest.mark.slow
def test_every_cell_runs_without_a_traceback(executed: list[Any]) -> None:
    """Each cell runs in a real kernel (nbclient raises on an error) and none writes a traceback."""
    assert executed and not any("Traceback" in _text(cell, "stderr") for cell in executed)


@pytest.mark.slow
def test_the_layout_shows_its_table(executed: list[Any]) -> None:
    """The run cell shows layout 7's per-instance table with the sum."""
    html = _text(_cell(executed, "mlperf_mig.run("), "text/html")
    assert "<table" in html and "total (sum)" in html and "3x2g.20gb+1g.10gb" in html


@pytest.mark.slow
def test_the_table_as_a_dataframe_has_a_row_per_instance(executed: list[Any]) -> None:
    """`to_pandas()` shows one row for each of layout 7's four instances."""
    assert "4 rows" in _text(_cell(executed, "to_pandas()"), "text/html")


@pytest.mark.slow
def test_the_sweep_shows_its_chart(executed: list[Any]) -> None:
    """The sweep cell shows the table and the bar chart inline."""
    html = _text(_cell(executed, "mlperf_mig.sweep("), "text/html")
    assert "<table" in html and "data:image/svg+xml;base64," in html


@pytest.mark.slow
def test_the_plan_names_the_layout_on_the_gpu_owned(executed: list[Any]) -> None:
    """The plan cell prints layout 7 on the H100 and shows the plan."""
    cell = _cell(executed, "mlperf_mig.plan(")
    assert _text(cell, "stdout").strip() == "3x2g.20gb+1g.10gb"
    assert "H100-SXM5-80GB" in _text(cell, "text/plain")
