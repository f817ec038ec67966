"""A study layout number is ASCII digits: superscripts and other scripts' digits are no number."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import mlperf_mig
from mlperf_mig.errors import MlperfMigError

BIN = Path(sys.executable).parent


@pytest.mark.parametrize("scenario", ["²", "٣", "３", "-²"])
def test_a_layout_number_in_other_digits_is_refused_as_a_layout(scenario: str) -> None:
    """plan() with "²" or "٣" as the MIG layout is a one-line error naming it, not layout 3 nor a traceback."""
    with pytest.raises(MlperfMigError, match=scenario):
        mlperf_mig.plan(scenario, backend="null", emulate=True)


@pytest.mark.parametrize(
    "args",
    [
        ["plan", "--scenario", "٣"],
        ["sweep", "--scenarios", "²"],
        ["sweep", "--scenarios", "²-3"],
        ["sweep", "--scenarios", "1-٣"],
    ],
)
def test_the_cli_refuses_layout_numbers_in_other_digits_in_one_line(
    args: list[str], tmp_path: Path
) -> None:
    """--scenario ٣ and --scenarios ²-3 are one line and exit 2, and no sweep folder is made."""
    out = tmp_path / "out"
    extra = ["--outdir", str(out)] if args[0] == "sweep" else []
    done = subprocess.run(
        [str(BIN / "mlperf-mig"), *args, "--backend", "null", *extra],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "does not exist" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []
