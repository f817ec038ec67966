"""An accuracy run over a real (ImageNet-format) dataset, through real LoadGen, scores every
sample of it with the quick preset, and its top-1 is the value worked out from the labels.

The known-answer backend answers each image with a code of its own pixels, so the test writes
val_map.txt with that code as the label of three images in four: top-1 must be exactly 75%.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mlperf_mig.engines import resolve_spec
from mlperf_mig.engines.backends.known_answer import expected_payload
from mlperf_mig.harness import InstanceResult, InstanceTask, SettingsSpec, run_instance
from mlperf_mig.workloads import get_workload
from mlperf_mig.workloads.resnet50 import RESNET50

IMAGES = 80  # more than the quick preset's 64-sample accuracy run on synthetic samples


@pytest.fixture(name="known_labels_dir")
def fixture_known_labels_dir(tmp_path: Path) -> Path:
    """80 preprocessed images (.npy); images 0, 4, 8, ... carry a label the backend misses."""
    folder = tmp_path / "imagenet"
    folder.mkdir()
    rng = np.random.default_rng(7)
    lines = []
    for index in range(IMAGES):
        image = rng.uniform(-124.0, 152.0, size=(3, 224, 224)).astype(np.float32)
        np.save(folder / f"img{index:03d}.npy", image)
        answer = int(
            np.frombuffer(expected_payload(RESNET50, {"input_tensor:0": image}), np.int32)[0]
        )
        lines.append(f"img{index:03d}.npy {answer + 1 if index % 4 == 0 else answer}")
    (folder / "val_map.txt").write_text("\n".join(lines) + "\n")
    return folder


def test_quick_accuracy_run_scores_the_whole_dataset(
    in_child, tmp_path: Path, known_labels_dir: Path
) -> None:
    """All 80 images are scored (not the quick preset's 64) and 60 are right: top-1 75%."""
    task = InstanceTask(
        benchmark="resnet50",
        loadgen_scenario="Offline",
        mode="accuracy",
        outdir=tmp_path / "instance",
        engine=resolve_spec(get_workload("resnet50"), backend="known_answer"),
        dataset=known_labels_dir,
        settings=SettingsSpec(preset="quick", overrides={"target_qps": 1000}),
    )
    result: InstanceResult = in_child(run_instance, task)
    report = result.accuracy
    assert result.synthetic_data is False and report.sample_count == IMAGES
    assert report.value == 75.0
    assert report.meaningful is False  # the backend is no trained model
