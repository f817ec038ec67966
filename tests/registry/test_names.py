"""Names: layout strings, vGPU type names and NVIDIA-style system IDs."""

from __future__ import annotations

import pytest

from mlperf_mig.errors import LayoutError, NameParseError, UnknownGpuError, UnknownProfileError
from mlperf_mig.registry import (
    Catalog,
    Gpu,
    parse_layout,
    parse_system_id,
    parse_vgpu_type,
    study_layout,
    system_id,
    vgpu_type_name,
)


@pytest.mark.parametrize(
    "spec",
    [
        "3x2g.20gb+1g.10gb",
        "2g.20gb,2g.20gb,2g.20gb,1g.10gb",
        "1g.10gb + 3 x 2g.20gb",
        "3X2G.20GB+1G.10GB",
    ],
)
def test_layout_strings_accept_separators_and_counts(a100_80: Gpu, spec: str) -> None:
    """`+` or `,` separators, counts and any case give the same layout."""
    assert str(parse_layout(a100_80, spec)) == "3x2g.20gb+1g.10gb"


def test_layout_from_a_list_of_names(a100_80: Gpu) -> None:
    """A list of profile names is a layout too."""
    assert (
        str(parse_layout(a100_80, ["1g.10gb", "4g.40gb", "2g.20gb"])) == "4g.40gb+2g.20gb+1g.10gb"
    )


def test_plus_me_survives_the_plus_separator(a100_80: Gpu) -> None:
    """`1g.10gb+me` inside a `+`-separated layout stays one profile."""
    layout = parse_layout(a100_80, "1g.10gb+me+2g.20gb+1g.10gb")
    assert [p.name for p in layout.profiles] == ["2g.20gb", "1g.10gb", "1g.10gb+me"]


def test_layout_profiles_are_largest_first(h200: Gpu) -> None:
    """Layout.profiles is ordered largest first whatever the input order."""
    layout = parse_layout(h200, "1g.18gb+4g.71gb+2g.35gb")
    assert [p.compute_slices for p in layout.profiles] == [4, 2, 1]


def test_short_names_resolve_when_unambiguous(a100_80: Gpu) -> None:
    """`4g` means 4g.40gb on an 80 GB A100; `1g` is ambiguous and rejected."""
    assert parse_layout(a100_80, "4g").profiles[0].name == "4g.40gb"
    with pytest.raises(UnknownProfileError, match="ambiguous"):
        parse_layout(a100_80, "1g")


@pytest.mark.parametrize(
    "spec", ["2g.20gb++1g.10gb", "+2g.20gb", "", "0x2g.20gb", "2g.20gb 1g.10gb"]
)
def test_malformed_layout_strings_are_rejected(a100_80: Gpu, spec: str) -> None:
    """Empty entries, zero counts and missing separators raise an error with an example."""
    with pytest.raises((LayoutError, UnknownProfileError)):
        parse_layout(a100_80, spec)


def test_malformed_layout_error_shows_an_example(a100_80: Gpu) -> None:
    """The malformed-layout message shows how to write one."""
    with pytest.raises(LayoutError, match=r"empty entry at position 2.*3x2g.20gb\+1g.10gb"):
        parse_layout(a100_80, "2g.20gb++1g.10gb")


def test_another_gpus_profile_lists_this_gpus_profiles(h200: Gpu) -> None:
    """An A100 profile name on an H200 names the H200's profiles of that compute size."""
    with pytest.raises(
        UnknownProfileError,
        match=r"'1g.10gb' does not exist on H200.*1g.18gb, 1g.18gb\+me, 1g.35gb",
    ):
        parse_layout(h200, "1g.10gb")


