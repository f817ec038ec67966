"""Issue 33, finding 3: whatever the cache fed an instance that failed is named in its error,
in results.json and the run's table, with how to get rid of it."""

from __future__ import annotations

import json
from pathlib import Path

import mlperf_mig
from mlperf_mig.harness import reuse


def test_failed_instance_in_results_names_the_cached_samples(tmp_path: Path) -> None:
    """A worker that failed after it was fed a samples file from the cache (as crafted token
    ids would make BERT fail): the instance's error names that file and how to remove it."""
    result = mlperf_mig.run(
        "1g.10gb",
        outdir=tmp_path / "run",
        cache_dir=tmp_path / "cache",
        backend="null",
        worker_entry="fault_entries:fails_on_cached_samples",
        progress=False,
        accuracy=False,
        telemetry=False,
    )
    (samples,) = (tmp_path / "cache" / reuse.SAMPLES_DIR).glob("*.bin")
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    error = saved["instances"][0]["error"]
    assert "token id 2139062143 out of range" in error
    assert f"samples file {str(samples)!r}" in error and "delete it" in error
    assert not result.ok and str(samples) in result.table()
