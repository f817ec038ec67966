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
from mlperf_mig.registry.solver import solve_placements

STUDY_FILE = "study.toml"


@attrs.frozen(kw_only=True)
class StudyScenario:
    """One layout of the seed study, on the GPU the study ran on."""

    scenario: int
    layout: Layout
    vgpu_types: tuple[str, ...] = attrs.field(converter=tuple)


def study_scenarios(catalog: Catalog | None = None) -> tuple[StudyScenario, ...]:
    """The eight layouts of the seed study on its reference GPU (A100 80GB)."""
    return _load_study(data_dir("systems") / STUDY_FILE, catalog or default_catalog())


@functools.cache
def _load_study(path: Path, catalog: Catalog) -> tuple[StudyScenario, ...]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        reference = catalog.get(data["reference_gpu"])
        scenarios = tuple(_scenario_from_data(entry, reference, catalog) for entry in data["scenarios"])
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError, MlperfMigError) as exc:
        raise DataFileError(f"{path}: the study layouts cannot be read ({exc}); fix the data file") from None
    numbers = [s.scenario for s in scenarios]
    if numbers != list(range(1, len(numbers) + 1)):
        raise DataFileError(f"{path}: field scenarios must number the layouts 1, 2, 3, ...; got {numbers}")
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
        fitting = [s.scenario for s in scenarios if s.layout.compute_slices <= to_gpu.compute_slices]
        raise LayoutError(
            f"study scenario {scenario} ({reference}) uses {reference.compute_slices} compute "
            f"slices but {to_gpu.name} has {to_gpu.compute_slices}, so it cannot carry this "
            f"layout; scenarios small enough to try there: {', '.join(map(str, fitting))}"
        )
    try:
        layout = translate_layout(reference, to_gpu)
        solve_placements(layout)
    except LayoutError as exc:
        raise LayoutError(f"study scenario {scenario} on {to_gpu.name}: {exc}") from None
    return layout


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