@pytest.mark.parametrize(
    ("name", "gpu", "board", "profile"),
    [
        ("A100D-2-20C", None, "A100-PCIE-80GB", "2g.20gb"),
        ("grid_a100d-2-20c", None, "A100-PCIE-80GB", "2g.20gb"),
        ("A100DX-1-10CME", None, "A100-SXM4-80GB", "1g.10gb+me"),
        ("A100D-1-20C", None, "A100-PCIE-80GB", "1g.20gb"),
        ("nvidia-2-20c", "A100-80GB", "A100-SXM4-80GB", "2g.20gb"),
        ("nvidia-2-35c", "H200", "H200-SXM5-141GB", "2g.35gb"),
        ("A30-2-12CME", None, "A30", "2g.12gb+me"),
        ("H100L-3-47C", None, "H100-NVL-94GB", "3g.47gb"),
    ],
)
def test_vgpu_type_names_parse_to_profiles(
    catalog: Catalog, name: str, gpu: str | None, board: str, profile: str
) -> None:
    """NVIDIA, vSphere and the study's vGPU spellings map to the GPU's MIG profile."""
    found_gpu, found_profile = parse_vgpu_type(name, gpu, catalog=catalog)
    assert (found_gpu.name, found_profile.name) == (board, profile)


@pytest.mark.parametrize(
    ("name", "gpu", "message"),
    [
        ("A100D-80C", None, "not a MIG-backed vGPU type"),
        ("nvidia-2-20c", None, "does not say which GPU"),
        ("Q100-2-20C", None, "board 'Q100'"),
        ("A100D-2-20C", "H200", "belongs to A100-PCIE-80GB, not H200"),
        ("nvidia-2-99c", "A100-80GB", "maps to MIG profile 2g.99gb"),
    ],
)
def test_bad_vgpu_names_say_why(catalog: Catalog, name: str, gpu: str | None, message: str) -> None:
    """A vGPU name that cannot be mapped raises NameParseError saying why."""
    with pytest.raises(NameParseError, match=message):
        parse_vgpu_type(name, gpu, catalog=catalog)


def test_vgpu_names_work_inside_layouts(a100_80: Gpu) -> None:
    """The study's vGPU spelling is accepted as layout entries on a given GPU."""
    assert (
        str(parse_layout(a100_80, "nvidia-4-40c+nvidia-2-20c+nvidia-1-10c"))
        == "4g.40gb+2g.20gb+1g.10gb"
    )


def test_vgpu_type_name_round_trips(catalog: Catalog) -> None:
    """Every profile's vGPU type name parses back to that profile."""
    for gpu in catalog:
        for profile in gpu.profiles:
            assert parse_vgpu_type(vgpu_type_name(gpu, profile), gpu, catalog=catalog)[1] == profile


def test_system_id_has_nvidia_form(a100_80: Gpu) -> None:
    """A mixed layout's system ID matches NVIDIA's naming."""
    layout = parse_layout(a100_80, "4g.40gb+2g.20gb+1g.10gb")
    assert system_id(layout) == "A100-SXM-80GB_MIG_1x4g.40gb+1x2g.20gb+1x1g.10gb"


@pytest.mark.parametrize(
    "gpu", ["A100-80GB", "A100-40GB", "H100-80GB", "H200", "GH200-144GB", "B200"]
)
@pytest.mark.parametrize("scenario", range(1, 9))
def test_system_ids_round_trip(catalog: Catalog, gpu: str, scenario: int) -> None:
    """system_id and parse_system_id give back the same GPU and layout."""
    layout = study_layout(scenario, gpu, catalog)
    assert parse_system_id(system_id(layout), catalog) == layout


def test_system_id_round_trips_with_plus_me(a100_80: Gpu, catalog: Catalog) -> None:
    """A layout with a +me profile survives the system-ID round trip."""
    layout = parse_layout(a100_80, "3g.40gb+1g.10gb+me+2x1g.10gb")
    assert parse_system_id(system_id(layout), catalog) == layout


@pytest.mark.parametrize(
    "text", ["A100-SXM-80GB", "A100-SXM-80GB_MIG_", "_MIG_1x1g.10gb", "A100 SXM_MIG_1x1g.10gb"]
)
def test_malformed_system_ids_are_rejected(catalog: Catalog, text: str) -> None:
    """A string without `<GPU>_MIG_<layout>` raises NameParseError with an example."""
    with pytest.raises(NameParseError, match=r"A100-SXM-80GB_MIG_1x4g.40gb"):
        parse_system_id(text, catalog)


def test_system_id_of_an_unknown_gpu(catalog: Catalog) -> None:
    """A well-formed system ID of an unknown GPU raises UnknownGpuError."""
    with pytest.raises(UnknownGpuError):
        parse_system_id("V100_MIG_1x1g.10gb", catalog)
