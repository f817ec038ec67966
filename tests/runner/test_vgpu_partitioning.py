"""Runs on a MIG-backed vGPU are labelled as such in results and in the system description."""

from __future__ import annotations

import attrs

from mlperf_mig.runner.results import VGPU_LABEL, RunResult
from mlperf_mig.submission.sysdesc import Accelerator


def _run(partitioning: str) -> RunResult:
    return RunResult(
        gpu="A100-PCIE-80GB",
        layout="2g.20gb",
        system_id="A100-PCIe-80GB_MIG_1x2g.20gb",
        scenario=4,
        partitioning=partitioning,
        mode="independent",
        benchmark="resnet50",
        loadgen_scenario="Offline",
        backend="null",
        device="null",
        precision="fp32",
        variant="tiny",
        preset="quick",
        synthetic_weights=False,
        synthetic_data=False,
        outdir="run",
        settings_key="k",
        started_at="2026-12-01T00:00:00Z",
        duration_s=1.0,
        instances=(),
    )


def test_a_vgpu_run_carries_the_vgpu_label() -> None:
    """A run whose partitioning is vgpu says so in its labels."""
    assert VGPU_LABEL in _run("vgpu").labels()


def test_a_mig_run_has_no_vgpu_label() -> None:
    """A bare-metal MIG run is not labelled vGPU."""
    assert VGPU_LABEL not in _run("mig").labels()


def test_the_system_description_says_vgpu() -> None:
    """The accelerator of a vgpu run is described as a MIG-backed vGPU in a VM."""
    accelerator = Accelerator(
        gpu="A100-PCIE-80GB",
        partitioning="vgpu",
        layout="2g.20gb",
        instance=None,
        memory_gib=20.0,
        framework="TensorRT 10.3.0",
        on_cuda=True,
    )
    assert accelerator.partition() == "MIG-backed vGPU 2g.20gb (in a VM)"
    assert attrs.evolve(accelerator, partitioning="mig").partition() == "MIG 2g.20gb"
