"""MIG setups: mig-parted config text and ordered nvidia-smi steps (printing only)."""

from __future__ import annotations

import re

import pytest

from mlperf_mig.errors import LayoutError
from mlperf_mig.registry import (
    Catalog,
    Gpu,
    mig_setup,
    parse_layout,
    solve_placements,
    study_layout,
)


def test_mig_parted_config_has_the_v1_shape(h200: Gpu) -> None:
    """The config has version v1, one named config, a PCI device filter and the profile counts."""
    text = mig_setup(study_layout(7, h200)).mig_parted_config()
    assert text.splitlines()[:2] == ["version: v1", "mig-configs:"]
    assert '- device-filter: ["0x233510DE"]' in text
    assert "mig-enabled: true" in text
    counts = dict(re.findall(r'^\s+"([^"]+)": (\d+)$', text, re.MULTILINE))
    assert counts == {"2g.35gb": "3", "1g.18gb": "1"}


def test_mig_parted_config_name_writes_plus_as_dot(a100_80: Gpu) -> None:
    """Config names follow mig-parted's habit of writing `+me` as `.me`."""
    setup = mig_setup(parse_layout(a100_80, "1g.10gb+me+2g.20gb"))
    assert setup.config_name == "mlperf-mig-1x2g.20gb-1x1g.10gb.me"


def test_steps_pin_every_instance_largest_first(a100_80: Gpu) -> None:
    """Steps enable MIG, then create one GPU instance per placement, largest profile first."""
    layout = parse_layout(a100_80, "3g.40gb+2g.20gb+2x1g.10gb")
    steps = mig_setup(layout, gpu_index=2).steps()
    assert steps[0] == "nvidia-smi -i 2 -mig 1"
    created = [re.search(r"-cgi (\d+):(\d+) -C", s).groups() for s in steps[1:]]
    assert [int(pid) for pid, _ in created] == [9, 14, 19, 19]
    assert ("9", "4") in created


@pytest.mark.parametrize("scenario", range(1, 9))
def test_steps_in_order_never_overlap(catalog: Catalog, scenario: int) -> None:
    """Creating the steps' placements one by one never hits an occupied memory slice."""
    setup = mig_setup(study_layout(scenario, "H100-80GB", catalog))
    occupied: set[int] = set()
    for placement in setup.placements:
        slots = set(range(placement.start, placement.end))
        assert not slots & occupied
        occupied |= slots
    assert len(setup.steps()) == len(setup.placements) + 1


def test_setup_of_an_invalid_layout_is_refused(a100_80: Gpu) -> None:
    """No setup is printed for a layout that does not fit."""
    with pytest.raises(LayoutError):
        mig_setup(parse_layout(a100_80, "2x4g.40gb"))


def test_setup_placements_agree_with_the_solver(a100_80: Gpu) -> None:
    """The setup's placements are the solver's, reordered largest first."""
    layout = parse_layout(a100_80, "3g.40gb+4x1g.10gb")
    setup = mig_setup(layout)
    assert sorted(setup.placements, key=lambda p: p.start) == sorted(
        solve_placements(layout), key=lambda p: p.start
    )
