"""Issue 24: Blackwell, H20, H800, A800 in the catalog, MIG's new profile kinds (+gfx, +me.all,
-me), per-GPU profile IDs, name aliases, PCI subsystem keys, NVML constants to 0x11 and the v3
struct, and DC vGPU types."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from mlperf_mig.errors import DataFileError, LayoutError, NameParseError
from mlperf_mig.registry import (
    Catalog,
    RecordedNvml,
    detect,
    load_catalog,
    match_layout,
    mig_setup,
    parse_layout,
    parse_system_id,
    parse_vgpu_type,
    read_nvml_state,
    solve_placements,
    study_layout,
    system_id,
    usable_devices,
    valid_layouts,
)
from mlperf_mig.registry.discovery import detection_from_state
from mlperf_mig.registry.model import name_attributes
from mlperf_mig.registry.replay import nvml_error
from mlperf_mig.registry.study import study_scenarios

SHIPPED = Path(__file__).resolve().parents[2] / "systems" / "gpus"
RTX_SE = "RTX PRO 6000 Blackwell Server Edition"
NEW_GPUS = {  # NVML name -> catalog name
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": "RTX-PRO-6000-Blackwell-Server-96GB",
    "NVIDIA RTX PRO 6000 Blackwell Workstation Edition": "RTX-PRO-6000-Blackwell-Workstation-96GB",
    "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition": "RTX-PRO-6000-Blackwell-Max-Q-96GB",
    "NVIDIA RTX PRO 5000 Blackwell": "RTX-PRO-5000-Blackwell-48GB",
    "NVIDIA RTX PRO 4500 Blackwell": "RTX-PRO-4500-Blackwell-32GB",
    "NVIDIA GB200": "GB200-186GB",
    "NVIDIA B300 SXM6 AC": "B300-288GB",
    "NVIDIA GB300": "GB300",
    "NVIDIA H20": "H20-96GB",
    "NVIDIA H100": "H100-SXM5-94GB",
    "NVIDIA H800": "H800-80GB",
    "NVIDIA H800 PCIe": "H800-80GB",
    "NVIDIA H800 NVL": "H800-NVL-94GB",
    "NVIDIA A800 40GB Active": "A800-40GB-Active",
    "NVIDIA A800-SXM4-80GB": "A800-80GB",
    "NVIDIA A800 80GB PCIe": "A800-80GB",
}
RECORDED = ("rtx-pro-6000-gfx", "gb200-early-names", "thor-constant-0x11")


def _file(name: str) -> dict[str, Any]:
    return tomllib.loads((SHIPPED / name).read_text())


def _detect_gpu(load_state, catalog: Catalog, name: str, **changes: Any):
    state = load_state(name)
    state["gpus"][0].update(changes)
    return detect(RecordedNvml(state), catalog=catalog).gpus[0]


def _vgpu_guest(load_state, catalog: Catalog, name: str, pci: str):
    state = load_state("vgpu-a100d-2-20c")
    state["gpus"][0].update(name=name, pci_device_id=pci)
    return detect(RecordedNvml(state), catalog=catalog).gpus[0]


def _write_gpu(tmp_path: Path, source: str, old: str, new: str) -> Path:
    text = (SHIPPED / source).read_text()
    assert old in text
    path = tmp_path / source
    path.write_text(text.replace(old, new, 1))
    return path


# --- the catalog ----------------------------------------------------------------------------
@pytest.mark.parametrize(("nvml_name", "name"), sorted(NEW_GPUS.items()))
def test_new_gpus_are_found_by_their_nvml_name(catalog: Catalog, nvml_name: str, name: str) -> None:
    """Each GPU the issue names is shipped and found by the name NVML prints."""
    assert catalog.get(nvml_name).name == name


@pytest.mark.parametrize("path", sorted(SHIPPED.glob("*.toml")), ids=lambda p: p.name)
def test_every_catalog_file_keeps_ids_and_names_unique_per_gpu(path: Path) -> None:
    """In every shipped file profile IDs, NVML constants and names (aliases too) are unique."""
    profiles = tomllib.loads(path.read_text())["profiles"]
    ids = [p["profile_id"] for p in profiles]
    constants = [p["nvml_constant"] for p in profiles if "nvml_constant" in p]
    names = [n.lower() for p in profiles for n in (p["name"], *p.get("aliases", []))]
    assert len(set(ids)) == len(ids) and len(set(constants)) == len(constants)
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("path", sorted(SHIPPED.glob("*.toml")), ids=lambda p: p.name)
def test_every_field_source_names_a_field_and_a_listed_source(path: Path) -> None:
    """A field source is `inferred: ...`, a [tag] of the file's sources, or a text of its own."""
    data = tomllib.loads(path.read_text())
    tags = {s[1:].split("]")[0] for s in data["gpu"].get("sources", []) if s.startswith("[")}
    tables = [data["gpu"].get("field_sources", {})] + [
        p.get("field_sources", {}) for p in data["profiles"]
    ]
    for table in tables:
        for source in table.values():
            head = source.split(";")[0].split(":")[0].strip()
            assert head == "inferred" or head in tags or " " in head


