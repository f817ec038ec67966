"""Discovery through NVML, replayed from recorded states (no driver needed), plus one real run."""

from __future__ import annotations

import ctypes
import logging
from pathlib import Path
from typing import Any

import attrs
import pynvml
import pytest

from mlperf_mig.errors import DataFileError, DiscoveryError, NameParseError
from mlperf_mig.registry import (
    Catalog,
    RecordedNvml,
    detect,
    parse_mig_uuid,
    read_nvml_state,
    study_layout,
)
from mlperf_mig.registry.discovery import detection_from_state

FIXTURES = Path(__file__).parent / "fixtures"
RECORDED = (
    "a100-80gb-scenario7",
    "a100-80gb-invalid-constant",
    "h100-mig-disabled",
    "h200-7x1g",
    "no-driver",
    "vgpu-a100d-2-20c",
    "vgpu-a100d-20c-time-sliced",
)


def _detect(state: dict[str, Any], catalog: Catalog):
    return detect(RecordedNvml(state), catalog=catalog)


def test_a100_carrying_scenario_7(load_state, catalog: Catalog) -> None:
    """The recorded A100-80GB shows study scenario 7 with placements, matched to the catalog."""
    gpu = _detect(load_state("a100-80gb-scenario7"), catalog).gpus[0]
    assert gpu.catalog_gpu.name == "A100-SXM4-80GB" and gpu.mig_current is True
    assert gpu.layout() == study_layout(7, gpu.catalog_gpu)
    assert [(d.profile.name, d.placement_start) for d in gpu.mig_devices] == [
        ("2g.20gb", 0),
        ("2g.20gb", 2),
        ("2g.20gb", 4),
        ("1g.10gb", 6),
    ]


def test_recorded_a100_agrees_with_the_shipped_table(load_state, catalog: Catalog) -> None:
    """Live profiles equal to the table produce no disagreement."""
    assert _detect(load_state("a100-80gb-scenario7"), catalog).gpus[0].disagreements == ()


def test_gpu_instance_ids_are_not_profile_ids(load_state, catalog: Catalog) -> None:
    """GPU-instance IDs (3, 4, 5, 13) stay apart from profile IDs (14, 19)."""
    gpu = _detect(load_state("a100-80gb-scenario7"), catalog).gpus[0]
    assert [d.gpu_instance_id for d in gpu.mig_devices] == [3, 4, 5, 13]
    assert [d.profile.profile_id for d in gpu.mig_devices] == [14, 14, 14, 19]


def test_h100_with_mig_disabled(load_state, catalog: Catalog) -> None:
    """An H100 with MIG off is known, has no MIG devices and falls back to the shipped table."""
    gpu = _detect(load_state("h100-mig-disabled"), catalog).gpus[0]
    assert (gpu.catalog_gpu.name, gpu.mig_current, gpu.mig_pending) == (
        "H100-SXM5-80GB",
        False,
        False,
    )
    assert gpu.mig_devices == () and gpu.layout() is None
    assert gpu.catalog_gpu == gpu.shipped_gpu


def test_h200_with_seven_small_instances(load_state, catalog: Catalog) -> None:
    """The recorded H200 carries 7x 1g.18gb on slices 0-6."""
    gpu = _detect(load_state("h200-7x1g"), catalog).gpus[0]
    assert str(gpu.layout()) == "7x1g.18gb"
    assert sorted(d.placement_start for d in gpu.mig_devices) == list(range(7))


def test_no_driver_is_a_normal_state(load_state, catalog: Catalog) -> None:
    """Without a driver detect() returns no GPUs and a message instead of raising."""
    detection = _detect(load_state("no-driver"), catalog)
    assert detection.gpus == ()
    assert "driver not loaded" in detection.message


def test_driver_without_gpus_is_a_normal_state(catalog: Catalog) -> None:
    """A driver that reports no GPU gives a message saying so."""
    state = {
        "format": "mlperf-mig nvml state v1",
        "init_error": None,
        "driver_version": "570.1",
        "gpus": [],
    }
    assert _detect(state, catalog).message == "the NVIDIA driver is loaded but reports no GPU"


@pytest.mark.parametrize("name", RECORDED)
def test_reading_a_replayed_state_gives_it_back(name: str, load_state) -> None:
    """read_nvml_state through the replaying source returns the recorded state unchanged."""
    state = load_state(name)
    state.pop("note")
    assert read_nvml_state(RecordedNvml(state)) == state


