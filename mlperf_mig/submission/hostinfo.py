"""What a machine says about itself: host CPU, memory, storage, OS, NICs, software versions, GPU.

`HostFacts.detect()` reads /proc, /sys and /etc/os-release (no subprocess, no root); the parsing
functions take text so that tests feed them recorded files. Values are already phrased as the
system-description fields want them. A fact that cannot be read is left out, never guessed:
the system description lists what is still missing.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import platform
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from mlperf_mig.registry.catalog import default_catalog

if TYPE_CHECKING:  # pynvml itself is imported only where the GPU is asked
    from mlperf_mig.registry.nvml_state import NvmlHandle, NvmlModule, NvmlValue

log = logging.getLogger(__name__)

GIB = 1024**3


@attrs.frozen(kw_only=True)
class HostFacts:
    """System-description fields detected on this machine (field name -> value)."""

    fields: Mapping[str, Any]

    @classmethod
    def detect(cls, root: str | os.PathLike[str] = "/") -> HostFacts:
        """Read the host's facts below `root` (a recorded tree in tests)."""
        base = Path(root)
        fields: dict[str, Any] = {}
        fields.update(cpu_fields(_read(base / "proc/cpuinfo")))
        fields.update(cpu_sysfs_fields(base / "sys/devices/system/cpu/cpu0"))
        fields.update(memory_fields(_read(base / "proc/meminfo")))
        fields.update(storage_fields(base / "sys/block"))
        fields.update(network_fields(base / "sys/class/net"))
        os_name = os_fields(_read(base / "etc/os-release"), platform.release())
        fields.update(os_name)
        return cls(fields={k: v for k, v in fields.items() if v not in (None, "", 0)})


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def cpu_fields(cpuinfo: str) -> dict[str, Any]:
    """Model name, sockets, cores per socket and the cache line of /proc/cpuinfo."""
    entries: dict[str, list[str]] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            entries.setdefault(key.strip(), []).append(value.strip())
    sockets = len(set(entries.get("physical id", []))) or (1 if entries else 0)
    cores = entries.get("cpu cores", [None])[0]
    logical = len(entries.get("processor", []))
    fields: dict[str, Any] = {
        "host_processor_model_name": entries.get("model name", [""])[0],
        "host_processors_per_node": sockets,
        "host_processor_core_count": int(cores) if cores else (logical // max(sockets, 1)),
    }
    mhz = entries.get("cpu MHz", [None])[0]
    if mhz:
        fields["host_processor_frequency"] = f"{float(mhz):.0f} MHz (current)"
    if entries.get("cache size"):
        fields["host_processor_caches"] = (
            f"{entries['cache size'][0]} (last level, per /proc/cpuinfo)"
        )
    return fields


def cpu_sysfs_fields(cpu0: Path) -> dict[str, Any]:
    """Maximum frequency and the cache hierarchy from /sys/devices/system/cpu/cpu0."""
    fields: dict[str, Any] = {}
    max_khz = _read(cpu0 / "cpufreq/cpuinfo_max_freq").strip()
    if max_khz.isdigit():
        fields["host_processor_frequency"] = f"{int(max_khz) // 1000} MHz (max)"
    caches = []
    for index in sorted((cpu0 / "cache").glob("index*")):
        level = _read(index / "level").strip()
        kind = _read(index / "type").strip()
        size = _read(index / "size").strip()
        if level and size:
            suffix = {"Data": "d", "Instruction": "i"}.get(kind, "")
            caches.append(f"L{level}{suffix} {size}")
    if caches:
        fields["host_processor_caches"] = ", ".join(caches)
    return fields


def memory_fields(meminfo: str) -> dict[str, Any]:
    match = re.search(r"^MemTotal:\s+(\d+)\s+kB", meminfo, re.MULTILINE)
    if not match:
        return {}
    return {"host_memory_capacity": f"{int(match.group(1)) * 1024 / GIB:.0f} GiB"}


def storage_fields(sys_block: Path) -> dict[str, Any]:
    """Capacity and kind of the physical disks in /sys/block (loop, ram and dm devices skipped)."""
    disks = []
    for device in sorted(sys_block.glob("*")):
        if device.name.startswith(("loop", "ram", "zram", "dm-", "md", "sr")):
            continue
        sectors = _read(device / "size").strip()
        if not sectors.isdigit() or int(sectors) == 0:
            continue
        disks.append((device.name, int(sectors) * 512, _disk_kind(device)))
    if not disks:
        return {}
    total = sum(size for _, size, _ in disks)
    kinds = sorted({kind for _, _, kind in disks})
    return {
        "host_storage_capacity": _size_text(total),
        "host_storage_type": ", ".join(kinds),
    }


def _disk_kind(device: Path) -> str:
    if device.name.startswith("nvme"):
        return "NVMe SSD"
    if device.name.startswith(("vd", "xvd")):
        return "virtual disk"
    rotational = _read(device / "queue/rotational").strip()
    return "HDD" if rotational == "1" else "SSD"


def _size_text(size: int) -> str:
    tib = size / 1024**4
    return f"{tib:.1f} TiB" if tib >= 1 else f"{size / GIB:.0f} GiB"


def network_fields(sys_net: Path) -> dict[str, Any]:
    """Physical NICs (interfaces backed by a device) and their link speeds."""
    nics = []
    for interface in sorted(sys_net.glob("*")):
        if not (interface / "device").exists():
            continue
        speed = _read(interface / "speed").strip()
        rate = (
            f"{int(speed) / 1000:g} Gb/s" if speed.isdigit() and int(speed) > 0 else "speed unknown"
        )
        nics.append(f"{interface.name} ({rate})")
    if not nics:
        return {}
    return {"host_network_card_count": len(nics), "host_networking": "Ethernet: " + ", ".join(nics)}


def os_fields(os_release: str, kernel: str) -> dict[str, Any]:
    match = re.search(r'^PRETTY_NAME="?([^"\n]+)"?', os_release, re.MULTILINE)
    name = match.group(1) if match else platform.system()
    return {"operating_system": f"{name} (kernel {kernel})"}


def package_version(*names: str) -> str | None:
    """Installed version of the first of `names` that is installed."""
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


@attrs.frozen(kw_only=True)
class GpuFacts:
    """Live facts of one GPU from NVML: driver, CUDA, PCIe link, clocks, memory."""

    name: str
    driver: str
    cuda: str
    pcie: str | None
    max_sm_clock_mhz: int | None
    memory_mib: int

    @classmethod
    def detect(cls, gpu_name: str) -> GpuFacts | None:
        """The first GPU whose NVML name contains `gpu_name`; None without NVML or such GPU."""
        try:
            import pynvml
        except ImportError:
            log.info("nvidia-ml-py is not installed: no GPU facts")
            return None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            log.info("NVML unavailable (%s): no GPU facts", exc)
            return None
        try:
            return first_matching_gpu(pynvml, gpu_name)
        finally:
            pynvml.nvmlShutdown()


def first_matching_gpu(pynvml: NvmlModule, gpu_name: str) -> GpuFacts | None:
    """Facts of the first GPU that is `gpu_name`; `pynvml` is the module or a recorded stand-in."""
    driver = _text(pynvml.nvmlSystemGetDriverVersion())
    cuda_int = pynvml.nvmlSystemGetCudaDriverVersion()
    cuda = f"{cuda_int // 1000}.{cuda_int % 1000 // 10}"
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        name = _text(pynvml.nvmlDeviceGetName(handle))
        if not same_gpu(name, gpu_name):
            continue
        return GpuFacts(
            name=name,
            driver=driver,
            cuda=cuda,
            pcie=_pcie(pynvml, handle),
            max_sm_clock_mhz=_nvml_or_none(
                pynvml, pynvml.nvmlDeviceGetMaxClockInfo, handle, pynvml.NVML_CLOCK_SM
            ),
            memory_mib=int(pynvml.nvmlDeviceGetMemoryInfo(handle).total // 2**20),
        )
    return None


def same_gpu(nvml_name: str, catalog_name: str) -> bool:
    """True when NVML's device name is the catalog GPU `catalog_name`."""
    gpu = default_catalog().find(nvml_name.removeprefix("NVIDIA ").strip())
    return gpu is not None and gpu.name == catalog_name


def _pcie(pynvml: NvmlModule, handle: NvmlHandle) -> str | None:
    generation = _nvml_or_none(pynvml, pynvml.nvmlDeviceGetMaxPcieLinkGeneration, handle)
    width = _nvml_or_none(pynvml, pynvml.nvmlDeviceGetMaxPcieLinkWidth, handle)
    if generation is None or width is None:
        return None
    return f"PCIe Gen{generation} x{width}"


def _nvml_or_none(
    pynvml: NvmlModule, function: Callable[..., NvmlValue], *args: object
) -> NvmlValue | None:
    try:
        return function(*args)
    except pynvml.NVMLError:
        return None


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