def test_rtx_pro_6000_ids_are_its_own(catalog: Catalog) -> None:
    """The RTX PRO 6000 uses IDs 14/21/47/65/67/5/35/64/66/0/32, not the 19/20/15/14/9/5/0 set."""
    ids = {p.name: p.profile_id for p in catalog.get(RTX_SE).profiles}
    assert ids == {
        "1g.24gb": 14,
        "1g.24gb+me": 21,
        "1g.24gb+gfx": 47,
        "1g.24gb+me.all": 65,
        "1g.24gb-me": 67,
        "2g.48gb": 5,
        "2g.48gb+gfx": 35,
        "2g.48gb+me.all": 64,
        "2g.48gb-me": 66,
        "4g.96gb": 0,
        "4g.96gb+gfx": 32,
    }


def test_inferred_placements_and_constants_say_so(catalog: Catalog) -> None:
    """Where the RTX PRO 6000 data is not documented or printed, the fields are marked inferred."""
    for profile in catalog.get(RTX_SE).profiles:
        assert {"placement_starts", "nvml_constant"} <= set(profile.inferred_fields)
        assert dict(profile.field_sources)["profile_id"] == "smi"


def test_h20_sms_are_unknown_not_copied_from_h100(catalog: Catalog) -> None:
    """The H20 has far fewer SMs than the H100: its SM counts stay unknown."""
    assert all(p.sms is None for p in catalog.get("H20").profiles)


def test_gb300_instance_counts_are_marked_unreliable(catalog: Catalog) -> None:
    """NVML's instance counts are not trusted on the GB300 (3 1g instances created while -lgip said 7)."""
    assert catalog.get("GB300").nvml_instance_counts_reliable is False


def test_workstation_boards_carry_their_mig_prerequisites(catalog: Catalog) -> None:
    """The Workstation and Max-Q need compute mode and a minimum vBIOS; the Server Edition does not."""
    assert "98.02.55.00.00" in catalog.get("RTX-PRO-6000-WS").prerequisites
    assert "98.02.6A.00.00" in catalog.get("RTX-PRO-6000-Max-Q").prerequisites
    assert "--gpumode=compute" in catalog.get("RTX-PRO-6000-WS").prerequisites
    assert catalog.get(RTX_SE).prerequisites == ""


def test_h200_7g_row_cites_its_printout(catalog: Catalog) -> None:
    """The H200 7g.141gb row is sourced from the mig-parted issue #120 printout, not a test fixture."""
    gpu = catalog.get("H200")
    assert (
        not any("test fixture" in s for s in gpu.sources)
        and "issue #120" in gpu.profile("7g.141gb").note
    )


# --- profile attributes and names -----------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "attributes"),
    [
        ("1g.10gb", ()),
        ("1g.10gb+me", ("me",)),
        ("1g.24gb+me.all", ("me.all",)),
        ("1g.24gb-me", ("no-me",)),
        ("4g.96gb+gfx", ("gfx",)),
        ("MIG 2g.48gb+gfx", ("gfx",)),
    ],
)
def test_profile_names_carry_their_attributes(name: str, attributes: tuple[str, ...]) -> None:
    """+me, +me.all, -me and +gfx parse into the attributes me, me.all, no-me and gfx."""
    assert name_attributes(name) == attributes


@pytest.mark.parametrize("name", ["1g.24gb+me-me", "1g.24gb+gfx+gfx", "1g.24gb+foo", "24gb"])
def test_contradictory_or_unknown_suffixes_do_not_parse(name: str) -> None:
    """Two media kinds, a repeated suffix or an unknown one is not a profile name."""
    assert name_attributes(name) is None