def test_live_values_win_and_disagreements_are_reported(load_state, catalog: Catalog) -> None:
    """A live SM count that differs from the table is used and reported."""
    state = load_state("h200-7x1g")
    profile = next(p for p in state["gpus"][0]["gi_profiles"] if p["id"] == 9)
    profile["multiprocessorCount"] = 58
    gpu = _detect(state, catalog).gpus[0]
    assert gpu.catalog_gpu.profile("3g.71gb").sms == 58
    assert gpu.shipped_gpu.profile("3g.71gb").sms == 60
    assert any("3g.71gb: sms is 58 live but 60" in note for note in gpu.disagreements)


def test_live_placements_replace_inferred_ones(load_state, catalog: Catalog) -> None:
    """Profiles built from live data carry provenance "live" and no inferred marks."""
    gpu = _detect(load_state("h200-7x1g"), catalog).gpus[0]
    profile = gpu.catalog_gpu.profile("3g.71gb")
    assert (profile.provenance, profile.inferred_fields) == ("live", ())


def test_a_profile_the_driver_lacks_is_dropped(load_state, catalog: Catalog) -> None:
    """A shipped profile the driver does not offer is dropped and reported."""
    state = load_state("a100-80gb-scenario7")
    state["gpus"][0]["gi_profiles"] = [p for p in state["gpus"][0]["gi_profiles"] if p["id"] != 15]
    gpu = _detect(state, catalog).gpus[0]
    assert "1g.20gb" not in [p.name for p in gpu.catalog_gpu.profiles]
    assert any("1g.20gb (ID 15) is not offered" in note for note in gpu.disagreements)


def test_unknown_gpu_is_built_from_live_data(
    load_state, catalog: Catalog, caplog: pytest.LogCaptureFixture
) -> None:
    """An unknown MIG GPU becomes a record from live NVML data, with a warning."""
    state = load_state("h200-7x1g")
    state["gpus"][0].update(name="NVIDIA H999", pci_device_id="0x999910DE")
    with caplog.at_level(logging.WARNING):
        gpu = _detect(state, catalog).gpus[0]
    assert gpu.shipped_gpu is None
    assert (
        gpu.catalog_gpu.name,
        gpu.catalog_gpu.compute_slices,
        gpu.catalog_gpu.memory_slices,
    ) == ("H999", 7, 8)
    assert str(gpu.layout()) == "7x1g.18gb"
    assert "not in the catalog" in caplog.text


def test_a30_instance_counts_come_from_the_table(catalog: Catalog) -> None:
    """NVML's wrong A30 instance count is ignored in favour of the table, and reported."""
    a30 = catalog.get("A30")
    profiles = [
        {
            "constant": c,
            "name": f"MIG {p.name}",
            "id": p.profile_id,
            "sliceCount": p.compute_slices,
            "instanceCount": 7 if p.name == "1g.6gb" else p.max_instances,
            "multiprocessorCount": p.sms,
            "copyEngineCount": p.copy_engines,
            "decoderCount": p.decoders,
            "encoderCount": p.encoders,
            "jpegCount": p.jpeg_decoders,
            "ofaCount": p.ofa,
            "memorySizeMB": int(p.memory_gib * 1024),
            "placements": [[s, p.placement_size] for s in p.placement_starts],
        }
        for c, p in zip((0, 7, 1, 8, 3), a30.profiles)
    ]
    state = {
        "format": "mlperf-mig nvml state v1",
        "init_error": None,
        "driver_version": "550.1",
        "gpus": [
            {
                "name": "NVIDIA A30",
                "uuid": "GPU-0",
                "pci_device_id": "0x20B710DE",
                "memory_total_bytes": 25769803776,
                "mig_mode": [0, 0],
                "gi_profiles": profiles,
            }
        ],
    }
    gpu = _detect(state, catalog).gpus[0]
    assert gpu.catalog_gpu.profile("1g.6gb").max_instances == 4
    assert any("known NVML bug" in note for note in gpu.disagreements)


def test_without_privileges_profiles_come_from_attributes(load_state, catalog: Catalog) -> None:
    """When GPU-instance details are refused, devices match by slice count and memory, no placement."""
    state = load_state("a100-80gb-scenario7")
    gpu_state = state["gpus"][0]
    gpu_state["gpu_instance_error"] = "NO_PERMISSION"
    gpu = _detect(state, catalog).gpus[0]
    assert [(d.profile.name, d.placement_start) for d in gpu.mig_devices] == [
        ("2g.20gb", None),
        ("2g.20gb", None),
        ("2g.20gb", None),
        ("1g.10gb", None),
    ]
    assert any("privileges" in note for note in gpu.disagreements)


