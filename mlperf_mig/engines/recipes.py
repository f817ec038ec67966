"""Engine recipes: batch sizes per MIG profile size and LoadGen scenario, workspace, BERT buckets.

The data lives in `engines/<benchmark>.toml` at the top of the repository (inside the wheel as
mlperf_mig/_data/engines); values that are not NVIDIA's published settings are marked inferred.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from mlperf_mig.errors import DataFileError, PrecisionError, SettingsError
from mlperf_mig.workloads import Workload

LOADGEN_SCENARIOS: tuple[str, ...] = ("SingleStream", "MultiStream", "Offline", "Server")
_BATCHED = ("Offline", "Server")


def canonical_loadgen_scenario(name: str) -> str:
    """'offline' -> 'Offline'; raises SettingsError for anything but the four LoadGen scenarios."""
    for scenario in LOADGEN_SCENARIOS:
        if name.strip().lower() == scenario.lower():
            return scenario
    raise SettingsError(
        f"unknown LoadGen scenario {name!r}; expected one of {', '.join(LOADGEN_SCENARIOS)} "
        "(a MIG layout is chosen with scenario=1..8, not here)"
    )


@attrs.frozen(kw_only=True)
class BatchTable:
    """Batch size per profile size (compute slices) for one precision and LoadGen scenario."""

    sizes: tuple[tuple[int, int], ...]  # (compute slices, batch size), ascending
    inferred: frozenset[int]  # compute-slice counts whose value is ours, not NVIDIA's

    def entry_for(self, compute_slices: int) -> int:
        """The table key used for a profile of `compute_slices`: the largest one not above it."""
        keys = [k for k, _ in self.sizes if k <= compute_slices]
        if not keys:
            raise SettingsError(
                f"no batch size for a profile with {compute_slices} compute slices; "
                f"the recipe starts at {self.sizes[0][0]}"
            )
        return keys[-1]

    def batch_size(self, compute_slices: int) -> int:
        return dict(self.sizes)[self.entry_for(compute_slices)]


@attrs.frozen(kw_only=True)
class Recipe:
    """How to build the engines of one benchmark in one precision."""

    benchmark: str
    precision: str
    workspace_mib: int
    seq_buckets: tuple[int, ...]
    tables: Mapping[str, BatchTable]  # "Offline", "Server"
    stream: Mapping[str, int]  # samples per query of SingleStream / MultiStream
    cpu: Mapping[str, int]  # Offline / Server batch sizes for ONNX Runtime on CPU
    path: Path

    @property
    def whole_gpu_slices(self) -> int:
        """The largest profile size the recipe lists (7: a whole A100/H100/H200/B200)."""
        return max(table.sizes[-1][0] for table in self.tables.values())

    def batch_size(self, compute_slices: int | None, loadgen_scenario: str) -> int:
        """The batch size for a profile of `compute_slices` (None: the CPU, no GPU slice)."""
        scenario = canonical_loadgen_scenario(loadgen_scenario)
        if scenario in self.stream:
            return self.stream[scenario]
        if compute_slices is None:
            return self.cpu[scenario]
        return self.tables[scenario].batch_size(compute_slices)

    def is_inferred(self, compute_slices: int | None, loadgen_scenario: str) -> bool:
        """True when `batch_size(compute_slices, loadgen_scenario)` is ours rather than NVIDIA's
        (the CPU sizes always are; the stream scenarios' sizes are fixed by MLPerf)."""
        scenario = canonical_loadgen_scenario(loadgen_scenario)
        if scenario in self.stream:
            return False
        if compute_slices is None:
            return True
        table = self.tables[scenario]
        return table.entry_for(compute_slices) in table.inferred

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], precision: str) -> Recipe:
        file = Path(path)
        try:
            data = tomllib.loads(file.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise DataFileError(f"recipe {str(file)!r} cannot be read: {exc}") from None
        precisions = data.get("precision", {})
        if precision not in precisions:
            raise PrecisionError(
                f"no {precision} recipe for {data.get('benchmark', file.stem)} in {str(file)!r}; "
                f"expected one of {', '.join(precisions)}"
            )
        try:
            section = precisions[precision]
            return cls(
                benchmark=str(data["benchmark"]),
                precision=precision,
                workspace_mib=int(section["workspace_mib"]),
                seq_buckets=tuple(int(s) for s in data.get("seq_buckets", ())),
                tables={s: _batch_table(section[s]) for s in _BATCHED},
                stream={s: int(data["stream"][s]) for s in ("SingleStream", "MultiStream")},
                cpu={s: int(data["cpu"][s]) for s in _BATCHED},
                path=file,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise DataFileError(
                f"recipe {str(file)!r} is malformed ({type(exc).__name__}: {exc}); "
                "see engines/resnet50.toml for the expected fields"
            ) from None


def _batch_table(section: dict[str, Any]) -> BatchTable:
    sizes = tuple(sorted((int(k), int(v)) for k, v in section["batch_sizes"].items()))
    if not sizes or any(k < 1 or v < 1 for k, v in sizes):
        raise ValueError(f"batch_sizes must map compute slices >= 1 to batch sizes >= 1: {sizes}")
    return BatchTable(sizes=sizes, inferred=frozenset(int(k) for k in section.get("inferred", ())))


def load_recipe(
    benchmark: Workload, precision: str, *, folder: str | os.PathLike[str] | None = None
) -> Recipe:
    """The recipe of `benchmark` in `precision` from `folder` (default: the shipped engines/)."""
    return Recipe.from_file(
        benchmark.recipe_path(Path(folder) if folder is not None else None), precision
    )