def test_layout_strings_keep_attribute_suffixes_with_their_profile(catalog: Catalog) -> None:
    """`+me.all` and `+gfx` stay on their profile when `+` also separates profiles."""
    layout = parse_layout(catalog.get(RTX_SE), "1g.24gb+me.all+2x1g.24gb-me+1g.24gb-me")
    assert [p.name for p in layout.profiles] == [
        "1g.24gb+me.all",
        "1g.24gb-me",
        "1g.24gb-me",
        "1g.24gb-me",
    ]
    assert str(parse_layout(catalog.get(RTX_SE), "2g.48gb+gfx+2g.48gb")) == "2g.48gb+2g.48gb+gfx"


def test_short_names_mean_the_plain_profile(catalog: Catalog) -> None:
    """`2g` on the RTX PRO 6000 is 2g.48gb, not one of its +gfx, +me.all or -me siblings."""
    assert parse_layout(catalog.get(RTX_SE), "2g+2x1g").spec() == "2g.48gb+2x1g.24gb"


def test_system_ids_with_new_kinds_round_trip(catalog: Catalog) -> None:
    """A layout with +me.all and -me instances survives the system-ID round trip."""
    layout = parse_layout(catalog.get(RTX_SE), "2g.48gb+me.all+2x1g.24gb-me")
    assert parse_system_id(system_id(layout), catalog) == layout


def test_gb200_early_names_are_aliases_of_the_same_profile(catalog: Catalog) -> None:
    """1g.24gb / 3g.95gb / 7g.189gb (early boards) name IDs 19 / 9 / 0 of the GB200."""
    gb200 = catalog.get("GB200")
    assert [gb200.profile(n).profile_id for n in ("1g.24gb", "3g.95gb", "7g.189gb")] == [19, 9, 0]


def test_gb300_driver_61x_names_are_aliases(catalog: Catalog) -> None:
    """1g.31gb / 3g.126gb / 7g.251gb (driver 61x) name the GB300's 1g.35gb / 3g.139gb / 7g.278gb."""
    gb300 = catalog.get("GB300")
    assert [gb300.profile(n).name for n in ("1g.31gb", "3g.126gb", "7g.251gb")] == [
        "1g.35gb",
        "3g.139gb",
        "7g.278gb",
    ]


# --- the +me.all rule and the layouts -------------------------------------------------------
def test_me_all_beside_a_plain_1g_is_refused_naming_the_rule(catalog: Catalog) -> None:
    """+me.all allows only -me instances beside it: a plain 1g is refused with the nvml.h source."""
    layout = parse_layout(catalog.get(RTX_SE), "1g.24gb+me.all+1g.24gb")
    with pytest.raises(
        LayoutError, match=r"allows only -me instances.*inferred rule; nvml.h.*use 1g.24gb-me"
    ):
        solve_placements(layout)


def test_me_all_beside_no_me_instances_fits(catalog: Catalog) -> None:
    """+me.all with -me instances filling the GPU is a valid layout."""
    layout = parse_layout(catalog.get(RTX_SE), "1g.24gb+me.all+3x1g.24gb-me")
    assert [p.start for p in solve_placements(layout)] == [0, 1, 2, 3]


def test_me_all_beside_gfx_is_refused(catalog: Catalog) -> None:
    """A +gfx instance has media engines, so it cannot sit beside +me.all either."""
    with pytest.raises(LayoutError, match="allows only -me"):
        solve_placements(parse_layout(catalog.get(RTX_SE), "2g.48gb+me.all+2g.48gb+gfx"))


def test_rtx_pro_6000_layouts_hold_the_new_kinds_and_no_me_all_conflict(catalog: Catalog) -> None:
    """The RTX PRO 6000's valid layouts include +gfx, +me.all and -me ones, never +me.all with media."""
    layouts = {str(layout): layout for layout in valid_layouts(catalog.get(RTX_SE))}
    assert {
        "4x1g.24gb",
        "2x2g.48gb",
        "4g.96gb+gfx",
        "2g.48gb+me.all+2x1g.24gb-me",
        "4x1g.24gb+gfx",
    } <= set(layouts)
    for layout in layouts.values():
        if any(p.all_media_engines for p in layout.profiles):
            assert sum(not p.no_media_engines for p in layout.profiles) == 1


