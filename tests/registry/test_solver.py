"""The placement solver and layout enumeration, checked against the reference and a brute force."""

from __future__ import annotations

from collections import Counter

import pytest

from mlperf_mig.errors import LayoutError
from mlperf_mig.registry import (
    Catalog,
    Gpu,
    Layout,
    maximal_layouts,
    parse_layout,
    solve_placements,
    valid_layouts,
)

CASES = [
    ("A100-80GB", "4g.40gb+3g.40gb", True),
    ("A100-80GB", "4g.40gb+4g.40gb", False),
    ("A100-80GB", "3g.40gb+3g.40gb+1g.10gb", False),
    ("A100-80GB", "3g.40gb+4x1g.10gb", True),
    ("A100-80GB", "4g.40gb+2g.20gb+1g.10gb", True),
    ("A100-80GB", "3x2g.20gb+1g.10gb", True),
    ("A100-80GB", "7x1g.10gb", True),
    ("A100-80GB", "8x1g.10gb", False),
    ("A100-80GB", "2x3g.40gb", True),
    ("A100-80GB", "4g.40gb+3g.40gb+1g.10gb", False),
    ("A100-80GB", "3g.40gb+2g.20gb+2x1g.10gb", True),
    ("A100-80GB", "4x1g.20gb", True),
    ("A100-80GB", "5x1g.20gb", False),
    ("A100-80GB", "2x1g.10gb+me", False),
    ("A100-80GB", "7g.80gb+1g.10gb", False),
    ("A100-40GB", "4g.20gb+3g.20gb", True),
    ("A100-40GB", "3g.20gb+4x1g.5gb", True),
    ("A100-40GB", "4x1g.10gb", True),
    ("A100-40GB", "3x2g.10gb+1g.10gb", True),
    ("A100-40GB", "2x3g.20gb+1g.5gb", False),
    ("A30", "4g.24gb", True),
    ("A30", "2x2g.12gb", True),
    ("A30", "2g.12gb+2x1g.6gb", True),
    ("A30", "4x1g.6gb", True),
    ("A30", "4g.24gb+1g.6gb", False),
    ("A30", "3x2g.12gb", False),
    ("H100-80GB", "4g.40gb+3g.40gb", True),
    ("H100-80GB", "3g.40gb+2g.20gb+1g.20gb", True),
    ("H100-80GB", "4g.40gb+2x2g.20gb", False),
    ("H200", "3x2g.35gb+1g.18gb", True),
    ("H200", "7x1g.18gb", True),
    ("H200", "2x4g.71gb", False),
    ("H200", "1g.35gb+6x1g.18gb", True),
]


def _overlap_free(placements) -> bool:
    taken = [slot for p in placements for slot in range(p.start, p.end)]
    return len(taken) == len(set(taken))


@pytest.mark.parametrize(("gpu", "spec", "valid"), CASES)
def test_layout_validity(catalog: Catalog, gpu: str, spec: str, valid: bool) -> None:
    """Each layout is valid or invalid exactly as the MIG placement rules say."""
    layout = parse_layout(catalog.get(gpu), spec, catalog)
    if valid:
        placements = solve_placements(layout)
        assert sorted(p.profile.name for p in placements) == sorted(p.name for p in layout.profiles)
        assert _overlap_free(placements)
    else:
        with pytest.raises(LayoutError):
            solve_placements(layout)


def test_three_g_with_four_one_g_needs_the_three_g_at_slot_4(a100_80: Gpu) -> None:
    """3g + 4x 1g fits only with the 3g at memory slice 4."""
    placements = solve_placements(parse_layout(a100_80, "3g.40gb+4x1g.10gb"))
    assert [p.start for p in placements if p.profile.name == "3g.40gb"] == [4]


def test_four_g_plus_three_g_takes_both_halves(a100_80: Gpu) -> None:
    """4g + 3g places the 4g at 0 and the 3g at 4."""
    placements = solve_placements(parse_layout(a100_80, "3g+4g"))
    assert {(p.profile.name, p.start) for p in placements} == {("4g.40gb", 0), ("3g.40gb", 4)}


