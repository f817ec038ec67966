"""doctor's smoke test: the tiny ResNet50 on each device and backend, against the CPU reference.

Each smoke run is a child process (`python -m mlperf_mig.doctor.smoke`), so that it sees only its
device (CUDA_VISIBLE_DEVICES=MIG-<uuid>, as a run's worker does) and a crash cannot take doctor
down. The child builds (or reuses) the tiny engine in fp32, computes the outputs of a fixed batch
of synthetic inputs, and runs a short LoadGen Offline test through the harness; the parent
compares its softmax outputs with those of the CPU reference (ONNX Runtime on the CPU, the same
child code) within tolerance. On a machine without a GPU only the CPU reference runs.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from mlperf_mig._io import finite_number, read_json
from mlperf_mig._text import printable
from mlperf_mig.errors import DataFileError

log = logging.getLogger(__name__)


BATCH = 8
OFFLINE_MS = 500  # LoadGen min_duration of the short Offline test
SAMPLES = 64  # samples LoadGen may load for it
RTOL, ATOL = 1e-2, 1e-3  # fp32 on a GPU against fp32 on the CPU
CHILD_TIMEOUT_S = 300  # one engine build on a small MIG slice plus the short test
CPU_BACKEND = "onnxruntime"


@attrs.frozen(kw_only=True)
class SmokeDevice:
    """One device to smoke-test: how to name it, the engine's GPU and profile, its UUID."""

    label: str  # "GPU 0 MIG 2g.20gb (gi 3)", "CPU"
    gpu: str | None  # catalog GPU; None: the CPU
    profile: str | None
    uuid: str | None  # CUDA_VISIBLE_DEVICES for the child; None: no GPU visible


@attrs.frozen(kw_only=True)
class SmokeResult:
    """One backend on one device: samples/s and whether its outputs match the CPU reference."""

    device: str
    backend: str
    ok: bool
    samples_per_s: float | None = None
    validity: str | None = None
    outputs_match: bool | None = None  # None for the reference itself or when it did not run
    max_abs_diff: float | None = None
    ran_on: str | None = None  # the provider/device the backend reported
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)

    def line(self) -> str:
        """One line for people."""
        if self.error:
            return f"{self.device} {self.backend}: FAILED: {self.error}"
        speed = f"{self.samples_per_s:,.1f} samples/s" if self.samples_per_s else "no throughput"
        if self.outputs_match is None:
            match = "the CPU reference"
        elif self.outputs_match:
            match = f"outputs match the CPU reference (max |diff| {self.max_abs_diff:.2g})"
        else:
            match = f"outputs DIFFER from the CPU reference (max |diff| {self.max_abs_diff:.3g})"
        return f"{self.device} {self.backend} on {self.ran_on}: {speed} ({self.validity}), {match}"


def run_child(
    backend: str, device: SmokeDevice, workdir: Path, *, timeout_s: float = CHILD_TIMEOUT_S
) -> tuple[dict[str, Any] | None, np.ndarray | None, str | None]:
    """Run one smoke test in a child process: (its summary, its softmax outputs, an error)."""
    outdir = workdir / f"{backend}-{device.label.replace(' ', '_')}"
    command = [sys.executable, "-m", "mlperf_mig.doctor.smoke", backend, "--outdir", str(outdir)]
    if device.gpu:
        command += ["--gpu", device.gpu]
    if device.profile:
        command += ["--profile", device.profile]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": device.uuid or ""}
    try:
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        return None, None, f"no answer within {timeout_s:.0f} s"
    if done.returncode != 0:
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        return None, None, (lines[-1] if lines else f"exit code {done.returncode}")
    try:
        summary, outputs = read_child_output(outdir)
    except (DataFileError, FileNotFoundError) as exc:
        return None, None, f"the child's output is unusable: {exc}"
    return summary, outputs, None


