"""The GPU catalog: shipped data, lookups, validation of data files and the search path."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mlperf_mig.errors import DataFileError, UnknownGpuError
from mlperf_mig.registry import Catalog, Gpu, load_catalog, load_gpu_file

SHIPPED = Path(__file__).resolve().parents[2] / "systems" / "gpus"
ISSUE_GPUS = (
    "A100-SXM4-40GB",
    "A100-PCIE-40GB",
    "A100-SXM4-80GB",
    "A100-PCIE-80GB",
    "A30",
    "H100-SXM5-80GB",
    "H100-PCIE-80GB",
    "H100-NVL-94GB",
    "GH200-96GB",
    "GH200-144GB",
    "H200-SXM5-141GB",
    "H200-NVL-141GB",
    "B200-180GB",
)


@pytest.fixture(name="a100_80_text", scope="module")
def fixture_a100_80_text() -> str:
    return (SHIPPED / "a100-sxm4-80gb.toml").read_text()


def _write(tmp_path: Path, text: str, name: str = "gpu.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", ISSUE_GPUS)
def test_every_gpu_of_the_issue_is_shipped(catalog: Catalog, name: str) -> None:
    """Each GPU product the registry must know has a data file that loads."""
    assert catalog.get(name).name == name


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"),
        ("a100-sxm4-80gb", "A100-SXM4-80GB"),
        ("A100-80GB", "A100-SXM4-80GB"),
        ("NVIDIA H100 80GB HBM3", "H100-SXM5-80GB"),
        ("h100 nvl", "H100-NVL-94GB"),
        ("H200", "H200-SXM5-141GB"),
        ("NVIDIA A100 80GB PCIe", "A100-PCIE-80GB"),
        ("A30", "A30"),
    ],
)
def test_gpu_lookup_accepts_nvml_names_and_aliases(
    catalog: Catalog, query: str, expected: str
) -> None:
    """GPUs resolve case-insensitively by NVML name, without "NVIDIA ", and by alias."""
    assert catalog.get(query).name == expected


def test_unknown_gpu_lists_the_known_ones(catalog: Catalog) -> None:
    """An unknown GPU name raises UnknownGpuError naming the known GPUs and the search path."""
    with pytest.raises(UnknownGpuError, match=r"A100-SXM4-80GB.*MLPERF_MIG_SYSTEMS_PATH"):
        catalog.get("RTX-4090")


def test_catalog_supports_in_and_iteration(catalog: Catalog) -> None:
    """`in` accepts any accepted name and iteration yields every GPU once."""
    assert "nvidia h200" in catalog and "RTX-4090" not in catalog
    assert len({gpu.name for gpu in catalog}) == len(catalog)


def test_pci_device_id_lookup_uses_the_packed_form(catalog: Catalog) -> None:
    """Packed PCI IDs `(device << 16) | vendor` find their GPU."""
    assert catalog.by_pci_device_id(0x20B210DE).name == "A100-SXM4-80GB"
    assert catalog.by_pci_device_id(0x233B10DE).name == "H200-NVL-141GB"


def test_one_profile_name_means_different_shapes_on_different_gpus(
    a100_40: Gpu, a100_80: Gpu
) -> None:
    """1g.10gb is two memory slices on A100-40GB and one on A100-80GB."""
    assert a100_40.profile("1g.10gb").memory_slices == 2
    assert a100_80.profile("1g.10gb").memory_slices == 1


def test_inferred_entries_are_marked(catalog: Catalog) -> None:
    """Placements that were inferred (H200) carry the mark; documented ones (A100-40GB) do not."""
    assert "placement_starts" in catalog.get("H200").profile("3g.71gb").inferred_fields
    assert catalog.get("A100-40GB").profile("3g.20gb").inferred_fields == ()
    assert catalog.get("GH200-144GB").profile("7g.144gb").provenance == "inferred"


def test_a30_keeps_its_instance_counts_from_the_table(a30: Gpu) -> None:
    """The A30 is marked as a GPU whose NVML instance counts are wrong."""
    assert a30.nvml_instance_counts_reliable is False


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        (
            "placement_starts = [0, 4]",
            "placement_starts = [0, 6]",
            r"profiles\[4\] \(3g.40gb\).placement_starts",
        ),
        ("max_instances = 3", "max_instances = 4", r"profiles\[3\] \(2g.20gb\).max_instances"),
        ('name = "3g.40gb"', 'name = "3g40"', r"profiles\[4\] \(3g40\).name"),
        (
            "compute_slices = 4\n",
            "compute_slices = 5\n",
            r"profiles\[5\] \(4g.40gb\).compute_slices",
        ),
        ("placement_size = 8", "placement_size = 7", r"profiles\[6\] \(7g.80gb\).placement_size"),
        (
            'provenance = "nvidia-smi"\ninferred',
            'provenance = "rumour"\ninferred',
            r"profiles\[0\] \(1g.10gb\).provenance",
        ),
        ('pci_device_ids = ["0x20B210DE"]', 'pci_device_ids = ["20B2"]', r"gpu.pci_device_ids"),
        ("memory_slices = 8", "memory_slizes = 8", r"gpu.memory_slizes"),
        ("profile_id = 15", "profile_id = 19", r"profiles\[2\].profile_id"),
        ("sms = 98", 'sms = "98"', r"profiles\[6\].sms"),
        ("memory_gib = 9.50", "memory_gib = nan", r"profiles\[0\].memory_gib"),
    ],
)
def test_malformed_data_file_names_file_and_field(
    tmp_path: Path, a100_80_text: str, old: str, new: str, field: str
) -> None:
    """A wrong field in a GPU file raises DataFileError naming the file and that field."""
    assert old in a100_80_text
    path = _write(tmp_path, a100_80_text.replace(old, new, 1))
    with pytest.raises(
        DataFileError, match=rf"{re.escape(str(path))}: field {field} .*fix the data file"
    ):
        load_gpu_file(path)


def test_invalid_toml_is_a_data_file_error(tmp_path: Path) -> None:
    """A file that is not TOML raises DataFileError naming the file."""
    path = _write(tmp_path, "[gpu\nname = ")
    with pytest.raises(DataFileError, match="not valid TOML"):
        load_gpu_file(path)


def test_extra_path_argument_adds_a_gpu(tmp_path: Path, a100_80_text: str) -> None:
    """A folder passed as extra_paths adds its GPUs without editing code."""
    text = a100_80_text.replace('name = "A100-SXM4-80GB"', 'name = "A100X-TEST"', 1)
    text = re.sub(
        r"(?m)^(nvml_names|aliases|system_id_name|vgpu_prefixes|pci_device_ids) = .*\n", "", text
    )
    _write(tmp_path, text)
    assert load_catalog([tmp_path]).get("a100x-test").compute_slices == 7


def test_one_extra_path_may_be_given_without_a_list(tmp_path: Path, a100_80_text: str) -> None:
    """A single str path is one folder, not a sequence of one-character paths."""
    text = a100_80_text.replace('name = "A100-SXM4-80GB"', 'name = "A100X-TEST"', 1)
    text = re.sub(
        r"(?m)^(nvml_names|aliases|system_id_name|vgpu_prefixes|pci_device_ids) = .*\n", "", text
    )
    _write(tmp_path, text)
    assert "A100X-TEST" in load_catalog(str(tmp_path))


def test_a_folder_without_gpu_files_is_an_error(tmp_path: Path) -> None:
    """A search-path folder with no .toml files is refused instead of adding nothing silently."""
    (tmp_path / "gpus").mkdir()
    with pytest.raises(DataFileError, match=r"holds no \.toml files"):
        load_catalog([tmp_path])


def test_environment_search_path_adds_a_gpu(
    tmp_path: Path, a100_80_text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MLPERF_MIG_SYSTEMS_PATH is read when the catalog is loaded."""
    text = a100_80_text.replace('name = "A100-SXM4-80GB"', 'name = "ENV-GPU"', 1)
    text = re.sub(
        r"(?m)^(nvml_names|aliases|system_id_name|vgpu_prefixes|pci_device_ids) = .*\n", "", text
    )
    _write(tmp_path, text)
    monkeypatch.setenv("MLPERF_MIG_SYSTEMS_PATH", str(tmp_path))
    assert "ENV-GPU" in load_catalog()


