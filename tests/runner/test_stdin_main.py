"""Workers never depend on the caller's main module where it cannot be re-imported."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from mlperf_mig.runner.supervisor import main_module_hidden_if_unimportable


@pytest.mark.slow
def test_run_from_a_script_on_standard_input(tmp_path: Path) -> None:
    """`python - <<EOF ... mlperf_mig.run(...)` runs its instance to the end (it crashed on '<stdin>')."""
    script = textwrap.dedent(
        f"""
        import mlperf_mig
        result = mlperf_mig.run(scenario=5, backend="null", emulate=True, accuracy=False,
                                outdir={str(tmp_path / "run")!r}, progress=False)
        print("statuses", [i.status for i in result.instances])
        """
    )
    child = subprocess.run(
        [sys.executable, "-"],
        input=script,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    assert "statuses ['ok']" in child.stdout, child.stderr[-2000:]


def test_a_main_module_without_its_file_is_hidden_while_workers_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A main module whose file does not exist has no __file__ inside the block and gets it back after."""
    main = types.ModuleType("__main__")
    main.__file__ = "<stdin>"
    monkeypatch.setitem(sys.modules, "__main__", main)
    with main_module_hidden_if_unimportable():
        assert not hasattr(main, "__file__")
    assert main.__file__ == "<stdin>"


def test_a_script_file_stays_visible(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A main module run from a real file keeps its __file__ (multiprocessing's usual behaviour)."""
    script = tmp_path / "job.py"
    script.write_text("")
    main = types.ModuleType("__main__")
    main.__file__ = str(script)
    monkeypatch.setitem(sys.modules, "__main__", main)
    with main_module_hidden_if_unimportable():
        assert main.__file__ == str(script)