def read_child_output(outdir: Path) -> tuple[dict[str, Any], np.ndarray]:
    """What a smoke child left in `outdir`, checked like any file read back: smoke.json (bounded,
    no link followed) with a finite samples/s and printable texts, and softmax.npy, a float32
    array of BATCH rows read without pickles. DataFileError in one line naming what is wrong."""
    path = outdir / "smoke.json"
    value = read_json(path, "results", fix="run doctor again")
    speed = value.get("samples_per_s") if isinstance(value, dict) else None
    texts = [value.get(k) for k in ("validity", "ran_on")] if isinstance(value, dict) else []
    if not (finite_number(speed) and speed >= 0) or not all(isinstance(t, str) for t in texts):
        raise DataFileError(
            f"{str(path)!r} lacks a finite samples_per_s and the texts validity and ran_on; "
            "run doctor again"
        )
    summary = {
        "samples_per_s": float(speed),
        "validity": printable(texts[0]),
        "ran_on": printable(texts[1]),
    }
    array_path = outdir / "softmax.npy"
    if array_path.is_symlink() or not array_path.is_file():
        raise DataFileError(f"{str(array_path)!r} is not a regular file; run doctor again")
    try:
        outputs = np.load(array_path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise DataFileError(
            f"{str(array_path)!r} is not a NumPy array ({exc}); run doctor again"
        ) from None
    if outputs.dtype != np.float32 or outputs.ndim != 2 or outputs.shape[0] != BATCH:
        raise DataFileError(
            f"{str(array_path)!r} holds {outputs.dtype} {outputs.shape}, not float32 rows of "
            f"{BATCH} samples; run doctor again"
        )
    return summary, outputs


def smoke_all(devices: Sequence[SmokeDevice], gpu_backends: Sequence[str]) -> list[SmokeResult]:
    """The CPU reference, then every GPU backend on every device, compared with the reference."""
    with tempfile.TemporaryDirectory(prefix="mlperf-mig-doctor-") as folder:
        workdir = Path(folder)
        cpu = SmokeDevice(label="CPU", gpu=None, profile=None, uuid=None)
        summary, reference, error = run_child(CPU_BACKEND, cpu, workdir)
        results = [_result(cpu, CPU_BACKEND, summary, error, None)]
        for device in devices:
            for backend in gpu_backends:
                summary, outputs, error = run_child(backend, device, workdir)
                compared = None if outputs is None or reference is None else (outputs, reference)
                results.append(_result(device, backend, summary, error, compared))
        return results


def _result(
    device: SmokeDevice,
    backend: str,
    summary: dict[str, Any] | None,
    error: str | None,
    compared: tuple[np.ndarray, np.ndarray] | None,
) -> SmokeResult:
    if summary is None:
        return SmokeResult(device=device.label, backend=backend, ok=False, error=error)
    match, diff = None, None
    if compared is not None:
        outputs, reference = compared
        if outputs.shape != reference.shape:
            return SmokeResult(
                device=device.label,
                backend=backend,
                ok=False,
                error=f"outputs of shape {outputs.shape}, the CPU reference's {reference.shape}",
            )
        diff = float(np.max(np.abs(outputs - reference)))
        match = bool(np.allclose(outputs, reference, rtol=RTOL, atol=ATOL))
    return SmokeResult(
        device=device.label,
        backend=backend,
        ok=match is not False,
        samples_per_s=summary["samples_per_s"],
        validity=summary["validity"],
        outputs_match=match,
        max_abs_diff=diff,
        ran_on=summary["ran_on"],
    )


# --- the child ----------------------------------------------------------------------------
def smoke_here(
    backend: str, *, gpu: str | None, profile: str | None, outdir: Path
) -> dict[str, Any]:
    """In this process: build the tiny fp32 engine, compute the fixed batch, run LoadGen Offline."""
    from mlperf_mig.engines import open_backend, resolve_spec
    from mlperf_mig.harness import InstanceTask, SettingsSpec, run_instance
    from mlperf_mig.workloads.resnet50 import RESNET50 as benchmark

    spec = resolve_spec(
        benchmark,
        backend=backend,
        precision="fp32",
        variant="tiny",
        gpu=gpu,
        mig_profile=profile,
        loadgen_scenario="Offline",
        batch_sizes=(BATCH,),
    )
    feeds = benchmark.calibration_feeds(BATCH, seed=0)
    with open_backend(spec) as opened:
        outputs = opened.run(feeds)
        device = opened.device
    outdir.mkdir(parents=True, exist_ok=True)
    np.save(
        outdir / "softmax.npy", np.asarray(outputs[benchmark.outputs[1].name], dtype=np.float32)
    )
    result = run_instance(
        InstanceTask(
            benchmark=benchmark,
            loadgen_scenario="Offline",
            outdir=outdir / "loadgen",
            engine=spec,
            settings=SettingsSpec(preset="quick", overrides={"min_duration": OFFLINE_MS}),
            sample_count=SAMPLES,
        )
    )
    if result.failed:
        raise RuntimeError(f"the LoadGen Offline test failed: {result.error or result.validity}")
    validity = result.validity + (
        " by design of the short test" if result.invalid_by_design else ""
    )
    summary = {
        "samples_per_s": result.throughput,
        "validity": validity,
        "ran_on": f"{device.provider} {device.device}",
    }
    (outdir / "smoke.json").write_text(json.dumps(summary), encoding="utf-8")
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mlperf_mig.doctor.smoke")
    parser.add_argument("backend")
    parser.add_argument("--gpu", default=None)
    parser.add_argument("--profile", default=None)
    parser.add_argument("--outdir", required=True)
    args = parser.parse_args(argv)
    smoke_here(args.backend, gpu=args.gpu, profile=args.profile, outdir=Path(args.outdir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
