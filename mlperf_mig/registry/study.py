"""The seed study's eight MIG layouts ("scenario" 1-8: a MIG layout, not a LoadGen scenario),
kept as data in `systems/study.toml`, and their translation to any GPU by slice shape."""

from __future__ import annotations

import functools
import tomllib
from pathlib import Path

import attrs

from mlperf_mig._paths import data_dir
from mlperf_mig.errors import DataFileError, LayoutError, MlperfMigError, NameParseError
from mlperf_mig.registry.catalog import Catalog, default_catalog
from mlperf_mig.registry.model import Gpu, Layout, Profile
from mlperf_mig.registry.names import parse_layout, resolve_gpu
from mlperf_mig.registry.solver import solve_placements, valid_layouts

STUDY_FILE = "study.toml"


@attrs.frozen(kw_only=True)
class StudyScenario:
    """One layout of the seed study, on the GPU the study ran on."""

    scenario: int
    layout: Layout
    vgpu_types: tuple[str, ...] = attrs.field(converter=tuple[str, ...])


def study_scenarios(catalog: Catalog | None = None) -> tuple[StudyScenario, ...]:
    """The eight layouts of the seed study on its reference GPU (A100 80GB)."""
    return _load_study(data_dir("systems") / STUDY_FILE, catalog or default_catalog())


@functools.cache
def _load_study(path: Path, catalog: Catalog) -> tuple[StudyScenario, ...]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        reference = catalog.get(data["reference_gpu"])
        scenarios = tuple(
            _scenario_from_data(entry, reference, catalog) for entry in data["scenarios"]
        )
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError, MlperfMigError) as exc:
        raise DataFileError(
            f"{path}: the study layouts cannot be read ({exc}); fix the data file"
        ) from None
    numbers = [s.scenario for s in scenarios]
    if numbers != list(range(1, len(numbers) + 1)):
        raise DataFileError(
            f"{path}: field scenarios must number the layouts 1, 2, 3, ...; got {numbers}"
        )
    return scenarios


def _scenario_from_data(entry: dict, reference: Gpu, catalog: Catalog) -> StudyScenario:
    layout = parse_layout(reference, entry["layout"], catalog)
    from_vgpu = parse_layout(reference, entry["vgpu_types"], catalog)
    if from_vgpu != layout:
        raise DataFileError(
            f"scenario {entry['scenario']}: vgpu_types give {from_vgpu} but layout says {layout}"
        )
    solve_placements(layout)
    return StudyScenario(scenario=entry["scenario"], layout=layout, vgpu_types=entry["vgpu_types"])


def study_layout(scenario: int, gpu: Gpu | str, catalog: Catalog | None = None) -> Layout:
    """Layout `scenario` (1-8) of the seed study on `gpu`, translated by slice shape.

    Raises NameParseError outside 1-8 and LayoutError when the layout does not fit `gpu`.
    """
    scenarios = study_scenarios(catalog)
    if not isinstance(scenario, int) or not 1 <= scenario <= len(scenarios):
        raise NameParseError(
            f"study scenario {scenario!r} does not exist; the seed study's MIG layouts are "
            f"numbered 1-{len(scenarios)} (this is the MIG layout, not the LoadGen scenario)"
        )
    to_gpu = resolve_gpu(gpu, catalog)
    reference = scenarios[scenario - 1].layout
    if reference.compute_slices > to_gpu.compute_slices:
        fitting = [
            s.scenario for s in scenarios if s.layout.compute_slices <= to_gpu.compute_slices
        ]
        raise LayoutError(
            f"study scenario {scenario} ({reference}) uses {reference.compute_slices} compute "
            f"slices but {to_gpu.name} has {to_gpu.compute_slices}, so it cannot carry this "
            f"layout; {_nearest_text(reference, to_gpu)}; scenarios small enough to try there: "
            f"{', '.join(map(str, fitting)) or 'none'}"
        )
    try:
        layout = translate_layout(reference, to_gpu)
        solve_placements(layout)
    except LayoutError as exc:
        raise LayoutError(
            f"study scenario {scenario} on {to_gpu.name}: {exc}; {_nearest_text(reference, to_gpu)}"
        ) from None
    return layout


def nearest_layout(layout: Layout, gpu: Gpu) -> Layout | None:
    """The valid layout of `gpu` closest to `layout` (on another GPU): as many instances as
    possible, then the closest shares of the GPU.

    Each instance is its (compute, memory) share of its GPU; the two layouts' instances, largest
    first, are compared share by share (a missing instance counts as share 0) and a profile with
    other attributes (+me, -me, +gfx) costs one more. So 7g.80gb on an A100 becomes 4g.96gb on a
    4-slice RTX PRO 6000, and 3x2g.20gb+1g.10gb four 1-slice instances. None if `gpu` has none.
    """

    def shares(target: Layout) -> list[tuple[float, float, tuple[str, ...]]]:
        board = target.gpu
        return [
            (
                p.compute_slices / board.compute_slices,
                p.memory_slices / board.memory_slices,
                p.attributes,
            )
            for p in target.profiles
        ]

    wanted = shares(layout)

    def distance(candidate: Layout) -> tuple[int, float, str]:
        have = shares(candidate)
        size = max(len(wanted), len(have))
        padded_wanted = wanted + [(0.0, 0.0, ())] * (size - len(wanted))
        padded_have = have + [(0.0, 0.0, ())] * (size - len(have))
        cost = sum(
            abs(a[0] - b[0]) + abs(a[1] - b[1]) + (a[2] != b[2])
            for a, b in zip(padded_wanted, padded_have)
        )
        return (abs(len(have) - len(wanted)), round(cost, 9), str(candidate))

    candidates = valid_layouts(gpu)
    return min(candidates, key=distance) if candidates else None


def _nearest_text(layout: Layout, gpu: Gpu) -> str:
    nearest = nearest_layout(layout, gpu)
    if nearest is None:
        return f"{gpu.name} has no valid layout"
    return (
        f"the nearest valid translation on {gpu.name} is {nearest} (by shares of the GPU; "
        f"`mlperf-mig layouts {gpu.name}` lists all)"
    )


def translate_layout(layout: Layout, gpu: Gpu) -> Layout:
    """The same slice shapes as `layout` under `gpu`'s profile names; LayoutError if one is missing."""
    return Layout(gpu=gpu, profiles=tuple(_same_shape(p, layout, gpu) for p in layout.profiles))


def _same_shape(profile: Profile, layout: Layout, gpu: Gpu) -> Profile:
    match = gpu.profile_by_shape(profile.shape)
    if match is None:
        shapes = ", ".join(
            f"{p.name} ({p.compute_slices}c/{p.memory_slices}m)" for p in gpu.profiles
        )
        raise LayoutError(
            f"layout {layout} ({layout.gpu.name}) does not translate to {gpu.name}: it has no "
            f"profile shaped like {profile.name} ({profile.compute_slices} compute slices, "
            f"{profile.memory_slices} memory slices) - {gpu.name} has {gpu.compute_slices} "
            f"compute and {gpu.memory_slices} memory slices and offers {shapes}; choose a "
            "layout made of those profiles"
        )
    return match
