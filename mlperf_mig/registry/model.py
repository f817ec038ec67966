"""Typed records of the registry: GPUs, MIG profiles, layouts and placements (all frozen)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
from attrs import validators as v

from mlperf_mig.errors import LayoutError, UnknownProfileError

# documented: NVIDIA's MIG User Guide or another NVIDIA document; nvidia-smi: a real printout;
# nvidia-code: NVIDIA's own code or configuration (mig-parted, gpu-operator, nvml.h); inferred:
# derived, not read; live: NVML on this machine.
PROVENANCES = ("documented", "nvidia-smi", "nvidia-code", "inferred", "live")
# A profile name: `<compute>g.<GB>gb` plus attribute suffixes. `+me` owns the media engines,
# `+me.all` all of them, `-me` none, `+gfx` is graphics capable ("Universal MIG", Blackwell);
# NVML's header names the same kinds _REV1, _ALL_ME, _NO_ME and _GFX (mig-blackwell.md section 3).
PROFILE_NAME_RE = re.compile(
    r"^(?P<compute>\d+)g\.(?P<memory>\d+)gb(?P<suffixes>(?:\+me\.all|\+me|-me|\+gfx)*)$"
)
PROFILE_ATTRIBUTES = {"+me": "me", "+me.all": "me.all", "-me": "no-me", "+gfx": "gfx"}
_SUFFIX_RE = re.compile(r"\+me\.all|\+me|-me|\+gfx")
_MEDIA_KINDS = ("me", "me.all", "no-me")  # at most one of these per profile
_SHORTHAND_RE = re.compile(r"^(?P<compute>\d+)g$")


def ordered_attributes(attributes: Iterable[str]) -> tuple[str, ...]:
    """The attributes in one canonical order (me, me.all, no-me, gfx), each once."""
    order = list(PROFILE_ATTRIBUTES.values())
    return tuple(sorted(set(attributes), key=order.index))


def name_attributes(name: str) -> tuple[str, ...] | None:
    """The attributes a profile name carries (`1g.24gb+me.all` -> ("me.all",)), or None when the
    name is not `<N>g.<GB>gb[suffixes]` or repeats or mixes media kinds (`+me-me`)."""
    match = PROFILE_NAME_RE.match(name.strip().lower().removeprefix("mig ").strip())
    if match is None:
        return None
    suffixes = _SUFFIX_RE.findall(match["suffixes"])
    attributes = [PROFILE_ATTRIBUTES[s] for s in suffixes]
    if len(set(attributes)) != len(attributes) or sum(a in _MEDIA_KINDS for a in attributes) > 1:
        return None
    return ordered_attributes(attributes)


def _attributes_from_name(profile: Profile) -> tuple[str, ...]:
    return name_attributes(profile.name) or ()


_non_negative = v.and_(v.instance_of(int), v.ge(0))
_positive = v.and_(v.instance_of(int), v.ge(1))
_optional_count = v.optional(_non_negative)


def _str_tuple(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


def _int_tuple(values: Iterable[int]) -> tuple[int, ...]:
    return tuple(values)


def _pairs(values: Mapping[str, str] | Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """Field -> source as sorted pairs (a dict would make the frozen records unhashable)."""
    items = values.items() if isinstance(values, Mapping) else values
    return tuple(sorted((str(k), str(v)) for k, v in items))


# The value of one Profile field, as compared between the shipped table and live NVML data.
ProfileValue = str | int | float | tuple[int, ...] | None


@attrs.frozen(kw_only=True)
class Profile:
    """One GPU-instance profile of one GPU (a name means different shapes on different GPUs)."""

    name: str = attrs.field(validator=v.min_len(1))
    profile_id: int = attrs.field(validator=_non_negative)
    memory_slices: int = attrs.field(validator=_positive)
    compute_slices: int = attrs.field(validator=_positive)
    max_instances: int = attrs.field(validator=_positive)
    placement_starts: tuple[int, ...] = attrs.field(converter=_int_tuple)
    placement_size: int = attrs.field(validator=_positive)
    provenance: str = attrs.field(validator=v.in_(PROVENANCES))
    sms: int | None = attrs.field(default=None, validator=_optional_count)
    memory_gib: float | None = attrs.field(default=None)
    copy_engines: int | None = attrs.field(default=None, validator=_optional_count)
    decoders: int | None = attrs.field(default=None, validator=_optional_count)
    encoders: int | None = attrs.field(default=None, validator=_optional_count)
    jpeg_decoders: int | None = attrs.field(default=None, validator=_optional_count)
    ofa: int | None = attrs.field(default=None, validator=_optional_count)
    nvml_constant: str | None = attrs.field(default=None)
    inferred_fields: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    note: str = ""
    # Other names the same profile ID prints as (GB200 early boards: 1g.24gb for 1g.23gb).
    aliases: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    # me / me.all / no-me / gfx: from the name unless given (discovery adds NVML's CAPS_GFX bit).
    attributes: tuple[str, ...] = attrs.field(
        default=attrs.Factory(_attributes_from_name, takes_self=True), converter=ordered_attributes
    )
    # Where each field's value comes from, where it differs from the entry's provenance.
    field_sources: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_pairs)

    @placement_starts.validator
    def _check_starts(self, _attribute: attrs.Attribute, value: tuple[int, ...]) -> None:
        if not value or any(start < 0 for start in value) or list(value) != sorted(set(value)):
            raise ValueError(f"placement_starts of {self.name} must be distinct, sorted and >= 0")

    @property
    def media_extensions(self) -> bool:
        """True for the `+me` profiles that own the media engines."""
        return "me" in self.attributes

    @property
    def all_media_engines(self) -> bool:
        """True for `+me.all`: NVML's _ALL_ME, which allows only `-me` instances beside it."""
        return "me.all" in self.attributes

    @property
    def no_media_engines(self) -> bool:
        """True for `-me` (NVML's _NO_ME): an instance without media engines."""
        return "no-me" in self.attributes

    @property
    def graphics(self) -> bool:
        """True for `+gfx` (graphics-capable, NVML's CAPS_GFX)."""
        return "gfx" in self.attributes

    @property
    def plain(self) -> bool:
        """True for a profile without attributes (`1g.10gb`, not `1g.10gb+me` or `-me`)."""
        return not self.attributes

    @property
    def names(self) -> tuple[str, ...]:
        """The name and the aliases it also prints as."""
        return (self.name, *self.aliases)

    @property
    def shape(self) -> tuple[int, int, tuple[str, ...]]:
        """(compute slices, memory slices, attributes): what the study's layouts are translated by."""
        return (self.compute_slices, self.memory_slices, self.attributes)

    @property
    def size_key(self) -> tuple[int, int, tuple[str, ...], str]:
        """Sort key that puts the largest profile first (plain before attributes)."""
        return (-self.compute_slices, -self.memory_slices, self.attributes, self.name)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data."""
        data = attrs.asdict(self)
        data["field_sources"] = dict(self.field_sources)
        return data


@attrs.frozen(kw_only=True, repr=False)
class Gpu:
    """One MIG-capable GPU product with its profiles, names and PCI device IDs."""

    name: str = attrs.field(validator=v.min_len(1))
    memory_slices: int = attrs.field(validator=_positive)
    compute_slices: int = attrs.field(validator=_positive)
    profiles: tuple[Profile, ...] = attrs.field(converter=tuple[Profile, ...])
    aliases: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    nvml_names: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    system_id_name: str = ""
    vgpu_prefixes: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    pci_device_ids: tuple[int, ...] = attrs.field(default=(), converter=_int_tuple)
    # PCI subsystem device IDs (16 bits, e.g. 0x204D) that tell this board from another with the
    # same device ID (RTX PRO 5000 48GB vs 72GB); empty: every subsystem of the device IDs.
    pci_subsystem_ids: tuple[int, ...] = attrs.field(default=(), converter=_int_tuple)
    # What the board needs before MIG can be enabled (doctor says it): e.g. compute mode, a vBIOS.
    prerequisites: str = ""
    memory_gib: float | None = None
    architecture: str = ""
    min_driver: str = ""
    nvml_instance_counts_reliable: bool = True
    provenance: str = attrs.field(default="documented", validator=v.in_(PROVENANCES))
    inferred_fields: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    sources: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    field_sources: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_pairs)
    source_file: str = attrs.field(default="", eq=False)

    @profiles.validator
    def _check_profiles(self, _attribute: attrs.Attribute, value: tuple[Profile, ...]) -> None:
        if not value:
            raise ValueError(f"GPU {self.name} has no MIG profiles")
        names = [name.lower() for p in value for name in p.names]
        if len(set(names)) != len(names):
            raise ValueError(f"GPU {self.name} lists a profile name twice")

    def __repr__(self) -> str:
        return f"Gpu({self.name!r}, {len(self.profiles)} profiles)"

    def profile(self, name: str) -> Profile:
        """Return the profile called `name` on this GPU (case-insensitive; `4g` if unambiguous)."""
        wanted = name.strip().lower().removeprefix("mig ").strip()
        for profile in self.profiles:
            if wanted in (n.lower() for n in profile.names):
                return profile
        shorthand = _SHORTHAND_RE.match(wanted)
        if shorthand:
            matches = [
                p
                for p in self.profiles
                if p.compute_slices == int(shorthand["compute"]) and p.plain
            ]
            if len(matches) == 1:
                return matches[0]
            if matches:
                raise UnknownProfileError(
                    f"MIG profile {name!r} is ambiguous on {self.name}: it could be "
                    f"{', '.join(p.name for p in matches)}; write the full name"
                )
        raise UnknownProfileError(self._unknown_profile_message(name))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data; PCI IDs as packed hex strings like the data files."""
        data = attrs.asdict(self, recurse=False)
        data["profiles"] = [p.to_dict() for p in self.profiles]
        data["pci_device_ids"] = [f"0x{pci:08X}" for pci in self.pci_device_ids]
        data["pci_subsystem_ids"] = [f"0x{pci:04X}" for pci in self.pci_subsystem_ids]
        data["field_sources"] = dict(self.field_sources)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}

    def profile_by_id(self, profile_id: int) -> Profile | None:
        """Return the profile with NVML profile ID `profile_id`, or None."""
        return next((p for p in self.profiles if p.profile_id == profile_id), None)

    def profile_by_shape(self, shape: tuple[int, int, tuple[str, ...]]) -> Profile | None:
        """Return the profile with this (compute slices, memory slices, attributes) shape, or None."""
        return next((p for p in self.profiles if p.shape == shape), None)

    def _unknown_profile_message(self, name: str) -> str:
        known = ", ".join(p.name for p in self.profiles)
        parsed = PROFILE_NAME_RE.match(name.strip().lower())
        hint = ""
        if parsed:
            same = [p.name for p in self.profiles if p.compute_slices == int(parsed["compute"])]
            hint = (
                f" (profile names differ between GPUs; the {parsed['compute']}-compute-slice "
                f"profiles of {self.name} are {', '.join(same)})"
                if same
                else f" ({self.name} has {self.compute_slices} compute slices)"
            )
        return f"MIG profile {name!r} does not exist on {self.name}{hint}; use one of: {known}"