class _NotMigHandles(RecordedNvml):
    """A source whose nvmlDeviceIsMigDeviceHandle answers ctypes c_uint(0) for every handle."""

    def nvmlDeviceIsMigDeviceHandle(self, handle: object) -> ctypes.c_uint:
        return ctypes.c_uint(0)


def test_is_mig_device_handle_is_read_as_a_ctypes_value(load_state, catalog: Catalog) -> None:
    """A ctypes c_uint(0) (truthy as an object) is read as False and the handle is skipped."""
    detection = detect(_NotMigHandles(load_state("a100-80gb-scenario7")), catalog=catalog)
    assert detection.gpus[0].mig_devices == ()


@attrs.frozen
class _SmallArrays(RecordedNvml):
    """A source that records the size of each placement array the caller allocates."""

    sizes: list[int] = attrs.field(factory=list)

    def nvmlDeviceGetGpuInstancePossiblePlacements(self, handle, profile_id, placements, count_ref):
        if placements is not None:
            self.sizes.append(len(placements))
        return super().nvmlDeviceGetGpuInstancePossiblePlacements(
            handle, profile_id, placements, count_ref
        )


def test_placement_arrays_are_sized_from_the_count_query(load_state) -> None:
    """The caller allocates each placement array with the count NVML returned first."""
    source = _SmallArrays(load_state("a100-80gb-scenario7"))
    read_nvml_state(source)
    assert source.sizes == [7, 3, 2, 1, 1, 7, 4]


def _failing_gpu(state: dict[str, Any], error: int) -> RecordedNvml:
    """A source whose GPU answers `error` to nvmlDeviceGetMemoryInfo while it is being read."""

    class Failing(RecordedNvml):
        def nvmlDeviceGetMemoryInfo(self, handle: object) -> None:
            raise pynvml.NVMLError(error)

    return Failing(state)


@pytest.mark.parametrize("error", ["GPU_IS_LOST", "UNKNOWN", "NOT_FOUND"])
def test_a_gpu_lost_mid_read_is_a_gpu_in_an_error_state(
    load_state, catalog: Catalog, error: str
) -> None:
    """A GPU that answers GPU_IS_LOST, UNKNOWN or NOT_FOUND to a later query is recorded with what
    it answered before, the error and the query, not raised for the whole machine."""
    source = _failing_gpu(load_state("h200-7x1g"), getattr(pynvml, f"NVML_ERROR_{error}"))
    (gpu,) = detect(source, catalog=catalog).gpus
    assert (gpu.lost, gpu.error, gpu.failed_query) == (True, error, "nvmlDeviceGetMemoryInfo")
    assert (gpu.name, gpu.memory_mib, gpu.catalog_gpu, gpu.mig_devices) == (
        "NVIDIA H200",
        None,
        None,
        (),
    )


def test_another_nvml_error_mid_read_is_still_a_discovery_error(
    load_state, catalog: Catalog
) -> None:
    """An error that does not say the GPU is gone (a driver/library mismatch) still stops
    discovery with DiscoveryError naming it."""
    source = _failing_gpu(load_state("h200-7x1g"), pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH)
    with pytest.raises(DiscoveryError, match="RM has detected an NVML/RM version mismatch"):
        detect(source, catalog=catalog)


def test_a_gpu_without_mig_has_no_catalog_record(load_state, catalog: Catalog) -> None:
    """A GPU whose MIG mode NVML does not support is listed without MIG and without a record."""
    state = load_state("h100-mig-disabled")
    state["gpus"][0].update(name="NVIDIA L4", pci_device_id="0x27B810DE", mig_mode=None)
    gpu = _detect(state, catalog).gpus[0]
    assert (gpu.mig_current, gpu.catalog_gpu, gpu.mig_devices) == (None, None, ())


def test_modern_and_legacy_mig_uuids_parse() -> None:
    """Both MIG UUID forms parse; the legacy one yields its GPU-instance and compute-instance IDs."""
    assert not parse_mig_uuid("MIG-c7384736-a75d-5afc-978f-d2f1294409fd").legacy
    legacy = parse_mig_uuid("MIG-GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f/7/0")
    assert (legacy.legacy, legacy.gpu_instance_id, legacy.compute_instance_id) == (True, 7, 0)