@pytest.mark.parametrize(
    ("gpu", "layout"),
    [
        ("GB200", "2x1g.23gb+2g.47gb+3g.93gb"),
        ("GB200", "7x1g.24gb"),
        ("GB200", "4x1g.47gb"),
        ("B300", "2x1g.34gb+2g.67gb+3g.135gb"),
        ("B300", "7x1g.34gb"),
        ("B300", "2x3g.135gb"),
        ("GB300", "2x1g.35gb+2g.70gb+3g.139gb"),
        ("H20", "2x1g.12gb+2g.24gb+3g.48gb"),
        ("RTX PRO 6000 Blackwell Workstation Edition", "2x1g.24gb+2g.48gb"),
    ],
)
def test_mig_parted_configs_of_the_new_gpus_are_valid(
    catalog: Catalog, gpu: str, layout: str
) -> None:
    """The configs NVIDIA's mig-parted ships for these GPUs (all-balanced, all-1g, ...) fit."""
    assert solve_placements(parse_layout(catalog.get(gpu), layout))


def test_mig_setup_uses_the_gpus_own_profile_ids(catalog: Catalog) -> None:
    """mig-setup creates RTX PRO 6000 instances by its IDs (64, 67), not the 7-slice ones."""
    steps = mig_setup(parse_layout(catalog.get(RTX_SE), "2g.48gb+me.all+2x1g.24gb-me")).steps()
    assert steps[1].startswith("nvidia-smi mig -i 0 -cgi 64:0 -C") and "-cgi 67:2" in steps[2]


def test_seven_slice_study_layouts_name_the_nearest_translation(catalog: Catalog) -> None:
    """Scenario 8 (7x1g) cannot exist on the 4-slice RTX PRO 6000; the error names 4x1g.24gb."""
    with pytest.raises(
        LayoutError,
        match=r"nearest valid translation on RTX-PRO-6000-Blackwell-Server-96GB is 4x1g.24gb",
    ):
        study_layout(8, RTX_SE, catalog)


def test_a_3g_study_layout_on_a_4_slice_gpu_names_the_nearest_translation(catalog: Catalog) -> None:
    """Scenario 3 (3g.40gb) has no 3-slice profile on the RTX PRO 6000; the error names 2g.48gb."""
    with pytest.raises(
        LayoutError,
        match=r"no profile shaped like 3g.40gb.*nearest valid translation .* is 2g.48gb",
    ):
        study_layout(3, RTX_SE, catalog)


def test_every_study_layout_translates_to_gb200_and_b300(catalog: Catalog) -> None:
    """The 8 x 7 Blackwell parts carry all eight study layouts under their own names."""
    for gpu in ("GB200", "B300"):
        for scenario in study_scenarios(catalog):
            assert solve_placements(study_layout(scenario.scenario, gpu, catalog))


# --- PCI keys -------------------------------------------------------------------------------
def test_rtx_pro_5000_48gb_is_matched_by_its_subsystem_only(catalog: Catalog) -> None:
    """0x2BB3 covers the 48GB (subsystem 204D) and 72GB (227A) boards; only the 48GB is catalogued."""
    assert catalog.by_pci_device_id(0x2BB310DE, 0x204D10DE).name == "RTX-PRO-5000-Blackwell-48GB"
    assert catalog.by_pci_device_id(0x2BB310DE, 0x227A10DE) is None


def test_the_72gb_rtx_pro_5000_is_built_from_live_data(load_state, catalog: Catalog) -> None:
    """A 72GB board (same device ID, subsystem 227A) is not taken for the 48GB one in discovery."""
    state = load_state("thor-constant-0x11")
    state["gpus"][0].update(
        name="NVIDIA RTX PRO 5000 Blackwell",
        pci_device_id="0x2BB310DE",
        pci_subsystem_id="0x227A10DE",
    )
    gpu = detection_from_state(state, catalog).gpus[0]
    assert gpu.shipped_gpu is None and gpu.catalog_gpu.provenance == "live"