def test_too_many_instances_names_the_maximum(a100_80: Gpu) -> None:
    """A count above a profile's maximum names the count and the maximum."""
    with pytest.raises(LayoutError, match=r"2x 4g.40gb .* at most 1"):
        solve_placements(parse_layout(a100_80, "2x4g.40gb"))


def test_too_many_compute_slices_names_both_counts(a100_80: Gpu) -> None:
    """A layout over the GPU's compute slices says how many it needs and has."""
    with pytest.raises(LayoutError, match="needs 8 compute slices but A100-SXM4-80GB has 7"):
        solve_placements(parse_layout(a100_80, "4g.40gb+2g.20gb+2x1g.10gb"))


def test_no_window_names_the_blocking_instances(a100_80: Gpu) -> None:
    """3g + 3g + 1g fails with no window left for the 1g after both 3g placements."""
    with pytest.raises(
        LayoutError, match=r"no memory window left for 1g.10gb .* after 3g.40gb@0 \+ 3g.40gb@4"
    ):
        solve_placements(parse_layout(a100_80, "2x3g.40gb+1g.10gb"))


def _engines_fit(gpu: Gpu, counts: Counter) -> bool:
    """The media-engine rule, written independently: the instances' JPEG decoders, OFAs and
    video decoders sum to at most those of the profile spanning the whole GPU."""
    whole = next(
        p
        for p in gpu.profiles
        if p.compute_slices == gpu.compute_slices and p.memory_slices == gpu.memory_slices
    )
    by_name = {p.name: p for p in gpu.profiles}
    for field in ("jpeg_decoders", "ofa", "decoders"):
        values = [getattr(by_name[name], field) for name in counts]
        if getattr(whole, field) is None or None in values:
            continue
        if sum(getattr(by_name[name], field) * n for name, n in counts.items()) > getattr(
            whole, field
        ):
            return False
    return True


def _brute_force_valid(gpu: Gpu) -> set[frozenset[tuple[str, int]]]:
    """Every multiset reachable by adding placements one at a time without overlap (independent
    of the solver: it walks placements, not multisets), whose media engines fit the GPU's."""
    options = [(p, s) for p in gpu.profiles for s in p.placement_starts]
    found: set[frozenset[tuple[str, int]]] = set()

    def walk(first: int, occupied: frozenset[int], counts: Counter, compute: int) -> None:
        if counts and _engines_fit(gpu, counts):
            found.add(frozenset(counts.items()))
        for i in range(first, len(options)):
            profile, start = options[i]
            slots = frozenset(range(start, start + profile.placement_size))
            if slots & occupied or counts[profile.name] >= profile.max_instances:
                continue
            if compute + profile.compute_slices > gpu.compute_slices:
                continue
            counts[profile.name] += 1
            walk(i + 1, occupied | slots, counts, compute + profile.compute_slices)
            counts[profile.name] -= 1
            if not counts[profile.name]:
                del counts[profile.name]

    walk(0, frozenset(), Counter(), 0)
    return found


@pytest.mark.parametrize("gpu", ["A100-80GB", "A100-40GB", "A30", "H200", "B200"])
def test_valid_layouts_match_a_brute_force(catalog: Catalog, gpu: str) -> None:
    """The enumerated valid layouts are exactly the multisets a placement brute force reaches."""
    board = catalog.get(gpu)
    enumerated = {
        frozenset(Counter(p.name for p in layout.profiles).items())
        for layout in valid_layouts(board)
    }
    assert enumerated == _brute_force_valid(board)


