"""The seed study's eight MIG layouts and their translation to other GPUs."""

from __future__ import annotations

import pytest

from mlperf_mig.errors import LayoutError, NameParseError
from mlperf_mig.registry import Catalog, Gpu, solve_placements, study_layout, study_scenarios

SEED = {
    1: "7g.80gb",
    2: "4g.40gb",
    3: "3g.40gb",
    4: "2g.20gb",
    5: "1g.10gb",
    6: "4g.40gb+2g.20gb+1g.10gb",
    7: "3x2g.20gb+1g.10gb",
    8: "7x1g.10gb",
}


@pytest.mark.parametrize(("scenario", "expected"), SEED.items())
def test_study_layouts_validate_on_a100_80gb(a100_80: Gpu, scenario: int, expected: str) -> None:
    """Each of the eight layouts is the seed's layout on an 80 GB A100 and has placements."""
    layout = study_layout(scenario, a100_80)
    assert str(layout) == expected
    assert len(solve_placements(layout)) == len(layout.profiles)


def test_study_data_carries_the_seed_vgpu_spelling(catalog: Catalog) -> None:
    """Scenario 7 is recorded with the seed's nvidia-2-20c / nvidia-1-10c names."""
    scenario = study_scenarios(catalog)[6]
    assert scenario.vgpu_types == ("nvidia-2-20c",) * 3 + ("nvidia-1-10c",)


def test_h200_scenario_7_uses_h200_names(h200: Gpu) -> None:
    """On an H200, scenario 7 is 3x 2g.35gb + 1g.18gb."""
    assert str(study_layout(7, h200)) == "3x2g.35gb+1g.18gb"


@pytest.mark.parametrize(
    "gpu", ["A100-40GB", "H100-80GB", "H100-NVL", "GH200-96GB", "GH200-144GB", "H200-NVL", "B200"]
)
def test_translation_keeps_slice_shapes(catalog: Catalog, a100_80: Gpu, gpu: str) -> None:
    """On every 7-slice GPU each scenario keeps its (compute, memory) slice shapes."""
    for scenario in SEED:
        translated = study_layout(scenario, gpu, catalog)
        assert [p.shape for p in translated.profiles] == [
            p.shape for p in study_layout(scenario, a100_80).profiles
        ]


@pytest.mark.parametrize("scenario", [1, 6, 7, 8])
def test_a30_refuses_seven_slice_layouts(a30: Gpu, scenario: int) -> None:
    """The A30 has 4 compute slices: 7-slice layouts raise an error that says so."""
    with pytest.raises(LayoutError, match="uses 7 compute slices but A30 has 4"):
        study_layout(scenario, a30)


def test_a30_says_when_no_profile_has_the_shape(a30: Gpu) -> None:
    """Scenario 3 (a 3g) has no same-shaped profile on the A30 and says so."""
    with pytest.raises(LayoutError, match=r"no profile shaped like 3g.40gb"):
        study_layout(3, a30)


def test_a30_carries_the_small_scenarios(a30: Gpu) -> None:
    """Scenarios 2, 4 and 5 translate to A30 profiles of the same slice counts."""
    assert [str(study_layout(s, a30)) for s in (2, 4, 5)] == ["4g.24gb", "2g.12gb", "1g.6gb"]


@pytest.mark.parametrize("scenario", [0, 9, -1])
def test_scenarios_outside_1_to_8_are_rejected(a100_80: Gpu, scenario: int) -> None:
    """Study scenario numbers outside 1-8 raise NameParseError naming the range."""
    with pytest.raises(NameParseError, match="numbered 1-8"):
        study_layout(scenario, a100_80)