def test_two_boards_on_one_device_id_need_subsystem_ids_or_names(tmp_path: Path) -> None:
    """A second file claiming 0x2BB3 without a subsystem ID or another NVML name is refused."""
    path = _write_gpu(
        tmp_path, "rtx-pro-5000-blackwell-48gb.toml", 'pci_subsystem_ids = ["0x204D"]\n', ""
    )
    path.write_text(
        path.read_text()
        .replace('name = "RTX-PRO-5000-Blackwell-48GB"', 'name = "Other"')
        .replace('aliases = ["RTX-PRO-5000", "RTX-PRO-5000-48GB"]', "aliases = []")
        .replace('nvml_names = ["NVIDIA RTX PRO 5000 Blackwell"]', "nvml_names = []")
    )
    with pytest.raises(
        DataFileError, match=r"0x2BB310DE.*neither pci_subsystem_ids nor nvml_names"
    ):
        load_catalog(path)


def test_a_malformed_subsystem_id_names_the_field(tmp_path: Path) -> None:
    """pci_subsystem_ids take four hex digits; anything else names the file and field."""
    path = _write_gpu(tmp_path, "rtx-pro-5000-blackwell-48gb.toml", '"0x204D"', '"204D10DE"')
    with pytest.raises(DataFileError, match=r"gpu.pci_subsystem_ids entry '204D10DE'"):
        load_catalog(path)


def test_b200_is_no_longer_keyed_by_0x2909(catalog: Catalog) -> None:
    """A GPU reporting 0x2909 (a 168 GB SKU per a third-party table) is not the B200-180GB."""
    assert catalog.by_pci_device_id(0x290910DE, 0, "NVIDIA B200") is None


# --- data-file validation of the new fields -------------------------------------------------
@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ('name = "1g.24gb-me"', 'name = "1g.24gb+me-me"', r"profiles\[4\] \(1g.24gb\+me-me\).name"),
        (
            'name = "1g.23gb"\naliases = ["1g.24gb"]',
            'name = "1g.23gb"\naliases = ["1g.24gb+me"]',
            r"profiles\[0\] \(1g.23gb\).aliases",
        ),
        (
            'name = "1g.23gb"\naliases = ["1g.24gb"]',
            'name = "1g.23gb"\naliases = ["1g.47gb"]',
            r"profiles\[2\].name repeats '1g.47gb'",
        ),
        (
            "[profiles.field_sources]\nprofile_id",
            "[profiles.field_sources]\nrumour",
            r"field_sources.rumour names no field",
        ),
    ],
)
def test_bad_new_fields_name_file_and_field(tmp_path: Path, old: str, new: str, field: str) -> None:
    """A bad attribute suffix, alias or field source raises DataFileError naming the field."""
    source = (
        "gb200-186gb.toml"
        if "1g.23gb" in old or "field_sources" in old
        else "rtx-pro-6000-blackwell-server.toml"
    )
    with pytest.raises(DataFileError, match=field):
        load_catalog(_write_gpu(tmp_path, source, old, new))


# --- NVML discovery -------------------------------------------------------------------------
@pytest.mark.parametrize("name", RECORDED)
def test_the_new_replays_read_back_unchanged(name: str, load_state) -> None:
    """read_nvml_state through the replay returns each new recorded state unchanged."""
    state = load_state(name)
    state.pop("note")
    assert read_nvml_state(RecordedNvml(state)) == state


def test_rtx_pro_6000_with_gfx_instances_is_detected(load_state, catalog: Catalog) -> None:
    """The replayed RTX PRO 6000 carries 2g.48gb+gfx + 2x 1g.24gb+gfx and agrees with the table."""
    gpu = _detect_gpu(load_state, catalog, "rtx-pro-6000-gfx")
    assert str(gpu.layout()) == "2g.48gb+gfx+2x1g.24gb+gfx"
    assert all(d.profile.graphics for d in gpu.mig_devices)
    assert not [n for n in gpu.disagreements if "1g.24gb+gfx" in n]


def test_the_v3_gfx_capability_marks_a_profile_graphics_capable(
    load_state, catalog: Catalog
) -> None:
    """CAPS_GFX from the v3 struct makes a profile +gfx even where its name does not say so."""
    state = load_state("thor-constant-0x11")
    entry = next(p for p in state["gpus"][0]["gi_profiles"] if p["constant"] == 0x11)
    entry["name"] = "MIG 3g.1gb"
    gpu = detect(RecordedNvml(state), catalog=catalog).gpus[0]
    assert gpu.catalog_gpu.profile("3g.1gb").attributes == ("gfx",)


