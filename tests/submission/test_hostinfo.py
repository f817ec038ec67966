"""Host detection from recorded /proc, /sys and /etc files."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlperf_mig.submission import hostinfo
from mlperf_mig.submission.hostinfo import HostFacts, cpu_fields, memory_fields, os_fields

CPUINFO = "".join(
    f"processor\t: {i}\nmodel name\t: Intel(R) Xeon(R) Platinum 8480C\nphysical id\t: {i // 4}\n"
    "cpu cores\t: 56\ncpu MHz\t\t: 2000.000\ncache size\t: 107520 KB\n\n"
    for i in range(8)
)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture(name="machine")
def fixture_machine(tmp_path: Path) -> Path:
    """A recorded machine: two sockets, 2 TiB, one NVMe disk, one NIC, Ubuntu."""
    _write(tmp_path / "proc/cpuinfo", CPUINFO)
    _write(tmp_path / "proc/meminfo", "MemTotal:       2113929216 kB\nMemFree: 1 kB\n")
    _write(tmp_path / "sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq", "3800000\n")
    for index, (level, kind, size) in enumerate([(1, "Data", "48K"), (2, "Unified", "2048K")]):
        folder = tmp_path / f"sys/devices/system/cpu/cpu0/cache/index{index}"
        _write(folder / "level", f"{level}\n")
        _write(folder / "type", f"{kind}\n")
        _write(folder / "size", f"{size}\n")
    _write(tmp_path / "sys/block/nvme0n1/size", str(2 * 1024**4 // 512))
    _write(tmp_path / "sys/block/loop0/size", "100")
    _write(tmp_path / "sys/class/net/eth0/speed", "100000\n")
    (tmp_path / "sys/class/net/eth0/device").mkdir()
    (tmp_path / "sys/class/net/lo").mkdir(parents=True)
    _write(tmp_path / "etc/os-release", 'NAME="Ubuntu"\nPRETTY_NAME="Ubuntu 22.04.4 LTS"\n')
    return tmp_path


def test_detect_reads_a_recorded_machine(machine: Path) -> None:
    """Every detectable host field comes from the recorded files."""
    fields = HostFacts.detect(machine).fields
    assert fields["host_processor_model_name"] == "Intel(R) Xeon(R) Platinum 8480C"
    assert fields["host_processors_per_node"] == 2
    assert fields["host_processor_core_count"] == 56
    assert fields["host_processor_frequency"] == "3800 MHz (max)"
    assert fields["host_processor_caches"] == "L1d 48K, L2 2048K"
    assert fields["host_memory_capacity"] == "2016 GiB"
    assert fields["host_storage_capacity"] == "2.0 TiB"
    assert fields["host_storage_type"] == "NVMe SSD"
    assert fields["host_network_card_count"] == 1
    assert fields["host_networking"] == "Ethernet: eth0 (100 Gb/s)"
    assert fields["operating_system"].startswith("Ubuntu 22.04.4 LTS (kernel ")


def test_nothing_detected_leaves_fields_out(tmp_path: Path) -> None:
    """A machine that reports nothing yields no host processor, memory or storage fields."""
    fields = HostFacts.detect(tmp_path).fields
    assert not {"host_processor_model_name", "host_memory_capacity", "host_storage_type"} & set(
        fields
    )


def test_cpu_without_physical_id_is_one_socket() -> None:
    """A VM's cpuinfo without physical ids counts as one socket with all its processors."""
    fields = cpu_fields(
        "processor : 0\nmodel name : AMD EPYC\n\nprocessor : 1\nmodel name : AMD EPYC\n"
    )
    assert (fields["host_processors_per_node"], fields["host_processor_core_count"]) == (1, 2)


def test_memory_and_os_parsers() -> None:
    """MemTotal becomes GiB; os-release without PRETTY_NAME falls back to the system name."""
    assert memory_fields("MemTotal: 16777216 kB") == {"host_memory_capacity": "16 GiB"}
    assert memory_fields("") == {}
    assert os_fields("", "6.1")["operating_system"].endswith("(kernel 6.1)")


class FakeNvml:
    """A recorded NVML: one A100-SXM4-80GB, driver 550.54.15, CUDA 12.4, PCIe Gen4 x16."""

    NVML_CLOCK_SM = 1

    class NVMLError(Exception):
        pass

    class Memory:
        total = 80 * 2**30

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.54.15"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12040

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return b"NVIDIA A100-SXM4-80GB"

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: int) -> int:
        return 4

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: int) -> int:
        return 16

    def nvmlDeviceGetMaxClockInfo(self, handle: int, clock: int) -> int:
        raise self.NVMLError("not supported")

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Memory:
        return self.Memory()


def test_gpu_facts_from_recorded_nvml() -> None:
    """Driver, CUDA, PCIe link and memory come from NVML; an unsupported clock query is None."""
    facts = hostinfo.first_matching_gpu(FakeNvml(), "A100-SXM4-80GB")
    assert facts == hostinfo.GpuFacts(
        name="NVIDIA A100-SXM4-80GB",
        driver="550.54.15",
        cuda="12.4",
        pcie="PCIe Gen4 x16",
        max_sm_clock_mhz=None,
        memory_mib=81920,
    )


def test_gpu_facts_of_another_gpu() -> None:
    """No NVML device is the run's GPU: no facts."""
    assert hostinfo.first_matching_gpu(FakeNvml(), "H100-SXM5-80GB") is None
