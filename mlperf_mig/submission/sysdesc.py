"""The system description (systems/<system>.json): all 35 fields of the submission checker.

Sources, later ones winning: what the run records (GPU, MIG layout, mode, backend, precision),
what this machine reports (hostinfo), a matching host description from systems/hosts/*.json, and
the user's overrides file (JSON object, field -> value). Meaningful fields that are still empty
are "missing": the closed division refuses them, the open division writes them as "not reported"
and says so in hw_notes.
"""

from __future__ import annotations

import logging
import os
import platform
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from mlperf_mig._io import read_json
from mlperf_mig._paths import data_dir
from mlperf_mig._version import __version__
from mlperf_mig.errors import SubmissionError
from mlperf_mig.submission import rules
from mlperf_mig.submission.hostinfo import GpuFacts, HostFacts

log = logging.getLogger(__name__)

NOT_REPORTED = "not reported (not detectable; set it in the overrides file)"

# Memory technology per GPU family (NVIDIA datasheets); the catalog does not carry it.
_GPU_MEMORY = (
    ("A100-PCIE-40GB", "HBM2"),
    ("A100-SXM4-40GB", "HBM2"),
    ("A100", "HBM2e"),
    ("A30", "HBM2"),
    ("H100-PCIE", "HBM2e"),
    ("H100", "HBM3"),
    ("H200", "HBM3e"),
    ("GH200-144GB", "HBM3e"),
    ("GH200", "HBM3"),
    ("B200", "HBM3e"),
)