def test_a_later_file_replaces_a_shipped_gpu(tmp_path: Path, a100_80_text: str) -> None:
    """A user file with a shipped GPU's name replaces that entry."""
    _write(tmp_path, a100_80_text.replace("sms = 98", "sms = 99", 1))
    assert load_catalog([tmp_path]).get("A100-80GB").profile("7g.80gb").sms == 99


def test_an_alias_used_by_two_gpus_is_an_error(tmp_path: Path, a100_80_text: str) -> None:
    """Two GPUs claiming the same alias raise DataFileError naming both."""
    text = a100_80_text.replace('name = "A100-SXM4-80GB"', 'name = "CLASH"', 1)
    _write(tmp_path, text)
    with pytest.raises(DataFileError, match="already used by"):
        load_catalog([tmp_path])


def test_a_missing_search_path_is_an_error(tmp_path: Path) -> None:
    """A search-path entry that does not exist raises DataFileError saying so."""
    with pytest.raises(DataFileError, match="does not exist"):
        load_catalog([tmp_path / "nowhere"])


@pytest.mark.parametrize(
    ("gpu", "profile", "gib"),
    [
        ("H200-SXM5-141GB", "2g.35gb", 32.25),
        ("H200-SXM5-141GB", "7g.141gb", 139.75),
        ("A100-SXM4-80GB", "1g.10gb", 9.50),
        ("A100-PCIE-80GB", "1g.10gb+me", 9.50),
        ("A100-SXM4-80GB", "3g.40gb", 39.25),
        ("A100-PCIE-80GB", "4g.40gb", 39.25),
        ("A100-SXM4-80GB", "7g.80gb", 78.75),
    ],
)
def test_corrected_memory_sizes(catalog: Catalog, gpu: str, profile: str, gib: float) -> None:
    """The memory sizes corrected from real printouts (issue 12) are in the data."""
    assert catalog.get(gpu).profile(profile).memory_gib == gib