@attrs.frozen(kw_only=True)
class Placement:
    """One GPU instance at an explicit memory-slice window: slices start .. start+size-1."""

    profile: Profile
    start: int = attrs.field(validator=_non_negative)

    @start.validator
    def _check_start(self, _attribute: attrs.Attribute, value: int) -> None:
        if value not in self.profile.placement_starts:
            raise ValueError(
                f"{self.profile.name} cannot start at memory slice {value}; "
                f"its starts are {list(self.profile.placement_starts)}"
            )

    @property
    def size(self) -> int:
        return self.profile.placement_size

    @property
    def end(self) -> int:
        """One past the last memory slice this instance occupies."""
        return self.start + self.size

    @property
    def memory_range(self) -> str:
        """The memory slices occupied: `4-7`, or `6` for a single slice."""
        if self.size == 1:
            return str(self.start)
        return f"{self.start}-{self.end - 1}"

    def __str__(self) -> str:
        return f"{self.profile.name}@{self.start}"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data."""
        return {
            "profile": self.profile.name,
            "profile_id": self.profile.profile_id,
            "start": self.start,
            "size": self.size,
            "compute_slices": self.profile.compute_slices,
        }


def _sorted_profiles(profiles: Iterable[Profile]) -> tuple[Profile, ...]:
    return tuple(sorted(profiles, key=lambda p: p.size_key))


@attrs.frozen(kw_only=True)
class Layout:
    """A multiset of profiles on one GPU, largest first; whether it fits is the solver's job."""

    gpu: Gpu
    profiles: tuple[Profile, ...] = attrs.field(converter=_sorted_profiles)

    @profiles.validator
    def _check_profiles(self, _attribute: attrs.Attribute, value: tuple[Profile, ...]) -> None:
        if not value:
            raise LayoutError(f"a layout on {self.gpu.name} needs at least one MIG profile")
        for profile in value:
            if profile not in self.gpu.profiles:
                raise UnknownProfileError(self.gpu._unknown_profile_message(profile.name))

    @property
    def compute_slices(self) -> int:
        return sum(p.compute_slices for p in self.profiles)

    @property
    def memory_slices(self) -> int:
        return sum(p.memory_slices for p in self.profiles)

    def counts(self) -> tuple[tuple[Profile, int], ...]:
        """Each distinct profile with its count, largest profile first."""
        counter = Counter(self.profiles)
        return tuple((p, counter[p]) for p in _sorted_profiles(counter))

    def spec(self, *, explicit_counts: bool = False) -> str:
        """The layout as a string: `3x2g.20gb+1g.10gb` (or `...+1x1g.10gb` with explicit counts)."""
        parts = [f"{n}x{p.name}" if n > 1 or explicit_counts else p.name for p, n in self.counts()]
        return "+".join(parts)

    def __str__(self) -> str:
        return self.spec()

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (profile names resolve against `gpu`)."""
        return {
            "gpu": self.gpu.name,
            "layout": self.spec(),
            "profiles": [p.name for p in self.profiles],
            "compute_slices": self.compute_slices,
            "memory_slices": self.memory_slices,
        }
