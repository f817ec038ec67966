"""Exact placement of a layout's GPU instances on memory-slice windows, and layout enumeration.

A GPU instance occupies the memory slices [start, start + size) of one of its profile's
placements; instances may not overlap, counts stay within each profile's maximum and compute
slices within the GPU's. The search is exhaustive (layouts have at most a handful of instances),
so "no placement" is a proof, not a heuristic's failure.

Media engines (inferred rule): they are not shared between instances, so over a layout's
instances the JPEG decoders, OFAs and video decoders add up to at most the whole GPU's count,
taken as its largest profile's (an engine whose count the data lacks is not checked). On the A30,
which has one JPEG decoder and one OFA, this allows one `+me` instance. The MIG guide does not
state the rule as such; it is inferred from its engine counts, and no layout NVIDIA documents as
valid (the study's eight, the mig-parted default configs) breaks it (tests/registry/test_solver.py).

All media engines (inferred rule): a `+me.all` instance allows only `-me` instances beside it.
Source: NVML's header (NVIDIA/go-nvml `pkg/nvml/nvml.h`), on NVML_GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME
and _2_SLICE_ALL_ME: "_ALL_ME prevents allocation of all but _NO_ME profiles". The guide's tables
(RTX PRO 6000: `+me.all` owns 4/4/4/1 of the board's 4/4/4/1 DEC/ENC/JPG/OFA) agree; no printout
of a refused creation was seen, hence inferred. The media-engine sum rule covers the rest.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import attrs

from mlperf_mig.errors import LayoutError
from mlperf_mig.registry.model import Gpu, Layout, Placement, Profile


@attrs.frozen
class _Search:
    """Result of one search: the placements if all fit, else the deepest partial assignment."""

    placements: tuple[Placement, ...] | None
    deepest: tuple[Placement, ...]
    stuck: Profile | None


def solve_placements(layout: Layout) -> tuple[Placement, ...]:
    """Return explicit non-overlapping placements for `layout`, largest instance first.

    Raises LayoutError saying why no placement exists.
    """
    _check_counts(layout)
    _check_compute(layout)
    _check_all_media_engines(layout)
    _check_media_engines(layout)
    result = _search(layout.profiles)
    if result.placements is None:
        raise LayoutError(_no_window_message(layout, result))
    return result.placements


def _check_counts(layout: Layout) -> None:
    for profile, count in layout.counts():
        if count > profile.max_instances:
            raise LayoutError(
                f"layout {layout} asks for {count}x {profile.name} but {layout.gpu.name} allows "
                f"at most {profile.max_instances}; use {profile.max_instances} or fewer"
            )


def _check_compute(layout: Layout) -> None:
    if layout.compute_slices > layout.gpu.compute_slices:
        raise LayoutError(
            f"layout {layout} needs {layout.compute_slices} compute slices but "
            f"{layout.gpu.name} has {layout.gpu.compute_slices}; drop or shrink an instance"
        )


ALL_ME_SOURCE = 'nvml.h: "_ALL_ME prevents allocation of all but _NO_ME profiles"'


def all_media_engines_conflict(layout: Layout) -> tuple[Profile, Profile] | None:
    """(the `+me.all` profile, a neighbour that is not `-me`) when the layout puts an instance
    with media engines beside a `+me.all` one; None otherwise (inferred rule, module docstring)."""
    owners = [p for p in layout.profiles if p.all_media_engines]
    if not owners:
        return None
    others = list(layout.profiles)
    others.remove(owners[0])
    neighbour = next((p for p in others if not p.no_media_engines), None)
    return (owners[0], neighbour) if neighbour is not None else None


def _check_all_media_engines(layout: Layout) -> None:
    conflict = all_media_engines_conflict(layout)
    if conflict is not None:
        owner, neighbour = conflict
        fix = layout.gpu.profile_by_shape(
            (neighbour.compute_slices, neighbour.memory_slices, ("no-me",))
        )
        instead = f"use {fix.name} instead of {neighbour.name}" if fix else f"drop {neighbour.name}"
        raise LayoutError(
            f"layout {layout} does not fit {layout.gpu.name}: {owner.name} takes all media "
            f"engines and allows only -me instances beside it, but {neighbour.name} is not one "
            f"(an inferred rule; {ALL_ME_SOURCE}); {instead}"
        )


MEDIA_ENGINES = (
    ("jpeg_decoders", "JPEG decoders"),
    ("ofa", "OFAs"),
    ("decoders", "video decoders"),
)


def _whole_gpu_profile(gpu: Gpu) -> Profile:
    return max(gpu.profiles, key=lambda p: (p.compute_slices, p.memory_slices, p.plain))


def media_engine_excess(layout: Layout) -> tuple[str, int, int] | None:
    """The first media engine the layout's instances need more of than the GPU has:
    (engine words, needed, available); None when they fit (inferred rule, module docstring)."""
    whole = _whole_gpu_profile(layout.gpu)
    for field, words in MEDIA_ENGINES:
        available = getattr(whole, field)
        counts = [getattr(p, field) for p in layout.profiles]
        if available is None or any(c is None for c in counts):
            continue
        if sum(counts) > available:
            return words, sum(counts), available
    return None


def _check_media_engines(layout: Layout) -> None:
    excess = media_engine_excess(layout)
    if excess is not None:
        words, needed, available = excess
        raise LayoutError(
            f"layout {layout} needs {needed} {words} but {layout.gpu.name} has {available} "
            "(media engines are not shared between instances; an inferred rule): use fewer "
            "instances with media engines, such as one +me profile"
        )


def _no_window_message(layout: Layout, result: _Search) -> str:
    assert result.stuck is not None
    stuck = result.stuck
    windows = ", ".join(str(s) for s in stuck.placement_starts)
    after = " + ".join(str(p) for p in result.deepest) or "nothing"
    return (
        f"layout {layout} does not fit {layout.gpu.name}: no memory window left for "
        f"{stuck.name} (starts {windows}, size {stuck.placement_size}) after {after}; "
        "drop or shrink an instance (`mlperf-mig layouts GPU --maximal` lists what fits)"
    )


def _search(profiles: Sequence[Profile]) -> _Search:
    """Depth-first search over placement starts; equal profiles take increasing starts."""
    chosen: list[Placement] = []
    deepest: tuple[Placement, ...] = ()
    stuck: Profile | None = None

    def place(index: int, occupied: int) -> bool:
        nonlocal deepest, stuck
        if index == len(profiles):
            return True
        profile = profiles[index]
        lowest = -1
        if index and profiles[index - 1] == profile:
            lowest = chosen[-1].start
        for start in profile.placement_starts:
            window = ((1 << profile.placement_size) - 1) << start
            if start <= lowest or occupied & window:
                continue
            chosen.append(Placement(profile=profile, start=start))
            if place(index + 1, occupied | window):
                return True
            chosen.pop()
        if stuck is None or len(chosen) > len(deepest):
            deepest, stuck = tuple(chosen), profile
        return False

    if place(0, 0):
        return _Search(tuple(chosen), tuple(chosen), None)
    assert stuck is not None  # a failed search stopped at some profile
    return _Search(None, deepest, stuck)


def valid_layouts(gpu: Gpu) -> tuple[Layout, ...]:
    """Every non-empty multiset of `gpu`'s profiles that can be placed, most compute first."""
    layouts = [
        layout
        for layout in _candidate_layouts(gpu)
        if all_media_engines_conflict(layout) is None
        and media_engine_excess(layout) is None
        and _search(layout.profiles).placements
    ]
    return tuple(sorted(layouts, key=_listing_key))


