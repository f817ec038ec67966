"""A whole system as one submission: named as NVIDIA named its own, accepted by the checker."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pytest

from mlperf_mig.submission import check_submission, write_submission
from mlperf_mig.submission.sysdesc import Accelerator
from mlperf_mig.submission.writer import system_folder_name, system_layout_token

# what the checker needs of an open Offline result, in seconds on the null backend
CHECKER_SETTINGS = {
    "min_duration": 600000,
    "performance_sample_count_override": 1024,
    "target_qps": 0.1,
}


@pytest.fixture(scope="module", name="system_run")
def fixture_system_run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Two emulated A100s carrying 2x 1g.10gb each, under one LoadGen."""
    import mlperf_mig

    return mlperf_mig.run(
        "1g.10gb+1g.10gb",
        gpu_count=2,
        emulate=True,
        mode="unified",
        backend="null",
        settings=CHECKER_SETTINGS,
        telemetry=False,
        progress=False,
        outdir=tmp_path_factory.mktemp("fleet") / "run",
    )


@pytest.fixture(scope="module", name="tree")
def fixture_tree(system_run: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The open submission tree of the system's run."""
    outdir = tmp_path_factory.mktemp("fleet") / "submission"
    write_submission([system_run.outdir], division="open", submitter="Fleet", outdir=outdir)
    return outdir


@pytest.mark.slow
def test_system_counts_the_instances_of_all_gpus(system_run: Any) -> None:
    """Two GPUs of 2x 1g.10gb are one system of 4x 1g.10gb."""
    assert system_folder_name(system_run, None) == "A100-SXM4-80GB-MIG_4x1g.10gb_null_emulated"


@pytest.mark.slow
def test_checker_accepts_the_unified_system(tree: Path) -> None:
    """The checker finds no problem in the system's open tree."""
    assert check_submission(tree) == ()


@pytest.mark.slow
def test_system_description_names_the_system(tree: Path) -> None:
    """The description is of one node with the system's layout in its name."""
    (description,) = (tree / "open" / "Fleet" / "systems").glob("*.json")
    fields = json.loads(description.read_text())
    assert fields["number_of_nodes"] == 1
    assert "2x[2x1g.10gb]" in fields["system_name"]


@pytest.mark.slow
def test_mixed_layouts_are_spelled_out(system_run: Any) -> None:
    """GPUs with different layouts name each group of GPUs and its layout."""
    gpus = [system_run.gpus[0], attrs.evolve(system_run.gpus[1], layout="4g.40gb+3g.40gb")]
    mixed = attrs.evolve(system_run, gpus=gpus)
    assert system_layout_token(mixed) == "1xGPU-2x1g.10gb_and_1xGPU-4g.40gb_3g.40gb"


def test_accelerators_per_node_counts_the_gpus() -> None:
    """A DGX-A100 system on MIG says eight accelerators per node and no GPU interconnect guess."""
    from mlperf_mig.submission.sysdesc import _accelerator_fields

    accelerator = Accelerator(
        gpu="A100-SXM4-80GB",
        partitioning="mig",
        layout="8x[7x1g.10gb]",
        instance=None,
        memory_gib=80.0,
        framework="TensorRT 10",
        gpus_per_node=8,
    )
    fields = _accelerator_fields(accelerator, None)
    assert fields["accelerators_per_node"] == 8
    assert fields["accelerator_interconnect"] == ""


@pytest.mark.slow
def test_instance_systems_name_their_system(system_run: Any) -> None:
    """In independent mode each instance is its own system, named within the whole system."""
    instance = system_run.instances[3]
    name = system_folder_name(system_run, instance)
    assert name == "A100-SXM4-80GB-MIG_1g.10gb_i3-of-4x1g.10gb_null_emulated"
