"""The README's Python blocks in a real Jupyter kernel: each block one cell, each claim checked.

The blocks run verbatim, after one setup cell that moves into a scratch folder and makes
`run` and `sweep` default to the null backend (the README's BERT and 8-layout sweep would take
many minutes on a CPU; the display and the result kinds are the same). nbclient and ipykernel
come with the `test` extra.
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
README = (ROOT / "README.md").read_text(encoding="utf-8")
SETUP = """
import functools, os
os.chdir({folder!r})
import mlperf_mig
mlperf_mig.run = functools.partial(mlperf_mig.run, backend="null")
mlperf_mig.sweep = functools.partial(mlperf_mig.sweep, backend="null")
"""


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README, flags=re.S)


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


@pytest.fixture(name="executed", scope="module")
def fixture_executed(tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    """Every README Python block executed as one cell of one notebook, after the setup cell."""
    folder = tmp_path_factory.mktemp("readme-notebook")
    blocks = _python_blocks()
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(SETUP.format(folder=str(folder)))]
    notebook.cells += [nbformat.v4.new_code_cell(block) for block in blocks]
    # ipykernel's own "python3" kernel runs this interpreter (the project's environment)
    client = nbclient.NotebookClient(
        notebook,
        timeout=1200,
        kernel_name="python3",
        resources={"metadata": {"path": str(folder)}},
    )
    client.execute()
    return notebook.cells[1:]


def _cell(executed: list[Any], marker: str) -> Any:
    return next(cell for cell in executed if marker in cell.source)


def test_every_readme_block_runs_in_a_kernel(executed: list[Any]) -> None:
    """No README block raises in a real kernel (nbclient raises CellExecutionError otherwise) and none writes a traceback."""
    assert len(executed) == len(_python_blocks())
    assert not any("Traceback" in text for cell in executed for text in _outputs(cell, "stderr"))


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