REFERENCE_MAXIMAL_80GB = {
    "7g.80gb",
    "4g.40gb+3g.40gb",
    "4g.40gb+2g.20gb+1g.10gb",
    "4g.40gb+2g.20gb+1g.20gb",
    "4g.40gb+3x1g.10gb",
    "4g.40gb+1g.20gb+2x1g.10gb",
    "4g.40gb+2x1g.20gb",
    "2x3g.40gb",
    "3g.40gb+2x2g.20gb",
    "3g.40gb+2g.20gb+2x1g.10gb",
    "3g.40gb+4x1g.10gb",
    "3g.40gb+2g.20gb+1g.20gb",
    "3g.40gb+1g.20gb+2x1g.10gb",
    "3g.40gb+2x1g.20gb",
    "3x2g.20gb+1g.10gb",
    "3x2g.20gb+1g.20gb",
    "2x2g.20gb+3x1g.10gb",
    "2x2g.20gb+1g.20gb+2x1g.10gb",
    "2x2g.20gb+2x1g.20gb",
    "2g.20gb+5x1g.10gb",
    "2g.20gb+1g.20gb+4x1g.10gb",
    "2g.20gb+2x1g.20gb+2x1g.10gb",
    "2g.20gb+3x1g.20gb",
    "7x1g.10gb",
    "1g.20gb+6x1g.10gb",
    "2x1g.20gb+4x1g.10gb",
    "3x1g.20gb+2x1g.10gb",
    "4x1g.20gb",
}


def test_maximal_layouts_match_the_reference_table(a100_80: Gpu) -> None:
    """Without +me profiles, the maximal layouts of an 80 GB A100 are the reference's 28."""
    plain = {
        str(layout)
        for layout in maximal_layouts(a100_80)
        if not any(p.media_extensions for p in layout.profiles)
    }
    assert plain == REFERENCE_MAXIMAL_80GB


def test_maximal_layouts_cannot_grow(a100_80: Gpu) -> None:
    """Adding any profile to a maximal layout makes it invalid."""
    for layout in maximal_layouts(a100_80):
        for profile in a100_80.profiles:
            with pytest.raises(LayoutError):
                solve_placements(Layout(gpu=a100_80, profiles=(*layout.profiles, profile)))


def test_every_valid_layout_has_non_overlapping_placements(h100: Gpu) -> None:
    """The placements the solver returns never share a memory slice."""
    assert all(_overlap_free(solve_placements(layout)) for layout in valid_layouts(h100))


# --- media engines (an inferred rule: the instances' engines add up to at most the GPU's) -------
def test_a30_refuses_two_me_instances(a30: Gpu) -> None:
    """2g.12gb+me with 1g.6gb+me needs two JPEG decoders; the A30 has one."""
    with pytest.raises(LayoutError, match=r"needs 2 JPEG decoders but A30 has 1.*inferred"):
        solve_placements(parse_layout(a30, "2g.12gb+me+1g.6gb+me"))


def test_a30_accepts_one_me_instance(a30: Gpu) -> None:
    """One +me instance with plain ones fits the A30's one JPEG decoder and one OFA."""
    assert len(solve_placements(parse_layout(a30, "2g.12gb+me+2x1g.6gb"))) == 3


def test_a30_maximal_layouts_have_at_most_one_me_instance(a30: Gpu) -> None:
    """`layouts A30 --maximal` lists no layout with two +me instances."""
    maximal = maximal_layouts(a30)
    assert maximal and all(
        sum(p.media_extensions for p in layout.profiles) <= 1 for layout in maximal
    )


def test_a30_valid_layouts_drop_exactly_the_two_me_layouts(a30: Gpu) -> None:
    """Only the two layouts holding both +me profiles leave the A30's valid layouts."""
    assert "2g.12gb+me+1g.6gb+me" not in {str(layout) for layout in valid_layouts(a30)}
    assert "2g.12gb+1g.6gb+1g.6gb+me" in {str(layout) for layout in valid_layouts(a30)}


def test_eight_slice_gpu_counts_ofa_over_instances(h100: Gpu) -> None:
    """On an 8-slice GPU whose +me profile allowed two instances, their two OFAs exceed the one."""
    import attrs

    me = h100.profile("1g.10gb+me")
    two_me = attrs.evolve(
        h100, profiles=[attrs.evolve(p, max_instances=2) if p == me else p for p in h100.profiles]
    )
    with pytest.raises(LayoutError, match=r"needs 2 OFAs but H100-SXM5-80GB has 1"):
        solve_placements(parse_layout(two_me, "2x1g.10gb+me"))


def test_eight_slice_gpu_allows_its_full_decoder_count(h100: Gpu) -> None:
    """7x 1g.10gb uses all seven JPEG and video decoders of the H100 and still fits."""
    assert len(solve_placements(parse_layout(h100, "1g.10gb+me+6x1g.10gb"))) == 7


