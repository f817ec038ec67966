"""An open submission tree of llama3.1-8b-edge: the checker's dataset_check (the accuracy run
covers the whole dataset's 5,000 samples) is ours too."""

from __future__ import annotations

from pathlib import Path

import pytest

import mlperf_mig
from mlperf_mig.submission import check_submission, write_submission

pytestmark = pytest.mark.slow  # runs LoadGen


def _edge_run(outdir: Path, **settings: float) -> Path:
    mlperf_mig.run(
        "1g.10gb", benchmark="llama3.1-8b-edge", loadgen_scenario="Offline", backend="null",
        outdir=outdir, settings={"max_tokens": 4, **settings}, progress=False, telemetry=False,
    )  # fmt: skip
    return outdir


def test_a_tree_whose_accuracy_run_covers_the_dataset_passes(tmp_path: Path) -> None:
    run = _edge_run(tmp_path / "run", accuracy_sample_count_override=5000)
    tree = write_submission([run], division="open", submitter="Acme", outdir=tmp_path / "sub")
    assert check_submission(tree.root) == ()
    result = next((tree.root / "open" / "Acme" / "results").iterdir())
    assert (result / "llama3.1-8b-edge" / "Offline" / "accuracy" / "accuracy.txt").is_file()


def test_an_accuracy_run_of_16_samples_is_a_finding(tmp_path: Path) -> None:
    run = _edge_run(tmp_path / "run")  # the quick preset's 16 accuracy samples
    tree = write_submission([run], division="open", submitter="Acme", outdir=tmp_path / "sub")
    findings = [str(f) for f in check_submission(tree.root)]
    assert any("the accuracy run covers 16 samples; the checker needs" in f for f in findings)