def test_a_driver_without_the_v3_struct_is_read_through_v2(load_state) -> None:
    """A state recorded without capabilities replays as a driver that refuses v3; v2 still reads."""
    state = load_state("gb200-early-names")
    state.pop("note")
    read = read_nvml_state(RecordedNvml(state))
    assert len(read["gpus"][0]["gi_profiles"]) == 7 and all(
        "capabilities" not in p for p in read["gpus"][0]["gi_profiles"]
    )


def test_a_v3_refusal_as_invalid_argument_falls_back_to_v2(load_state) -> None:
    """A driver answering INVALID_ARGUMENT to the v3 struct is asked with v2, not taken as unknown."""

    class OldDriver(RecordedNvml):
        def nvmlDeviceGetGpuInstanceProfileInfo(
            self, handle: Any, profile: int, version: int = 2
        ) -> Any:
            if version == 3:
                raise nvml_error("INVALID_ARGUMENT")
            return super().nvmlDeviceGetGpuInstanceProfileInfo(handle, profile, version)

    gpu = read_nvml_state(OldDriver(load_state("rtx-pro-6000-gfx")))["gpus"][0]
    assert len(gpu["gi_profiles"]) == 11 and "invalid_profile_constants" not in gpu


def test_constant_0x11_is_mapped_not_refused(load_state, catalog: Catalog) -> None:
    """Profile constant 0x11 (3_SLICE_GFX) builds a +gfx profile of a GPU the catalog lacks."""
    gpu = _detect_gpu(load_state, catalog, "thor-constant-0x11")
    profile = gpu.catalog_gpu.profile("3g.0gb+gfx")
    assert (profile.nvml_constant, profile.attributes, profile.compute_slices) == (
        "3_SLICE_GFX",
        ("gfx",),
        3,
    )


def test_every_constant_up_to_0x11_is_asked(load_state) -> None:
    """read_nvml_state asks every constant 0x00-0x11, so 0x11 reaches the recording."""
    asked: list[int] = []

    class Counting(RecordedNvml):
        def nvmlDeviceGetGpuInstanceProfileInfo(
            self, handle: Any, profile: int, version: int = 2
        ) -> Any:
            asked.append(profile)
            return super().nvmlDeviceGetGpuInstanceProfileInfo(handle, profile, version)

    read_nvml_state(Counting(load_state("thor-constant-0x11")))
    assert set(range(0x12)) <= set(asked)


def test_an_unknown_constant_is_recorded_not_fatal(load_state, catalog: Catalog) -> None:
    """A constant beyond 0x11 (a newer NVML) is kept as `unknown 0x13` with a note, not an error."""
    state = load_state("thor-constant-0x11")
    state["gpus"][0]["gi_profiles"][0]["constant"] = 0x13
    gpu = detection_from_state(state, catalog).gpus[0]
    assert gpu.catalog_gpu.profile("1g.0gb").nvml_constant == "unknown 0x13"
    assert any("constant 0x13, unknown" in n for n in gpu.disagreements)


def test_an_unparsable_live_name_is_kept(load_state, catalog: Catalog) -> None:
    """A live profile name that is not <N>g.<GB>gb... is kept as printed, attributes from its constant."""
    state = load_state("thor-constant-0x11")
    state["gpus"][0]["gi_profiles"][2]["name"] = "MIG 3g+gfx.universal"
    gpu = detection_from_state(state, catalog).gpus[0]
    assert gpu.catalog_gpu.profile("3g+gfx.universal").attributes == ("gfx",)
    assert any("is not <N>g.<GB>gb" in n for n in gpu.disagreements)


def test_gb200_early_names_match_the_table_by_id(load_state, catalog: Catalog) -> None:
    """The early board's 1g.24gb / 3g.95gb are the table's 1g.23gb / 3g.93gb: no name disagreement."""
    gpu = _detect_gpu(load_state, catalog, "gb200-early-names")
    assert gpu.catalog_gpu.name == "GB200-186GB" and str(gpu.layout()) == "3g.95gb+2x1g.24gb"
    assert not [n for n in gpu.disagreements if "name is" in n]
    assert gpu.catalog_gpu.profile("1g.23gb").name == "1g.24gb"