def test_a_malformed_mig_uuid_is_rejected() -> None:
    """Anything else raises NameParseError showing both forms."""
    with pytest.raises(NameParseError, match="MIG-GPU-<gpu uuid>"):
        parse_mig_uuid("GPU-c7384736-a75d-5afc-978f-d2f1294409fd")


def test_legacy_uuid_disagreeing_with_nvml_is_reported(load_state, catalog: Catalog) -> None:
    """A legacy UUID whose IDs differ from NVML's GPU-instance ID is reported."""
    state = load_state("a100-80gb-scenario7")
    state["gpus"][0]["mig_devices"][0]["uuid"] = "MIG-GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f/9/0"
    gpu = _detect(state, catalog).gpus[0]
    assert any("names GPU instance 9" in note for note in gpu.disagreements)


def test_recorded_file_with_wrong_format_is_rejected(tmp_path: Path) -> None:
    """A JSON file that is not a recorded NVML state raises DataFileError naming the file."""
    path = tmp_path / "state.json"
    path.write_text('{"gpus": []}')
    with pytest.raises(DataFileError, match=r"state\.json: field format"):
        RecordedNvml.from_file(path)


def test_detection_is_plain_data(load_state, catalog: Catalog) -> None:
    """Detection.to_dict carries GPU names, layout and device UUIDs."""
    data = detection_from_state(load_state("a100-80gb-scenario7"), catalog).to_dict()
    assert data["gpus"][0]["layout"] == "3x2g.20gb+1g.10gb"
    assert data["gpus"][0]["mig_devices"][3]["uuid"] == "MIG-c7384736-a75d-5afc-978f-d2f1294409fd"


@pytest.mark.nvml
def test_detect_on_a_real_gpu() -> None:
    """On a machine with a GPU, detect() finds it and a replay of its state gives the same answer."""
    state = read_nvml_state(pynvml)
    detection = detect()
    assert detection.gpus and not detection.message
    assert detect(RecordedNvml(state)).gpus == detection.gpus


def test_an_invalid_profile_constant_mid_range_does_not_end_the_reading(
    load_state, catalog: Catalog
) -> None:
    """Profiles after a constant the driver calls INVALID_ARGUMENT are still read."""
    gpu = _detect(load_state("a100-80gb-invalid-constant"), catalog).gpus[0]
    live = {p.name: p.provenance for p in gpu.catalog_gpu.profiles}
    assert live["1g.10gb+me"] == "live" and live["1g.20gb"] == "live"


def test_invalid_profile_constants_are_recorded(load_state) -> None:
    """The constants that gave INVALID_ARGUMENT are written into the state, the others kept."""
    state = read_nvml_state(RecordedNvml(load_state("a100-80gb-invalid-constant")))
    gpu = state["gpus"][0]
    assert gpu["invalid_profile_constants"] == [5, 6]
    assert [p["constant"] for p in gpu["gi_profiles"]] == [0, 1, 2, 3, 4, 7, 9]


def test_mig_backed_vgpu_guest_is_one_instance_of_its_profile(load_state, catalog: Catalog) -> None:
    """A VM seeing the vGPU A100D-2-20C has one 2g.20gb instance of an A100 PCIe 80GB."""
    gpu = _detect(load_state("vgpu-a100d-2-20c"), catalog).gpus[0]
    assert gpu.virtualization == "vgpu"
    assert (gpu.vgpu.type_name, gpu.vgpu.profile.name, gpu.vgpu.time_sliced) == (
        "A100D-2-20C",
        "2g.20gb",
        False,
    )
    assert gpu.vgpu.parent_gpu.name == gpu.catalog_gpu.name == "A100-PCIE-80GB"
    assert gpu.mig_vgpu and gpu.mig_current is None


def test_grid_prefix_of_older_guest_drivers_is_understood(load_state, catalog: Catalog) -> None:
    """'GRID A100D-1-10CME' (older guest drivers) names the 1g.10gb+me profile."""
    state = load_state("vgpu-a100d-2-20c")
    state["gpus"][0]["name"] = "GRID A100D-1-10CME"
    gpu = _detect(state, catalog).gpus[0]
    assert gpu.vgpu.profile.name == "1g.10gb+me"


