"""The GPU catalog: one TOML data file per GPU product, validated on load, with a search path.

The shipped files live in `systems/gpus/`. Users add GPUs without editing code by pointing the
`MLPERF_MIG_SYSTEMS_PATH` environment variable (os.pathsep separated) or the `extra_paths`
argument at folders of further files; a later file with the same GPU name replaces an earlier one.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import re
import tomllib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import attrs

from mlperf_mig._paths import data_dir
from mlperf_mig.errors import DataFileError, UnknownGpuError
from mlperf_mig.registry.model import PROFILE_NAME_RE, PROVENANCES, Gpu, Profile, name_attributes

log = logging.getLogger(__name__)

ENV_VAR = "MLPERF_MIG_SYSTEMS_PATH"

_GPU_KEYS = {
    "name": str,
    "nvml_names": list,
    "aliases": list,
    "system_id_name": str,
    "vgpu_prefixes": list,
    "pci_device_ids": list,
    "pci_subsystem_ids": list,
    "prerequisites": str,
    "memory_slices": int,
    "compute_slices": int,
    "memory_gib": (int, float),
    "architecture": str,
    "min_driver": str,
    "nvml_instance_counts_reliable": bool,
    "provenance": str,
    "inferred": list,
    "sources": list,
    "field_sources": dict,
}
_GPU_REQUIRED = ("name", "memory_slices", "compute_slices")
_PROFILE_KEYS = {
    "name": str,
    "profile_id": int,
    "nvml_constant": str,
    "memory_slices": int,
    "compute_slices": int,
    "sms": int,
    "memory_gib": (int, float),
    "copy_engines": int,
    "decoders": int,
    "encoders": int,
    "jpeg_decoders": int,
    "ofa": int,
    "max_instances": int,
    "placement_starts": list,
    "placement_size": int,
    "provenance": str,
    "inferred": list,
    "note": str,
    "aliases": list,
    "field_sources": dict,
}
_PROFILE_REQUIRED = (
    "name",
    "profile_id",
    "memory_slices",
    "compute_slices",
    "max_instances",
    "placement_starts",
    "placement_size",
    "provenance",
)
_PCI_RE = re.compile(r"^0x[0-9a-fA-F]{8}$")
_SUBSYSTEM_RE = re.compile(r"^0x[0-9a-fA-F]{4}$")


def normalize_gpu_name(name: str) -> str:
    """Lookup key of a GPU name: case-folded, without "NVIDIA ", spaces and underscores as '-'."""
    key = re.sub(r"[\s_]+", "-", name.strip().casefold())
    return key.removeprefix("nvidia-")


@attrs.frozen
class Catalog:
    """The known GPUs, looked up by catalog name, NVML name (with or without "NVIDIA "), alias,
    system-ID name or packed PCI device ID."""

    gpus: tuple[Gpu, ...] = attrs.field(converter=tuple[Gpu, ...])
    _keys: Mapping[str, Gpu] = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_keys", _name_index(self.gpus))
        _check_shared_pci_ids(self.gpus)

    def get(self, name: str) -> Gpu:
        """Return the GPU called `name`; raise UnknownGpuError listing the known ones."""
        gpu = self.find(name)
        if gpu is None:
            known = ", ".join(g.name for g in self.gpus)
            raise UnknownGpuError(
                f"unknown GPU {name!r}; known GPUs: {known} (aliases such as A100-80GB, H100-80GB, "
                f"H200 work too); for another GPU add a data file to a folder named in {ENV_VAR}"
            ) from None
        return gpu

    def find(self, name: str) -> Gpu | None:
        """Return the GPU called `name`, or None."""
        return self._keys.get(normalize_gpu_name(name))

    def by_pci_device_id(
        self, packed_id: int, subsystem_id: int | None = None, nvml_name: str | None = None
    ) -> Gpu | None:
        """Return the GPU with this packed PCI ID (`(device << 16) | vendor`), or None.

        One device ID can cover two boards (0x2BB3: RTX PRO 5000 48GB and 72GB), so an entry
        that lists `pci_subsystem_ids` matches only those subsystems (`subsystem_id` is NVML's
        packed pciSubSystemId, subsystem device << 16 | vendor); where several entries remain,
        the NVML name decides, and None is returned when it cannot.
        """
        candidates = [g for g in self.gpus if packed_id in g.pci_device_ids]
        if subsystem_id:
            candidates = [
                g
                for g in candidates
                if not g.pci_subsystem_ids or subsystem_id >> 16 in g.pci_subsystem_ids
            ]
        if len(candidates) > 1 and subsystem_id:
            exact = [g for g in candidates if subsystem_id >> 16 in g.pci_subsystem_ids]
            candidates = exact or candidates
        if len(candidates) > 1 and nvml_name:
            key = normalize_gpu_name(nvml_name)
            candidates = [
                g for g in candidates if key in {normalize_gpu_name(n) for n in g.nvml_names}
            ]
        return candidates[0] if len(candidates) == 1 else None

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.find(name) is not None

    def __iter__(self) -> Iterator[Gpu]:
        return iter(self.gpus)

    def __len__(self) -> int:
        return len(self.gpus)

    def __repr__(self) -> str:
        return f"Catalog({', '.join(g.name for g in self.gpus)})"


def _name_index(gpus: Iterable[Gpu]) -> dict[str, Gpu]:
    index: dict[str, Gpu] = {}
    for gpu in gpus:
        for name in (gpu.name, gpu.system_id_name, *gpu.nvml_names, *gpu.aliases):
            key = normalize_gpu_name(name) if name else ""
            if not key:
                continue
            other = index.get(key)
            if other is not None and other.name != gpu.name:
                raise DataFileError(
                    f"{gpu.source_file}: name {name!r} of {gpu.name} is already used by "
                    f"{other.name} ({other.source_file}); give one of them another alias"
                )
            index[key] = gpu
    return index


def _check_shared_pci_ids(gpus: Sequence[Gpu]) -> None:
    """Two entries may share a PCI device ID only if subsystem IDs or NVML names tell them apart."""
    for i, gpu in enumerate(gpus):
        for other in gpus[i + 1 :]:
            shared = set(gpu.pci_device_ids) & set(other.pci_device_ids)
            if not shared:
                continue
            by_subsystem = (
                gpu.pci_subsystem_ids
                and other.pci_subsystem_ids
                and not set(gpu.pci_subsystem_ids) & set(other.pci_subsystem_ids)
            )
            names = [{normalize_gpu_name(n) for n in g.nvml_names} for g in (gpu, other)]
            by_name = all(names) and not names[0] & names[1]
            if not (by_subsystem or by_name):
                raise DataFileError(
                    f"{other.source_file}: PCI device ID 0x{min(shared):08X} of {other.name} is "
                    f"also {gpu.name}'s ({gpu.source_file}) and neither pci_subsystem_ids nor "
                    "nvml_names tell the two apart; give both boards their pci_subsystem_ids"
                )


def load_catalog(
    extra_paths: Sequence[str | os.PathLike[str]] | str | os.PathLike[str] | None = None,
) -> Catalog:
    """Read the shipped GPU files, then those under MLPERF_MIG_SYSTEMS_PATH, then `extra_paths`."""
    if isinstance(extra_paths, (str, os.PathLike)):  # one path, not a sequence of characters
        extra_paths = [extra_paths]
    env_paths = [p for p in os.environ.get(ENV_VAR, "").split(os.pathsep) if p]
    files = list(_toml_files(data_dir("systems") / "gpus", origin="the shipped data"))
    for env_path in env_paths:
        files.extend(_toml_files(Path(env_path), origin=ENV_VAR))
    for path in extra_paths or ():
        if not str(path).strip():  # Path("") would silently be the current folder
            raise DataFileError(
                "GPU data path '' (from extra_paths) is empty; pass the folder that holds the "
                "GPU files (like systems/gpus) or a single file"
            )
        files.extend(_toml_files(Path(path), origin="extra_paths"))
    gpus: dict[str, Gpu] = {}
    for file in files:
        gpu = load_gpu_file(file)
        if gpu.name in gpus:
            log.info("%s replaces GPU %s from %s", file, gpu.name, gpus[gpu.name].source_file)
        gpus[gpu.name] = gpu
    return Catalog(tuple(gpus.values()))


@functools.cache
def default_catalog() -> Catalog:
    """The catalog of shipped files plus MLPERF_MIG_SYSTEMS_PATH, read once per process."""
    return load_catalog()


def _toml_files(path: Path, *, origin: str) -> list[Path]:
    if path.is_file():
        return [path]
    if path.is_dir():
        files = sorted(path.glob("*.toml"))
        if not files:
            raise DataFileError(
                f"GPU data folder {str(path)!r} (from {origin}) holds no .toml files; pass the "
                "folder that holds the GPU files (like systems/gpus) or a single file"
            )
        return files
    raise DataFileError(
        f"GPU data path {str(path)!r} (from {origin}) does not exist; pass a folder of GPU "
        ".toml files or a single file"
    )


def load_gpu_file(path: str | os.PathLike[str]) -> Gpu:
    """Read and validate one GPU data file; errors name the file and the field."""
    file = Path(path)
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise DataFileError(f"{file}: cannot be read ({exc}); check the file") from None
    except tomllib.TOMLDecodeError as exc:
        raise DataFileError(f"{file}: not valid TOML ({exc}); fix the syntax") from None
    return _gpu_from_data(data, file)


def _gpu_from_data(data: Mapping[str, Any], file: Path) -> Gpu:
    _check_keys(data, {"gpu": dict, "profiles": list}, ("gpu", "profiles"), file, "")
    table = data["gpu"]
    _check_keys(table, _GPU_KEYS, _GPU_REQUIRED, file, "gpu.")
    fields = {
        k: v
        for k, v in table.items()
        if k not in ("inferred", "pci_device_ids", "pci_subsystem_ids")
    }
    for key in ("memory_slices", "compute_slices"):
        _require(table[key] >= 1, file, f"gpu.{key}", f"must be at least 1, got {table[key]}")
    fields["inferred_fields"] = _strings(table.get("inferred", []), file, "gpu.inferred")
    fields["pci_device_ids"] = _pci_ids(table.get("pci_device_ids", []), file)
    fields["pci_subsystem_ids"] = _subsystem_ids(table.get("pci_subsystem_ids", []), file)
    for key in ("nvml_names", "aliases", "vgpu_prefixes", "sources"):
        fields[key] = _strings(table.get(key, []), file, f"gpu.{key}")
    fields["field_sources"] = _field_sources(table.get("field_sources", {}), _GPU_KEYS, file, "gpu")
    _require(
        table.get("provenance", "documented") in PROVENANCES,
        file,
        "gpu.provenance",
        f"must be one of {', '.join(PROVENANCES)}",
    )
    profiles = tuple(
        _profile_from_data(entry, table, file, f"profiles[{i}]")
        for i, entry in enumerate(data["profiles"])
    )
    _check_unique(profiles, file)
    try:
        return Gpu(profiles=profiles, source_file=str(file), **fields)
    except (TypeError, ValueError) as exc:
        raise DataFileError(f"{file}: gpu: {exc}; fix the data file") from None


def _profile_from_data(entry: object, gpu: Mapping[str, Any], file: Path, where: str) -> Profile:
    if not isinstance(entry, dict):
        _refuse(file, where, "must be a [[profiles]] table")
    _check_keys(entry, _PROFILE_KEYS, _PROFILE_REQUIRED, file, f"{where}.")
    where = f"{where} ({entry['name']})"
    aliases = _strings(entry.get("aliases", []), file, f"{where}.aliases")
    for field, name_text in (
        (f"{where}.name", entry["name"]),
        *((f"{where}.aliases", a) for a in aliases),
    ):
        name = PROFILE_NAME_RE.match(name_text)
        _require(
            name is not None and name_attributes(name_text) is not None,
            file,
            field,
            f"{name_text!r} must look like 3g.40gb, 1g.10gb+me, 1g.24gb+me.all, 1g.24gb-me or "
            "1g.24gb+gfx (one media kind at most)",
        )
        assert name is not None
        _require(
            int(name["compute"]) == entry["compute_slices"],
            file,
            f"{where}.compute_slices",
            f"is {entry['compute_slices']} but the name {name_text!r} says {name['compute']}",
        )
    _require(
        all(name_attributes(a) == name_attributes(entry["name"]) for a in aliases),
        file,
        f"{where}.aliases",
        "must carry the same attributes (+me, -me, ...) as the name",
    )
    _check_slices(entry, gpu, file, where)
    _check_placements(entry, gpu, file, where)
    _require(
        entry["provenance"] in PROVENANCES,
        file,
        f"{where}.provenance",
        f"is {entry['provenance']!r}; use one of {', '.join(PROVENANCES)}",
    )
    fields = {k: v for k, v in entry.items() if k != "inferred"}
    fields["inferred_fields"] = _strings(entry.get("inferred", []), file, f"{where}.inferred")
    fields["aliases"] = aliases
    fields["field_sources"] = _field_sources(
        entry.get("field_sources", {}), _PROFILE_KEYS, file, where
    )
    unknown = set(fields["inferred_fields"]) - set(_PROFILE_KEYS)
    _require(not unknown, file, f"{where}.inferred", f"names unknown fields {sorted(unknown)}")
    if "memory_gib" in fields:
        fields["memory_gib"] = float(fields["memory_gib"])
    try:
        return Profile(**fields)
    except (TypeError, ValueError) as exc:
        raise DataFileError(f"{file}: {where}: {exc}; fix the data file") from None


def _check_slices(entry: Mapping[str, Any], gpu: Mapping[str, Any], file: Path, where: str) -> None:
    for key in ("memory_slices", "compute_slices", "max_instances", "placement_size"):
        _require(entry[key] >= 1, file, f"{where}.{key}", f"must be at least 1, got {entry[key]}")
    for key in ("memory_slices", "compute_slices"):
        _require(
            entry[key] <= gpu[key],
            file,
            f"{where}.{key}",
            f"is {entry[key]} but the GPU has only {gpu[key]}",
        )
    _require(
        entry["max_instances"] * entry["compute_slices"] <= gpu["compute_slices"],
        file,
        f"{where}.max_instances",
        f"{entry['max_instances']} instances of {entry['compute_slices']} compute slices exceed "
        f"the GPU's {gpu['compute_slices']}",
    )


def _check_placements(
    entry: Mapping[str, Any], gpu: Mapping[str, Any], file: Path, where: str
) -> None:
    starts, size = entry["placement_starts"], entry["placement_size"]
    field = f"{where}.placement_starts"
    _require(
        bool(starts) and all(isinstance(s, int) and s >= 0 for s in starts),
        file,
        field,
        "must be a non-empty list of memory-slice indices >= 0",
    )
    _require(starts == sorted(set(starts)), file, field, "must be sorted without repeats")
    _require(
        size == entry["memory_slices"],
        file,
        f"{where}.placement_size",
        f"is {size} but memory_slices is {entry['memory_slices']} (a placement spans the "
        "profile's memory slices)",
    )
    for start in starts:
        _require(
            start + size <= gpu["memory_slices"],
            file,
            field,
            f"start {start} + size {size} runs past the GPU's {gpu['memory_slices']} memory slices",
        )
    disjoint = _max_disjoint(starts, size)
    _require(
        entry["max_instances"] <= disjoint,
        file,
        f"{where}.max_instances",
        f"is {entry['max_instances']} but the placements hold at most {disjoint} side by side",
    )


def _max_disjoint(starts: Sequence[int], size: int) -> int:
    count, free_from = 0, 0
    for start in starts:
        if start >= free_from:
            count, free_from = count + 1, start + size
    return count


def _check_unique(profiles: Sequence[Profile], file: Path) -> None:
    """Profile IDs, NVML constants and names (aliases included) are unique within one GPU."""
    for key in ("names", "profile_id", "nvml_constant"):
        seen: set[object] = set()
        for i, profile in enumerate(profiles):
            value = getattr(profile, key)
            for item in value if isinstance(value, tuple) else (value,):
                if item is None:
                    continue
                item = item.lower() if isinstance(item, str) else item
                field = "name" if key == "names" else key
                _require(item not in seen, file, f"profiles[{i}].{field}", f"repeats {item!r}")
                seen.add(item)


def _check_keys(
    table: Mapping[str, Any],
    types: Mapping[str, Any],
    required: Sequence[str],
    file: Path,
    prefix: str,
) -> None:
    for key, value in table.items():
        _require(key in types, file, f"{prefix}{key}", f"is not a known field ({', '.join(types)})")
        expected = types[key]
        wrong = (
            isinstance(value, bool)
            and expected is not bool
            and bool not in (expected if isinstance(expected, tuple) else (expected,))
        )
        _require(
            isinstance(value, expected) and not wrong,
            file,
            f"{prefix}{key}",
            f"has the wrong type ({type(value).__name__})",
        )
        if isinstance(value, float):  # TOML allows nan and inf, which no size or count can be
            _require(
                math.isfinite(value),
                file,
                f"{prefix}{key}",
                f"must be a finite number, got {value}",
            )
    for key in required:
        _require(key in table, file, f"{prefix}{key}", "is missing")


def _strings(values: list[Any], file: Path, field: str) -> tuple[str, ...]:
    _require(all(isinstance(v, str) for v in values), file, field, "must be a list of strings")
    return tuple(values)


def _pci_ids(values: list[Any], file: Path) -> tuple[int, ...]:
    for value in values:
        _require(
            isinstance(value, str) and bool(_PCI_RE.match(value)),
            file,
            "gpu.pci_device_ids",
            f'entry {value!r} is not a packed ID like "0x20B210DE" (device << 16 | vendor)',
        )
    return tuple(int(v, 16) for v in values)


def _field_sources(
    table: Mapping[str, Any], keys: Mapping[str, Any], file: Path, where: str
) -> dict[str, str]:
    """`field_sources = {sms = "..."}`: each key a field of the entry, each value a source text."""
    for key, value in table.items():
        _require(key in keys, file, f"{where}.field_sources.{key}", "names no field of the entry")
        _require(
            isinstance(value, str) and bool(value.strip()),
            file,
            f"{where}.field_sources.{key}",
            "must be a non-empty text naming the source",
        )
    return dict(table)


def _subsystem_ids(values: list[Any], file: Path) -> tuple[int, ...]:
    for value in values:
        _require(
            isinstance(value, str) and bool(_SUBSYSTEM_RE.match(value)),
            file,
            "gpu.pci_subsystem_ids",
            f'entry {value!r} is not a PCI subsystem device ID like "0x204D" (4 hex digits)',
        )
    return tuple(int(v, 16) for v in values)


def _require(condition: bool, file: Path, field: str, problem: str) -> None:
    if not condition:
        _refuse(file, field, problem)


def _refuse(file: Path, field: str, problem: str) -> NoReturn:
    raise DataFileError(f"{file}: field {field} {problem}; fix the data file")