def test_a_layout_in_production_names_runs_on_an_early_board(load_state, catalog: Catalog) -> None:
    """A layout written 3g.93gb+2x1g.23gb matches the early board's 3g.95gb + 2x 1g.24gb devices."""
    gpu = _detect_gpu(load_state, catalog, "gb200-early-names")
    devices = match_layout(parse_layout(catalog.get("GB200"), "3g.93gb+2x1g.23gb"), gpu)
    assert [d.profile.name for d in devices] == ["3g.95gb", "1g.24gb", "1g.24gb"]


# --- vGPU -----------------------------------------------------------------------------------
def test_dc_vgpu_types_are_resolved_by_pci_id(load_state, catalog: Catalog) -> None:
    """DC-1-24C is an RTX PRO 6000 SE instance on 0x2BB5 and DC-1-16C an RTX PRO 4500 one on 0x2C3A."""
    rtx6000 = _vgpu_guest(load_state, catalog, "NVIDIA DC-1-24C", "0x2BB510DE")
    rtx4500 = _vgpu_guest(load_state, catalog, "NVIDIA DC-1-16C", "0x2C3A10DE")
    assert (rtx6000.vgpu.parent_gpu.name, rtx6000.vgpu.profile.name) == (
        "RTX-PRO-6000-Blackwell-Server-96GB",
        "1g.24gb",
    )
    assert (rtx4500.vgpu.parent_gpu.name, rtx4500.vgpu.profile.name) == (
        "RTX-PRO-4500-Blackwell-32GB",
        "1g.16gb",
    )


def test_a_shared_board_prefix_without_a_gpu_is_refused(catalog: Catalog) -> None:
    """DC-1-24C alone cannot say which board it is on; the error names both and asks for the GPU."""
    with pytest.raises(
        NameParseError, match=r"DC.*shared by.*RTX-PRO-4500.*RTX-PRO-6000.*pass the GPU"
    ):
        parse_vgpu_type("DC-1-24C", catalog=catalog)


def test_gfx_vgpu_types_map_to_gfx_profiles(catalog: Catalog) -> None:
    """DC-1-24CGFX is the 1g.24gb+gfx profile (vgpu-device-manager's attribute spelling)."""
    assert parse_vgpu_type("DC-1-24CGFX", RTX_SE, catalog=catalog)[1].name == "1g.24gb+gfx"


def test_mig_backed_time_sliced_vgpu_needs_shared(load_state, catalog: Catalog) -> None:
    """DC-1-2Q is 2 GB of a 1g.24gb instance several VMs share: time-sliced, offered as a whole GPU."""
    gpu = _vgpu_guest(load_state, catalog, "NVIDIA DC-1-2Q", "0x2BB510DE")
    assert gpu.vgpu.time_sliced and not gpu.mig_vgpu and gpu.vgpu.shared_instance.name == "1g.24gb"
    assert usable_devices(gpu)[0].kind == "gpu"


def test_time_sliced_share_by_name_says_so(catalog: Catalog) -> None:
    """Asked as a layout entry, DC-1-2Q is refused as a time-sliced share that runs only with --shared."""
    with pytest.raises(
        NameParseError, match=r"time-sliced share of one 1g.24gb instance.*--shared"
    ):
        parse_vgpu_type("DC-1-2Q", RTX_SE, catalog=catalog)


# --- doctor ---------------------------------------------------------------------------------
def test_doctor_says_what_a_workstation_board_needs_before_mig(load_state) -> None:
    """doctor tells an RTX PRO 6000 Workstation with MIG off to switch to compute mode and check the vBIOS."""
    from mlperf_mig.doctor import diagnose

    state = load_state("rtx-pro-6000-gfx")
    gpu = state["gpus"][0]
    gpu.update(
        name="NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
        pci_device_id="0x2BB110DE",
        mig_mode=[0, 0],
    )
    for key in ("mig_devices", "gpu_instances", "max_mig_device_count"):
        gpu.pop(key)
    report = diagnose(RecordedNvml(state), smoke=False, versions={"onnxruntime": "1.32.0"})
    assert (
        "DisplayModeSelector --gpumode=compute" in report.text()
        and "98.02.55.00.00" in report.text()
    )