def test_time_sliced_vgpu_is_not_mig(load_state, catalog: Catalog) -> None:
    """A100D-20C has no compute-slice part: a time-sliced share, no profile, not a MIG vGPU."""
    gpu = _detect(load_state("vgpu-a100d-20c-time-sliced"), catalog).gpus[0]
    assert gpu.vgpu.time_sliced and gpu.vgpu.profile is None and not gpu.mig_vgpu
    assert gpu.vgpu.parent_gpu.name == "A100-PCIE-80GB"


def test_unknown_vgpu_type_is_reported(load_state, catalog: Catalog) -> None:
    """A vGPU name that is no known type is kept without a profile and the reason is reported."""
    state = load_state("vgpu-a100d-2-20c")
    state["gpus"][0]["name"] = "NVIDIA Virtual Display"
    gpu = _detect(state, catalog).gpus[0]
    assert gpu.vgpu.profile is None and not gpu.mig_vgpu
    assert any("neither a known MIG-backed" in note for note in gpu.disagreements)


def test_vgpu_type_of_another_board_than_the_pci_id_is_reported(
    load_state, catalog: Catalog
) -> None:
    """A100DX-2-20C on a PCIe board's ID: the type name's GPU is used and the conflict noted."""
    state = load_state("vgpu-a100d-2-20c")
    state["gpus"][0]["name"] = "NVIDIA A100DX-2-20C"
    gpu = _detect(state, catalog).gpus[0]
    assert gpu.catalog_gpu.name == "A100-SXM4-80GB"
    assert any("the vGPU type is used" in note for note in gpu.disagreements)


def test_bare_metal_gpu_has_no_vgpu(load_state, catalog: Catalog) -> None:
    """Virtualization mode NONE is bare metal: no vGPU record."""
    gpu = _detect(load_state("a100-80gb-scenario7"), catalog).gpus[0]
    assert (gpu.virtualization, gpu.vgpu) == ("none", None)


def test_vgpu_is_in_the_plain_data(load_state, catalog: Catalog) -> None:
    """to_dict carries the vGPU record by name."""
    data = _detect(load_state("vgpu-a100d-2-20c"), catalog).to_dict()
    assert data["gpus"][0]["vgpu"] == {
        "type_name": "A100D-2-20C",
        "uuid": "GPU-7f3e2a10-4c5b-11ee-9d2a-3c8f1e6b0a21",
        "time_sliced": False,
        "parent_gpu": "A100-PCIE-80GB",
        "profile": "2g.20gb",
        "shared_instance": None,
    }


def test_cuda_and_nvml_versions_are_read(load_state, catalog: Catalog) -> None:
    """The driver's CUDA version (NVML's 12040 = 12.4) and the NVML version are in the detection."""
    detection = _detect(load_state("a100-80gb-scenario7"), catalog)
    assert detection.cuda_version == (12, 4) and detection.nvml_version == "12.550.54.14"


def test_a_state_without_cuda_version_reads_as_unknown(load_state, catalog: Catalog) -> None:
    """A state recorded before the CUDA version was recorded gives None, not an error."""
    state = load_state("h200-7x1g")
    del state["cuda_driver_version"], state["nvml_version"]
    assert _detect(state, catalog).cuda_version is None


def test_mig_on_with_unsupported_profile_queries_says_what_nvml_answered(
    load_state, catalog: Catalog
) -> None:
    """MIG on while every profile query answers NOT_SUPPORTED: the note says so (not 'MIG
    disabled on an older driver?'), and doctor's verdict does not call MIG off."""
    from mlperf_mig.doctor.reconcile import check_gpu

    state = load_state("h100-mig-disabled")
    state["gpus"][0]["mig_mode"] = [1, 1]
    gpu = _detect(state, catalog).gpus[0]
    assert gpu.mig_current is True
    assert (
        "every MIG profile query answered NOT_SUPPORTED with MIG on; using the shipped table"
        in gpu.disagreements
    )
    verdict = check_gpu(gpu).verdict
    assert "NVML listed none with MIG on" in verdict and "MIG off" not in verdict


def test_mig_off_without_profiles_says_mig_off(load_state, catalog: Catalog) -> None:
    """MIG off with no profile listed: the note names the answer and that MIG is off."""
    gpu = _detect(load_state("h100-mig-disabled"), catalog).gpus[0]
    assert list(gpu.disagreements) == [
        "every MIG profile query answered NOT_SUPPORTED with MIG off; using the shipped table"
    ]