def maximal_layouts(gpu: Gpu) -> tuple[Layout, ...]:
    """The valid layouts to which no further instance of any profile can be added."""
    layouts = valid_layouts(gpu)
    valid = {_count_key(layout.profiles) for layout in layouts}
    return tuple(
        layout
        for layout in layouts
        if not any(_count_key((*layout.profiles, p)) in valid for p in gpu.profiles)
    )


def _count_key(profiles: Sequence[Profile]) -> frozenset[tuple[str, int]]:
    return frozenset(Counter(p.name for p in profiles).items())


def _listing_key(
    layout: Layout,
) -> tuple[int, int, tuple[tuple[int, int, tuple[str, ...], str], ...]]:
    return (
        -layout.compute_slices,
        -layout.memory_slices,
        tuple(p.size_key for p in layout.profiles),
    )


def _candidate_layouts(gpu: Gpu) -> list[Layout]:
    """Multisets within the max counts and the GPU's compute and memory slice totals."""
    profiles = gpu.profiles
    found: list[Layout] = []

    def extend(index: int, picked: list[Profile], compute: int, memory: int) -> None:
        if index == len(profiles):
            if picked:
                found.append(Layout(gpu=gpu, profiles=tuple(picked)))
            return
        profile = profiles[index]
        for count in range(profile.max_instances + 1):
            c = compute + count * profile.compute_slices
            m = memory + count * profile.memory_slices
            if c > gpu.compute_slices or m > gpu.memory_slices:
                break
            extend(index + 1, picked + [profile] * count, c, m)

    extend(0, [], 0, 0)
    return found
