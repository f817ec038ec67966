"""Names: GPUs, layout strings, vGPU type names and NVIDIA-style system IDs.

Profile names resolve only against a GPU: `1g.10gb` is 1/8 of the memory on an 80 GB part and
2/8 on an A100-40GB.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from mlperf_mig.errors import LayoutError, NameParseError, UnknownProfileError
from mlperf_mig.registry.catalog import Catalog, default_catalog
from mlperf_mig.registry.model import PROFILE_NAME_RE, Gpu, Layout, Profile, name_attributes

LAYOUT_EXAMPLE = "3x2g.20gb+1g.10gb"
SYSTEM_ID_EXAMPLE = "A100-SXM-80GB_MIG_1x4g.40gb+1x2g.20gb+1x1g.10gb"
VGPU_EXAMPLE = "A100D-2-20C, grid_a100d-2-20c, or nvidia-2-20c together with a GPU"

_COUNTED_RE = re.compile(r"^(?:(?P<count>\d+)\s*[x×*]\s*)?(?P<name>\S+)$", re.IGNORECASE)
# MIG-backed vGPU types: <board>-<G>-<GB><series>[ME|NOME|MEALL|GFX], series A/B/C/Q, as NVIDIA's
# vgpu-device-manager parses them (NVIDIA/vgpu-device-manager `pkg/types/vgpu_type.go`, ec902ea:
# "A100-1-5CME", "DC-1-24CGFX"); the attribute is the MIG profile's +me, -me, +me.all or +gfx.
_VGPU_RE = re.compile(
    r"^(?:grid_)?(?P<board>[a-z0-9]+)-(?P<compute>\d+)-(?P<framebuffer>\d+)(?P<series>[abcq])"
    r"(?P<attribute>me|nome|meall|gfx)?$",
    re.IGNORECASE,
)
_VGPU_ATTRIBUTES = {"ME": "+me", "NOME": "-me", "MEALL": "+me.all", "GFX": "+gfx"}
_ATTRIBUTE_SPELLING = {"me": "ME", "no-me": "NOME", "me.all": "MEALL", "gfx": "GFX"}
_GLUED_SUFFIXES = ("me", "me.all", "gfx")  # `+` inside a profile name, not between profiles
_SYSTEM_ID_RE = re.compile(r"^(?P<gpu>[^\s]+?)_MIG_(?P<layout>\S+)$", re.IGNORECASE)
GENERIC_VGPU_BOARD = "nvidia"


def resolve_gpu(gpu: Gpu | str, catalog: Catalog | None = None) -> Gpu:
    """Return `gpu` itself, or the catalog GPU it names."""
    if isinstance(gpu, Gpu):
        return gpu
    return (catalog or default_catalog()).get(gpu)


def parse_layout(
    gpu: Gpu | str, spec: str | Sequence[str], catalog: Catalog | None = None
) -> Layout:
    """Parse `3x2g.20gb+1g.10gb` (or `,` separators, or a list of names) into a Layout on `gpu`.

    Entries may be profile names (`+me` included), `Ng` when only one such profile exists, or
    vGPU type names of this GPU (`A100D-2-20C`, `nvidia-2-20c`).
    """
    board = resolve_gpu(gpu, catalog)
    entries = _split_layout(spec) if isinstance(spec, str) else [str(s) for s in spec]
    profiles: list[Profile] = []
    for entry in entries:
        count, name = _split_count(entry, spec)
        if count > board.memory_slices:  # also keeps a huge count from building a huge list
            raise LayoutError(
                f"layout entry {entry!r} asks for {count} instances but {board.name} has only "
                f"{board.memory_slices} memory slices (each instance takes at least one); "
                f"use a count of {board.memory_slices} or fewer"
            )
        profiles.extend([_resolve_entry(board, name, catalog)] * count)
    if not profiles:
        raise LayoutError(f"layout {spec!r} names no MIG profile; write it like {LAYOUT_EXAMPLE}")
    return Layout(gpu=board, profiles=tuple(profiles))


def _split_layout(spec: str) -> list[str]:
    """Split on `+` and `,`, gluing `me`, `me.all` and `gfx` parts back onto the profile before
    them (`1g.10gb+me`, `1g.24gb+me.all`, `1g.24gb+gfx`)."""
    entries: list[str] = []
    for position, part in enumerate(re.split(r"[+,]", spec)):
        part = part.strip()
        suffix = f"+{part.lower()}"
        if part.lower() in _GLUED_SUFFIXES and entries and suffix not in entries[-1].lower():
            entries[-1] += suffix
        elif not part:
            raise LayoutError(
                f"layout {spec!r} has an empty entry at position {position + 1}; separate "
                f"profiles with single + or , like {LAYOUT_EXAMPLE}"
            )
        else:
            entries.append(part)
    return entries


def _split_count(entry: str, spec: str | Sequence[str]) -> tuple[int, str]:
    match = _COUNTED_RE.match(entry.strip())
    if match is None:
        raise LayoutError(
            f"layout entry {entry!r} in {spec!r} is not `<count>x<profile>` or `<profile>`; "
            f"write it like {LAYOUT_EXAMPLE}"
        )
    count = int(match["count"]) if match["count"] else 1
    if count < 1:
        raise LayoutError(f"layout entry {entry!r} has count 0; drop it or use a count >= 1")
    return count, match["name"]


def _resolve_entry(gpu: Gpu, name: str, catalog: Catalog | None) -> Profile:
    try:
        return gpu.profile(name)
    except UnknownProfileError:
        if _VGPU_RE.match(name) is None:
            raise
    return parse_vgpu_type(name, gpu, catalog=catalog)[1]


def parse_vgpu_type(
    name: str, gpu: Gpu | str | None = None, *, catalog: Catalog | None = None
) -> tuple[Gpu, Profile]:
    """Map a MIG-backed vGPU type (A100D-2-20C, grid_a100d-2-20c, nvidia-2-20c) to its profile.

    `<board>-<compute slices>-<framebuffer GB><series>[ME|NOME|MEALL|GFX]` names the profile
    `<slices>g.<GB>gb[+me|-me|+me.all|+gfx]` of the board's GPU. The generic board `nvidia` (the
    study's spelling) needs `gpu`, and so does a board prefix two GPUs share (Blackwell `DC`).
    A type whose framebuffer is smaller than its instance's (DC-1-2Q) is a time-sliced share of a
    MIG instance, not the instance: `mig_backed_share` names its profile.
    """
    board, profile_name = _vgpu_profile_name(name, gpu, catalog)
    try:
        return board, board.profile(profile_name)
    except UnknownProfileError:
        known = ", ".join(vgpu_type_name(board, p) for p in board.profiles)
        share = mig_backed_share(name, board, catalog=catalog)
        what = (
            f"; it is a time-sliced share of one {share[1].name} instance (several VMs on one "
            "MIG instance), which runs only with --shared"
            if share
            else ""
        )
        raise NameParseError(
            f"vGPU type {name!r} maps to MIG profile {profile_name}, which {board.name} does not "
            f"have{what}; its MIG-backed vGPU types are {known}"
        ) from None


def mig_backed_share(
    name: str, gpu: Gpu | str | None = None, *, catalog: Catalog | None = None
) -> tuple[Gpu, Profile] | None:
    """The board and backing MIG profile of a MIG-backed time-sliced vGPU type, or None.

    Blackwell RTX PRO boards time-slice one MIG instance between several VMs ("Time-Sliced
    MIG-Backed", NVIDIA AI Enterprise vGPU docs): `DC-1-2Q` is 2 GB of a 1-slice instance of
    24 GB. Such a type names fewer GB than any profile of its slices and attributes; the backing
    profile is the smallest one with at least that much memory. None for a whole-instance type.
    """
    try:
        board, profile_name = _vgpu_profile_name(name, gpu, catalog)
    except NameParseError:
        return None
    wanted = PROFILE_NAME_RE.match(profile_name)
    assert wanted is not None
    compute, memory = int(wanted["compute"]), int(wanted["memory"])
    same_kind = [
        p
        for p in board.profiles
        if p.compute_slices == compute and p.attributes == name_attributes(profile_name)
    ]
    if any(memory in (_profile_gb_of(n) for n in p.names) for p in same_kind):
        return None  # a whole instance
    larger = [p for p in same_kind if _profile_gb(p) > memory]
    return (board, min(larger, key=_profile_gb)) if larger else None


def _profile_gb_of(name: str) -> int:
    match = PROFILE_NAME_RE.match(name.lower())
    return int(match["memory"]) if match else 0


def _profile_gb(profile: Profile) -> int:
    return _profile_gb_of(profile.name)


def _vgpu_profile_name(
    name: str, gpu: Gpu | str | None, catalog: Catalog | None
) -> tuple[Gpu, str]:
    match = _VGPU_RE.match(name.strip())
    if match is None:
        raise NameParseError(
            f"{name!r} is not a MIG-backed vGPU type name; expected "
            f"<board>-<compute slices>-<framebuffer GB><series>[ME|NOME|MEALL|GFX] such as "
            f"{VGPU_EXAMPLE}"
        )
    board = _vgpu_board(name, match["board"], gpu, catalog)
    suffix = _VGPU_ATTRIBUTES[match["attribute"].upper()] if match["attribute"] else ""
    return board, f"{match['compute']}g.{match['framebuffer']}gb{suffix}"


def _vgpu_board(name: str, board: str, gpu: Gpu | str | None, catalog: Catalog | None) -> Gpu:
    wanted = resolve_gpu(gpu, catalog) if gpu is not None else None
    if board.lower() == GENERIC_VGPU_BOARD:
        if wanted is None:
            raise NameParseError(
                f"vGPU type {name!r} does not say which GPU it is on; pass the GPU too "
                "(for example --gpu A100-80GB) or use the board name, like A100D-2-20C"
            )
        return wanted
    boards = [
        g
        for g in (catalog or default_catalog())
        if board.lower() in (p.lower() for p in g.vgpu_prefixes)
    ]
    if wanted is not None:
        if boards and wanted not in boards:
            raise NameParseError(
                f"vGPU type {name!r} belongs to {', '.join(g.name for g in boards)}, not "
                f"{wanted.name}; use a vGPU type of {wanted.name} or name the other GPU"
            )
        return wanted
    if not boards:
        raise NameParseError(
            f"vGPU board {board!r} in {name!r} is unknown; use a known board prefix "
            "(A100, A100X, A100D, A100DX, A30, H100, H100XM, H100L, H200, H200X, DC, GB200, ...) "
            "or nvidia-... together with a GPU"
        )
    if len(boards) > 1:
        raise NameParseError(
            f"vGPU board {board!r} in {name!r} is shared by {', '.join(g.name for g in boards)}; "
            'pass the GPU too (for example --gpu "RTX PRO 6000 Blackwell Server Edition"); '
            "inside a VM discovery tells them apart by PCI device ID"
        )
    return boards[0]


def vgpu_type_name(gpu: Gpu, profile: Profile) -> str:
    """The vGPU type of `profile` in NVIDIA's spelling (`A100D-2-20C`, `DC-1-24CGFX`), or
    `nvidia-...`."""
    board = gpu.vgpu_prefixes[0] if gpu.vgpu_prefixes else GENERIC_VGPU_BOARD
    attribute = "".join(_ATTRIBUTE_SPELLING[a] for a in profile.attributes)
    return f"{board}-{profile.compute_slices}-{_profile_gb(profile)}C{attribute}"


def system_id(layout: Layout) -> str:
    """NVIDIA's MLPerf system ID of a MIG layout: `A100-SXM-80GB_MIG_1x4g.40gb+1x2g.20gb+1x1g.10gb`."""
    prefix = layout.gpu.system_id_name or layout.gpu.name
    return f"{prefix}_MIG_{layout.spec(explicit_counts=True)}"


def parse_system_id(text: str, catalog: Catalog | None = None) -> Layout:
    """Parse a system ID written by `system_id` (or NVIDIA's harness) back into its Layout."""
    match = _SYSTEM_ID_RE.match(text.strip())
    if match is None:
        raise NameParseError(
            f"{text!r} is not a MIG system ID; expected <GPU>_MIG_<count>x<profile>+..., "
            f"for example {SYSTEM_ID_EXAMPLE}"
        )
    gpu = (catalog or default_catalog()).get(match["gpu"])
    return parse_layout(gpu, match["layout"], catalog)