def test_a30_me_placements_are_no_longer_inferred(a30: Gpu) -> None:
    """2g.12gb+me placements {0,2} size 2 were printed on driver 535.183.01."""
    profile = a30.profile("2g.12gb+me")
    assert (profile.placement_starts, profile.placement_size) == ((0, 2), 2)
    assert "placement_starts" not in profile.inferred_fields


def test_gh200_120gb_is_found_by_its_nvml_name(catalog: Catalog) -> None:
    """'NVIDIA GH200 120GB' shares PCI ID 0x2342 with the GH200 480GB and is the same record."""
    assert catalog.find("NVIDIA GH200 120GB") is catalog.by_pci_device_id(0x234210DE)


def test_b200_pci_id_0x2909_matches_no_180gb_b200(catalog: Catalog) -> None:
    """0x2909 (in no NVIDIA list; a 168 GB SKU in a third-party table) does not match the B200-180GB."""
    assert catalog.by_pci_device_id(0x290910DE) is None
    assert catalog.by_pci_device_id(0x290110DE).name == "B200-180GB"


def test_b200_printed_encoders_stay_and_unprinted_ones_stay_unknown(catalog: Catalog) -> None:
    """Printed profiles have 0 encoders; the 7g's encoders, never printed, stay unknown."""
    b200 = catalog.get("B200")
    assert b200.profile("2g.45gb").encoders == 0 and b200.profile("7g.180gb").encoders is None


def test_b200_guide_copy_engines_are_added_without_its_unreliable_decoders(
    catalog: Catalog,
) -> None:
    """3g/4g/7g carry the guide's CE 6/8/16 and OFA 0/0/1, not its NVDEC 1 (live 2g shows 2)."""
    b200 = catalog.get("B200")
    big = [b200.profile(n) for n in ("3g.90gb", "4g.90gb", "7g.180gb")]
    assert [(p.copy_engines, p.ofa, p.decoders) for p in big] == [
        (6, 0, None),
        (8, 0, None),
        (16, 1, None),
    ]


@pytest.mark.parametrize(
    "gpu", ["H100-NVL-94GB", "H200-NVL-141GB", "H200-SXM5-141GB", "B200-180GB", "A30"]
)
def test_confirmed_ids_and_names_are_not_inferred(catalog: Catalog, gpu: str) -> None:
    """PCI IDs and NVML names confirmed by printouts are no longer marked inferred."""
    inferred = catalog.get(gpu).inferred_fields
    assert "pci_device_ids" not in inferred and "nvml_names" not in inferred