@attrs.frozen(kw_only=True)
class HostDescription:
    """A known host platform: facts that detection cannot read, for machines that match."""

    name: str
    match: Mapping[str, str]
    fields: Mapping[str, Any]
    source: str

    def matches(self, known: Mapping[str, Any]) -> bool:
        """Every `match` entry is contained (case-insensitive) in the known value of its key."""
        return all(
            str(value).lower() in str(known.get(key, "")).lower()
            for key, value in self.match.items()
        )

    @classmethod
    def from_file(cls, path: Path) -> HostDescription:
        try:
            data = read_json(path, "store")
            description = cls(
                name=str(data["name"]),
                match=dict(data["match"]),
                fields=dict(data["fields"]),
                source=str(data.get("source", "")),
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise SubmissionError(
                f"host description {str(path)!r} is malformed ({exc}); it needs name, match and fields"
            ) from None
        _check_field_names(description.fields, f"host description {str(path)!r}")
        return description


def load_host_descriptions(extra: Sequence[str | os.PathLike[str]] = ()) -> list[HostDescription]:
    """The shipped host descriptions (systems/hosts/) and those in `extra` folders or files."""
    files = sorted((data_dir("systems") / "hosts").glob("*.json"))
    for path in map(Path, extra):
        if not path.exists():
            raise SubmissionError(f"host description path {str(path)!r} does not exist")
        found = sorted(path.glob("*.json")) if path.is_dir() else [path]
        if not found:
            raise SubmissionError(
                f"host description folder {str(path)!r} holds no .json files; pass a folder of "
                "host descriptions (name, match, fields) or one such file"
            )
        files += found
    return [HostDescription.from_file(f) for f in files]


def load_overrides(path: str | os.PathLike[str] | None) -> dict[str, Any]:
    """The user's overrides file: a JSON object of system-description fields."""
    if path is None:
        return {}
    try:
        data = read_json(Path(path), "store")
    except (OSError, ValueError) as exc:
        raise SubmissionError(
            f"overrides file {str(path)!r} cannot be read as JSON ({exc}); pass a JSON object "
            'such as {"cooling": "air"}'
        ) from None
    if not isinstance(data, dict):
        raise SubmissionError(f"overrides file {str(path)!r} must hold a JSON object of fields")
    _check_field_names(data, f"overrides file {str(path)!r}")
    return data


def _check_field_names(fields: Mapping[str, Any], where: str) -> None:
    unknown = sorted(set(fields) - set(rules.SYSTEM_FIELDS))
    if unknown:
        raise SubmissionError(
            f"{where} has unknown fields {', '.join(unknown)}; the system-description fields are "
            f"{', '.join(rules.SYSTEM_FIELDS)}"
        )
    for key, value in fields.items():
        if isinstance(value, str) and any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
            raise SubmissionError(
                f"{where}: field {key} is {value!r}, with a control character (a newline, a tab); "
                "a system-description value is one line of text: remove it"
            )


@attrs.frozen(kw_only=True)
class Accelerator:
    """What the result ran on, as the system description must show it."""

    gpu: str  # catalog name, e.g. "A100-SXM4-80GB"
    partitioning: str  # "mig", "vgpu", "shared" or "emulated"
    layout: str  # e.g. "3x2g.20gb+1g.10gb"
    instance: str | None  # independent mode: "instance 0 (2g.20gb)"; None for the whole layout
    memory_gib: float | None  # of the GPU, or of the instance's profile
    framework: str  # "TensorRT 10.3.0" / "ONNX Runtime 1.19.2 (CPUExecutionProvider)"
    on_cuda: bool = False  # the backend itself runs on CUDA (its CUDA version goes with it)
    nodes: int = 1  # machines (VMs) the result's SUT spans
    network: bool = False  # one LoadGen dispatching over the network to instances on other nodes
    gpus_per_node: int = 1  # GPUs the result's SUT spans on each node (a whole system: 8 on a DGX)

    @property
    def emulated(self) -> bool:
        return self.partitioning == "emulated"

    def partition(self) -> str:
        """'MIG 3x2g.20gb+1g.10gb' or 'MIG 2g.20gb, instance 0 of 3x2g.20gb+1g.10gb'."""
        if self.partitioning == "shared":
            return f"time-shared by {self.layout} (no MIG isolation)"
        if self.partitioning == "vgpu":
            return f"MIG-backed vGPU {self.layout} (in a VM)"
        if self.instance is None:
            return f"MIG {self.layout}"
        return f"MIG {self.instance} of {self.layout}"


def describe_system(
    *,
    accelerator: Accelerator,
    division: str,
    submitter: str,
    system_type: str,
    loadgen_version: str,
    notes: Sequence[str],
    host: HostFacts,
    gpu: GpuFacts | None,
    hosts: Sequence[HostDescription],
    overrides: Mapping[str, Any],
) -> tuple[dict[str, Any], list[str]]:
    """The 35 fields, and the meaningful ones that no source filled (left empty here)."""
    fields: dict[str, Any] = dict.fromkeys(rules.SYSTEM_FIELDS, "")
    fields.update(_run_fields(accelerator, division, submitter, system_type))
    fields.update(_software_fields(accelerator, gpu, loadgen_version))
    fields.update(_accelerator_fields(accelerator, gpu))
    fields.update(host.fields)
    known = {**fields, "gpu": accelerator.gpu}
    for description in hosts:
        if description.matches(known):
            log.info("host description %r matches this machine", description.name)
            fields.update(_host_fields(description, accelerator))
    fields.update(overrides)
    fields["hw_notes"] = _joined(
        fields["hw_notes"], *notes, _unknown_memory_note(accelerator, fields)
    )
    missing = [k for k in rules.MEANINGFUL_SYSTEM_FIELDS if not fields[k]]
    return fields, missing


def _unknown_memory_note(accelerator: Accelerator, fields: Mapping[str, Any]) -> str:
    """Where the catalog has no memory size (e.g. B200 3g/4g/7g), say so rather than guess one."""
    if (
        accelerator.emulated
        or accelerator.memory_gib is not None
        or fields["accelerator_memory_capacity"]
    ):
        return ""
    what = accelerator.instance or accelerator.gpu
    return (
        f"Accelerator memory capacity not known: the MIG profile table has no memory size for "
        f"{what} of NVIDIA {accelerator.gpu}"
    )


def _host_fields(description: HostDescription, accelerator: Accelerator) -> dict[str, Any]:
    """An emulated run used no accelerator: the host's GPU facts do not describe it."""
    return {
        k: v
        for k, v in description.fields.items()
        if not (accelerator.emulated and k.startswith("accelerator"))
    }


def mark_not_reported(fields: dict[str, Any], missing: Sequence[str]) -> dict[str, Any]:
    """Open division: fill `missing` with NOT_REPORTED and name them in hw_notes."""
    filled = {**fields, **dict.fromkeys(missing, NOT_REPORTED)}
    if missing:
        filled["hw_notes"] = _joined(
            fields["hw_notes"], f"Not reported (not detectable on the host): {', '.join(missing)}"
        )
    return filled


def _joined(*parts: str) -> str:
    return ". ".join(p.rstrip(". ") for p in parts if p)


def _run_fields(accelerator: Accelerator, division: str, submitter: str, system_type: str) -> dict:
    label = "Emulated (CPU): " if accelerator.emulated else ""
    return {
        "division": division,
        "submitter": submitter,
        "status": "available",
        "system_name": f"{label}NVIDIA {accelerator.gpu}, {accelerator.partition()}, {accelerator.framework}"
        + (f", over {accelerator.nodes} nodes (network)" if accelerator.network else ""),
        "number_of_nodes": accelerator.nodes,
        "system_type": system_type,
        "host_networking_topology": (
            f"network system: one LoadGen on the driver dispatching over the network (Ray) to "
            f"the instances on {accelerator.nodes} nodes"
            if accelerator.network
            else "N/A (single node)"
        ),
    }


def _software_fields(accelerator: Accelerator, gpu: GpuFacts | None, loadgen_version: str) -> dict:
    stack = [
        f"mlperf-mig {__version__}",
        f"mlcommons-loadgen {loadgen_version}",
        f"Python {platform.python_version()}",
    ]
    if gpu is not None:
        stack.append(f"NVIDIA driver {gpu.driver}, CUDA {gpu.cuda}")
    framework = accelerator.framework
    if gpu is not None and accelerator.on_cuda:
        framework = f"{framework}, CUDA {gpu.cuda}"
    return {"framework": framework, "other_software_stack": ", ".join(stack)}


def _accelerator_fields(accelerator: Accelerator, gpu: GpuFacts | None) -> dict[str, Any]:
    if accelerator.emulated:
        emulated = "N/A (emulated on the host CPU)"
        return {
            "accelerators_per_node": "0",
            "accelerator_model_name": (
                f"None: CPU emulation of NVIDIA {accelerator.gpu} {accelerator.partition()}"
            ),
            "accelerator_memory_capacity": emulated,
            "accelerator_host_interconnect": emulated,
            "accelerator_interconnect": emulated,
            "accelerator_memory_configuration": emulated,
        }
    memory = f"{accelerator.memory_gib:g} GiB" if accelerator.memory_gib else ""
    fields: dict[str, Any] = {
        "accelerators_per_node": accelerator.gpus_per_node,
        "accelerator_model_name": f"NVIDIA {accelerator.gpu} ({accelerator.partition()})",
        "accelerator_memory_capacity": memory,
        # several GPUs: NVLink, NVSwitch or PCIe is the host's to say (a host description)
        "accelerator_interconnect": "N/A (one GPU; its MIG instances share it)"
        if accelerator.gpus_per_node == 1
        else "",
        "accelerator_memory_configuration": gpu_memory_type(accelerator.gpu),
    }
    if gpu is not None:
        fields["accelerator_host_interconnect"] = gpu.pcie or ""
        if gpu.max_sm_clock_mhz:
            fields["accelerator_frequency"] = f"{gpu.max_sm_clock_mhz} MHz (max SM clock)"
    return fields


def gpu_memory_type(gpu: str) -> str:
    for prefix, kind in _GPU_MEMORY:
        if gpu.upper().startswith(prefix):
            return kind
    return ""