def test_gpus_json_carries_field_sources(capsys: pytest.CaptureFixture[str]) -> None:
    """`gpus --json` gives each new GPU's provenance, sources and per-field sources."""
    from mlperf_mig.cli import main

    assert main(["gpus", "--json"]) == 0
    gpus = {g["name"]: g for g in json.loads(capsys.readouterr().out)}
    rtx = gpus["RTX-PRO-6000-Blackwell-Server-96GB"]
    assert rtx["provenance"] == "documented" and rtx["field_sources"]["pci_device_ids"] == "ogkm"
    assert rtx["profiles"][0]["field_sources"]["placement_starts"].startswith("inferred:")


# --- CLI and advisor ------------------------------------------------------------------------
def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    from mlperf_mig.cli import main

    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_check_refuses_me_all_beside_a_plain_1g(capsys: pytest.CaptureFixture[str]) -> None:
    """`check` with +me.all beside 1g.24gb exits 2 with one line naming the rule and the fix."""
    code, out, err = _cli(capsys, "check", RTX_SE, "1g.24gb+me.all+1g.24gb")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "allows only -me instances" in err and "use 1g.24gb-me" in err


def test_cli_check_accepts_me_all_beside_no_me(capsys: pytest.CaptureFixture[str]) -> None:
    """`check` with +me.all beside three 1g.24gb-me prints the placements and exits 0."""
    code, out, _ = _cli(capsys, "check", RTX_SE, "1g.24gb+me.all+3x1g.24gb-me")
    assert code == 0 and out.startswith("valid: 1g.24gb+me.all+3x1g.24gb-me")


@pytest.mark.parametrize("gpu", [RTX_SE, "GB200", "B300"])
def test_cli_layouts_lists_every_valid_layout(
    capsys: pytest.CaptureFixture[str], catalog: Catalog, gpu: str
) -> None:
    """`layouts` for the RTX PRO 6000 SE, GB200 and B300 lists the registry's valid layouts."""
    code, out, _ = _cli(capsys, "layouts", gpu, "--json")
    assert code == 0
    assert [entry["layout"] for entry in json.loads(out)] == [
        str(x) for x in valid_layouts(catalog.get(gpu))
    ]


def test_cli_gpus_lists_the_new_gpus_with_provenance(capsys: pytest.CaptureFixture[str]) -> None:
    """`gpus` shows the new GPUs with a provenance column."""
    code, out, _ = _cli(capsys, "gpus")
    rows = {line.split()[0]: line for line in out.splitlines()[2:] if line.strip()}
    assert (
        code == 0
        and "nvidia-code" in rows["B300-288GB"]
        and "documented" in rows["RTX-PRO-6000-Blackwell-Server-96GB"]
    )


def test_the_advisor_ranks_every_rtx_pro_6000_layout() -> None:
    """The advisor considers all valid RTX PRO 6000 layouts, +gfx, +me.all and -me ones included."""
    from mlperf_mig.study.advisor import Measurements, ProfileMeasure, advise_from

    alone = {"4g.96gb": 400.0, "2g.48gb": 220.0, "1g.24gb": 120.0}
    measurements = Measurements(
        gpu="RTX-PRO-6000-Blackwell-Server-96GB",
        benchmark="resnet50",
        loadgen_scenario="Offline",
        unit="samples/s",
        emulated=False,
        profiles={
            n: ProfileMeasure(profile=n, alone=(r * 0.99, r, r * 1.01), p99_alone=(10.0,))
            for n, r in alone.items()
        },
    )
    advice = advise_from(measurements)
    assert advice.considered == advice.predicted == len(valid_layouts(load_catalog().get(RTX_SE)))
    assert any("+me.all" in p.layout for p in advice.ranking) and any(
        "+gfx" in p.layout for p in advice.ranking
    )


def test_a_table_name_another_live_profile_prints_is_not_kept_as_alias(
    load_state, catalog: Catalog
) -> None:
    """If a driver prints ID 15 as `1g.23gb` (ID 19's table name), names stay unique: the printed one wins."""
    state = load_state("gb200-early-names")
    entry = next(p for p in state["gpus"][0]["gi_profiles"] if p["id"] == 15)
    entry["name"] = "MIG 1g.23gb"
    gpu = detect(RecordedNvml(state), catalog=catalog).gpus[0]
    assert gpu.catalog_gpu.profile("1g.23gb").profile_id == 15
    assert gpu.catalog_gpu.profile_by_id(19).aliases == ()