@pytest.mark.parametrize("scenario", range(1, 9))
def test_study_layouts_stay_valid(scenario: int, a100_80: Gpu) -> None:
    """The study's eight layouts on the A100 80GB pass the solver with the media-engine rule."""
    from mlperf_mig.registry import study_layout

    assert solve_placements(study_layout(scenario, a100_80))


# NVIDIA/mig-parted deployments/systemd/config-default.yaml (commit 1400787): every config that
# applies to a GPU of the catalog, written out as layouts (the per-profile `all-*` configs and the
# per-GPU `all-balanced` entries).
_MIG_PARTED_DEFAULTS = {
    "A100-SXM4-40GB": "7x1g.5gb 1g.5gb+me 4x1g.10gb 3x2g.10gb 2x3g.20gb 4g.20gb 7g.40gb 2x1g.5gb+2g.10gb+3g.20gb",
    "A100-PCIE-40GB": "7x1g.5gb 1g.5gb+me 4x1g.10gb 3x2g.10gb 2x3g.20gb 4g.20gb 7g.40gb 2x1g.5gb+2g.10gb+3g.20gb",
    "A100-SXM4-80GB": "7x1g.10gb 1g.10gb+me 4x1g.20gb 3x2g.20gb 2x3g.40gb 4g.40gb 7g.80gb 2x1g.10gb+2g.20gb+3g.40gb",
    "A100-PCIE-80GB": "7x1g.10gb 1g.10gb+me 4x1g.20gb 3x2g.20gb 2x3g.40gb 4g.40gb 7g.80gb 2x1g.10gb+2g.20gb+3g.40gb",
    "H100-SXM5-80GB": "7x1g.10gb 1g.10gb+me 4x1g.20gb 3x2g.20gb 2x3g.40gb 4g.40gb 7g.80gb 2x1g.10gb+2g.20gb+3g.40gb",
    "H100-PCIE-80GB": "7x1g.10gb 1g.10gb+me 4x1g.20gb 3x2g.20gb 2x3g.40gb 4g.40gb 7g.80gb 2x1g.10gb+2g.20gb+3g.40gb",
    "A30": "4x1g.6gb 1g.6gb+me 2x2g.12gb 2g.12gb+me 4g.24gb 2x1g.6gb+2g.12gb",
    "H100-NVL-94GB": "7x1g.12gb 1g.12gb+me 4x1g.24gb 3x2g.24gb 2x3g.47gb 4g.47gb 7g.94gb 2x1g.12gb+2g.24gb+3g.47gb",
    "GH200-96GB": "7x1g.12gb 1g.12gb+me 3x2g.24gb 2x3g.48gb 4g.48gb 7g.96gb 2x1g.12gb+2g.24gb+3g.48gb",
    "H200-SXM5-141GB": "7x1g.18gb 1g.18gb+me 4x1g.35gb 3x2g.35gb 2x3g.71gb 4g.71gb 7g.141gb 2x1g.18gb+2g.35gb+3g.71gb",
    "H200-NVL-141GB": "7x1g.18gb 1g.18gb+me 4x1g.35gb 3x2g.35gb 2x3g.71gb 4g.71gb 7g.141gb 2x1g.18gb+2g.35gb+3g.71gb",
    "GH200-144GB": "7x1g.18gb 1g.18gb+me 4x1g.36gb 3x2g.36gb 2x3g.72gb 4g.72gb 7g.144gb 2x1g.18gb+2g.36gb+3g.72gb",
    "B200-180GB": "7x1g.23gb 1g.23gb+me 4x1g.45gb 3x2g.45gb 2x3g.90gb 4g.90gb 7g.180gb 2x1g.23gb+2g.45gb+3g.90gb",
}


@pytest.mark.parametrize(
    ("gpu", "layout"),
    [(gpu, layout) for gpu, layouts in _MIG_PARTED_DEFAULTS.items() for layout in layouts.split()],
)
def test_mig_parted_default_configs_stay_valid(catalog: Catalog, gpu: str, layout: str) -> None:
    """Every mig-parted default config for a catalog GPU passes the solver with the media rule."""
    assert solve_placements(parse_layout(catalog.get(gpu), layout))
