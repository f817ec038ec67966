"""The GPU install: the commands per driver CUDA version, the installed wheels, the backends.

The commands are the manual's docs/real-gpu.md install section (a test keeps the two equal). TensorRT's
library wheels come from NVIDIA's package index; `tensorrt-cu12` / `tensorrt-cu13` pin the
CUDA major that the bare `tensorrt` metapackage leaves to its newest release (CUDA 13).
onnxruntime-gpu on PyPI is built for CUDA 12 up to 1.26 and for CUDA 13 from 1.27 on (its
`cuda` extra requires nvidia-cuda-runtime-cu12 up to 1.26, the CUDA 13 runtime from 1.27).
A wheel built for a newer CUDA major than the driver supports cannot run; an older major can.
"""

from __future__ import annotations

import importlib.metadata
import logging
import re
from collections.abc import Mapping

import attrs

from mlperf_mig.engines.backend import InstallStatus
from mlperf_mig.engines.backends import backend_class, backend_names

log = logging.getLogger(__name__)

INSTALL_COMMANDS = {
    12: (
        "pip install -e . 'tensorrt-cu12>=10' 'cuda-python>=12.6.2,<13' "
        "--extra-index-url https://pypi.nvidia.com && pip uninstall -y onnxruntime && "
        "pip install 'onnxruntime-gpu[cuda,cudnn]>=1.19,<1.27'"
    ),
    13: (
        "pip install -e '.[gpu]' 'tensorrt-cu13>=10.13' 'cuda-python>=13,<14' "
        "--extra-index-url https://pypi.nvidia.com && pip uninstall -y onnxruntime && "
        "pip install 'onnxruntime-gpu[cuda,cudnn]>=1.27'"
    ),
}
_ORT_CUDA13_FROM = (1, 27)
_TENSORRT_CU_RE = re.compile(r"^tensorrt[-_]cu(?P<major>\d+)$", re.I)


def install_command(cuda_major: int | None) -> str:
    """The manual's (docs/real-gpu.md) install command for a driver of CUDA major `cuda_major` (the newest known
    one for a newer driver, which runs older CUDA majors too)."""
    if cuda_major is None or cuda_major not in INSTALL_COMMANDS:
        known = [m for m in sorted(INSTALL_COMMANDS) if cuda_major is None or m <= cuda_major]
        cuda_major = known[-1] if known else min(INSTALL_COMMANDS)
    return INSTALL_COMMANDS[cuda_major]


def _major_minor(version: str) -> tuple[int, int]:
    major, minor, *_ = [*(int(n) for n in re.findall(r"\d+", version)[:2]), 0, 0]
    return major, minor


def installed_versions() -> dict[str, str]:
    """Installed distribution name (lower case, dashes) -> version, for the wheels that matter."""
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name.startswith(("tensorrt", "cuda-python", "cuda-bindings", "onnxruntime")):
            found[name] = dist.version
    return found


def wheel_cuda_majors(versions: Mapping[str, str]) -> dict[str, int]:
    """The CUDA major each installed GPU wheel was built for: tensorrt-cuNN by its name,
    cuda-python / cuda-bindings by their major version, onnxruntime-gpu by its release."""
    majors: dict[str, int] = {}
    for name, version in versions.items():
        match = _TENSORRT_CU_RE.match(name)
        if match:
            majors[name] = int(match["major"])
        elif name in ("cuda-python", "cuda-bindings"):
            majors[name] = _major_minor(version)[0]
        elif name == "onnxruntime-gpu":
            majors[name] = 13 if _major_minor(version) >= _ORT_CUDA13_FROM else 12
    return majors


@attrs.frozen(kw_only=True)
class WheelProblem:
    """An installed wheel that cannot work with this driver, and the command that fixes it."""

    problem: str
    fix: str

    def to_dict(self) -> dict[str, str]:
        return attrs.asdict(self)


def wheel_problems(
    cuda_version: tuple[int, int] | None, versions: Mapping[str, str]
) -> list[WheelProblem]:
    """Wheels built for a newer CUDA major than the driver's, and ONNX Runtime installed twice."""
    problems: list[WheelProblem] = []
    if cuda_version is not None:
        driver_major = cuda_version[0]
        fix = install_command(driver_major)
        for name, major in sorted(wheel_cuda_majors(versions).items()):
            if major > driver_major:
                problems.append(
                    WheelProblem(
                        problem=(
                            f"{name} {versions[name]} is built for CUDA {major}, but the driver "
                            f"supports CUDA {cuda_version[0]}.{cuda_version[1]}"
                        ),
                        fix=fix,
                    )
                )
    if "onnxruntime" in versions and "onnxruntime-gpu" in versions:
        problems.append(
            WheelProblem(
                problem=(
                    "onnxruntime and onnxruntime-gpu are both installed and provide the same "
                    "module, so which one loads is left to chance"
                ),
                fix=install_command(cuda_version[0] if cuda_version else None),
            )
        )
    return problems


def check_backends(*, has_gpu: bool, cuda_major: int | None) -> list[InstallStatus]:
    """Every backend of the backend table, asked whether it can run here (a new backend folder
    shows up without a change here), with the install command for the driver's CUDA as the fix
    of those that need a GPU."""
    fix = install_command(cuda_major)
    return [
        backend_class(name).install_status(has_gpu=has_gpu, gpu_fix=fix) for name in backend_names()
    ]
