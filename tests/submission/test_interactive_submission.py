"""An Interactive run of llama3.1-8b in a submission tree: filed in Interactive/ with its Server
logs, accepted by our check (and, by hand, by MLCommons' checker v6.1: see docs/llm.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import mlperf_mig
from mlperf_mig.submission import check_submission, write_submission

pytestmark = pytest.mark.slow  # runs LoadGen

EARLY_END = "Ending early: Max test duration reached"


def _interactive_run(outdir: Path) -> Path:
    """An Interactive run that keeps the checker's 600 s minimum and sample counts but is cut
    short by max_duration; its 'Ending early' record is dropped, standing in for a full run."""
    mlperf_mig.run(
        "1g.10gb", benchmark="llama3.1-8b", loadgen_scenario="Interactive", backend="null",
        outdir=outdir, progress=False, telemetry=False,
        settings={"max_tokens": 4, "min_duration": 600000, "max_duration": 1000,
                  "performance_sample_count_override": 13368,
                  "accuracy_sample_count_override": 13368},
    )  # fmt: skip
    for detail in outdir.glob("*/performance/mlperf_log_detail.txt"):
        lines = detail.read_text().splitlines(keepends=True)
        detail.write_text("".join(line for line in lines if EARLY_END not in line))
    return outdir


@pytest.mark.usefixtures("fixed_host")
def test_an_interactive_run_is_filed_under_interactive(tmp_path: Path) -> None:
    tree = write_submission(
        [_interactive_run(tmp_path / "run")], division="open", submitter="Acme",
        outdir=tmp_path / "sub",
    )  # fmt: skip
    system = next((tree.root / "open" / "Acme" / "results").iterdir())
    folder = system / "llama3.1-8b" / "Interactive"
    assert (folder / "performance" / "run_1" / "mlperf_log_detail.txt").is_file()
    assert (folder / "accuracy" / "accuracy.txt").is_file()
    assert (folder / "user.conf").read_text().startswith("llama3_1-8b-interactive.Server.")
    assert not (system / "llama3.1-8b" / "Server").exists()
    assert check_submission(tree.root) == ()
    description = json.loads(
        next((tree.root / "open" / "Acme" / "systems").glob("*.json")).read_text()
    )
    assert description["system_type"] == "datacenter,edge"
