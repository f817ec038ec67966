"""A test that runs to the end but could not load its samples is a failure, not a result."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlperf_mig import cli
from mlperf_mig.runner.results import RunResult

pytestmark = pytest.mark.slow  # starts the runner's workers


@pytest.fixture(name="undecodable_imagenet")
def fixture_undecodable_imagenet(tmp_path: Path) -> Path:
    """An ImageNet-like folder whose images exist but cannot be decoded."""
    folder = tmp_path / "imagenet"
    folder.mkdir()
    names = [f"ILSVRC2012_val_{index:08d}.JPEG" for index in range(4)]
    for name in names:
        (folder / name).write_bytes(b"not an image")
    (folder / "val_map.txt").write_text("".join(f"{name} 1\n" for name in names))
    return folder


@pytest.mark.parametrize("mode", ["independent", "unified"])
def test_undecodable_samples_fail_the_run(
    undecodable_imagenet: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: str
) -> None:
    """Samples that cannot be loaded: exit 1, status FAILED and the reason in the table."""
    outdir = tmp_path / "run"
    argv = [
        "run", "--scenario", "3", "--mode", mode, "--backend", "null", "--no-accuracy",
        "--dataset", str(undecodable_imagenet), "--set", "min_duration=200",
        "--set", "target_qps=1000", "--outdir", str(outdir),
    ]  # fmt: skip
    assert cli.main(argv) == 1
    table = capsys.readouterr().out
    assert "cannot decode image" in table and "FAILED" in table
    result = RunResult.load(outdir)
    assert not result.ok
    failed = result.layout_result if mode == "unified" else result.instances[0].performance
    assert failed.failed_samples > 0 and "cannot decode image" in failed.error
