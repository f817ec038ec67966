"""Discovery of the GPUs and live MIG devices through NVML (nvidia-ml-py), read-only.

Two steps: `read_nvml_state(nvml)` (registry/nvml_state.py) asks NVML and returns plain data (the
format that `RecordedNvml` replays and `mlperf-mig detect --record` writes); `detect()` matches that state
against the catalog. Live data wins over the shipped table and every disagreement is reported.
No driver and no GPU are normal answers with a message, never an exception; nor is a GPU that
answered GPU_IS_LOST, UNKNOWN or NOT_FOUND: it is a GpuState in an error state (`lost`), its
`problem` says what failed and the fix, and the other GPUs are read as usual. Every string of a
state (names, UUIDs, versions) reaches the records through `printable`: a replayed or recorded
state is untrusted, and a control character in it must not reach a terminal.

NVML quirks honoured here (reference mig-profiles.md section 4): profile *constants* (0..N) are
what GetGpuInstanceProfileInfo takes, profile *IDs* (19, 14, ...) what placements and GPU
instances use, GPU-instance IDs are a third space; placement arrays are caller-allocated after a
count query; nvmlDeviceIsMigDeviceHandle returns a ctypes value (use bool()); drivers before R470
name MIG devices `MIG-GPU-<uuid>/<gi>/<ci>`; a driver may answer INVALID_ARGUMENT for one profile
constant in the middle of the range and still know later ones, so every constant is asked, up to
0x11 (3_SLICE_GFX), each with the v3 struct first (its CAPS_GFX bit marks +gfx profiles).

Profile IDs are per GPU (the RTX PRO 6000's differ from the 7-slice parts'), and one ID may print
under other names by board and driver (GB200 `1g.24gb` / `1g.23gb`): a live profile is matched to
the table by ID, keeps its printed name and takes the table's names as aliases. A GPU is matched by
PCI device ID, with the PCI subsystem ID or NVML name where one device ID covers two boards. A
profile constant or name this module does not know is recorded with a note, never an error.

Inside a virtual machine NVML reports virtualization mode VGPU (NVML_GPU_VIRTUALIZATION_MODE_VGPU,
"device is associated with vGPU inside virtual machine" in the NVML header) and a device named by
its vGPU type ("GRID A100D-2-20C" on older guest drivers, "NVIDIA A100D-2-20C" on newer ones;
the two prefixes are inferred from printouts, not documented). A MIG-backed type
(`<board>-<slices>-<GB>C[ME]`) is one instance of its MIG profile on the board's GPU; a
time-sliced type (`<board>-<GB>C`) is a share of a whole GPU, not MIG; a MIG-backed time-sliced
type (Blackwell `DC-1-2Q`: 2 GB of a 1g.24gb instance several VMs share) is time-sliced too. The
`DC` board prefix belongs to two boards (RTX PRO 6000 SE, RTX PRO 4500 SE): the PCI ID decides.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

import attrs
import pynvml

from mlperf_mig._text import printable
from mlperf_mig.errors import NameParseError
from mlperf_mig.registry.catalog import Catalog, default_catalog
from mlperf_mig.registry.model import (
    Gpu,
    Layout,
    Profile,
    ProfileValue,
    name_attributes,
    ordered_attributes,
)
from mlperf_mig.registry.names import mig_backed_share, parse_vgpu_type
from mlperf_mig.registry.nvml_state import GI_PROFILE_CAPS_GFX, NvmlModule, read_nvml_state

log = logging.getLogger(__name__)

_MIG_UUID_RE = re.compile(
    r"^MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.I
)
_LEGACY_MIG_UUID_RE = re.compile(r"^MIG-(?P<gpu>GPU-[0-9a-f-]+)/(?P<gi>\d+)/(?P<ci>\d+)$", re.I)
_GIB_TOLERANCE = 0.5  # nvidia-smi's GiB drifts by up to 0.25 between drivers
_VIRTUALIZATION_MODES = {
    pynvml.NVML_GPU_VIRTUALIZATION_MODE_NONE: "none",
    pynvml.NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH: "passthrough",
    pynvml.NVML_GPU_VIRTUALIZATION_MODE_VGPU: "vgpu",
    pynvml.NVML_GPU_VIRTUALIZATION_MODE_HOST_VGPU: "host-vgpu",
    pynvml.NVML_GPU_VIRTUALIZATION_MODE_HOST_VSGA: "host-vsga",
}
_GUEST_NAME_PREFIX_RE = re.compile(r"^(?:GRID|NVIDIA)\s+", re.I)
_TIME_SLICED_VGPU_RE = re.compile(
    r"^(?:grid_)?(?P<board>[a-z0-9]+)-(?P<framebuffer>\d+)[abcq]$", re.I
)
_MIG_BACKED_BOARD_RE = re.compile(r"^(?:grid_)?(?P<board>[a-z0-9]+)-\d+-", re.I)

# NVML_GPU_INSTANCE_PROFILE_* constants (NVIDIA/go-nvml `pkg/nvml/nvml.h`): the name without its
# prefix and the attributes each stands for, up to NVML_GPU_INSTANCE_PROFILE_COUNT = 0x12. Kept
# here, not read from pynvml, so that an older nvidia-ml-py still maps 0x0A-0x11. REV1 is the
# `+me` profile; 3_SLICE_GFX (0x11, "gfx + media capable", CUDA 13.2.1 header) has no known name
# suffix beyond +gfx. A constant not listed is recorded as `unknown 0x..`, never an error.
GI_PROFILE_CONSTANTS: dict[int, tuple[str, tuple[str, ...]]] = {
    0x00: ("1_SLICE", ()),
    0x01: ("2_SLICE", ()),
    0x02: ("3_SLICE", ()),
    0x03: ("4_SLICE", ()),
    0x04: ("7_SLICE", ()),
    0x05: ("8_SLICE", ()),
    0x06: ("6_SLICE", ()),
    0x07: ("1_SLICE_REV1", ("me",)),
    0x08: ("2_SLICE_REV1", ("me",)),
    0x09: ("1_SLICE_REV2", ()),
    0x0A: ("1_SLICE_GFX", ("gfx",)),
    0x0B: ("2_SLICE_GFX", ("gfx",)),
    0x0C: ("4_SLICE_GFX", ("gfx",)),
    0x0D: ("1_SLICE_NO_ME", ("no-me",)),
    0x0E: ("2_SLICE_NO_ME", ("no-me",)),
    0x0F: ("1_SLICE_ALL_ME", ("me.all",)),
    0x10: ("2_SLICE_ALL_ME", ("me.all",)),
    0x11: ("3_SLICE_GFX", ("gfx",)),
}


# --- records --------------------------------------------------------------------------------
@attrs.frozen(kw_only=True)
class MigUuid:
    """A parsed MIG device UUID: `MIG-<uuid>` (R470+) or legacy `MIG-GPU-<uuid>/<gi>/<ci>`."""

    text: str
    legacy: bool
    gpu_uuid: str | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


def parse_mig_uuid(text: str) -> MigUuid:
    """Parse either MIG UUID form; NameParseError for anything else."""
    legacy = _LEGACY_MIG_UUID_RE.match(text)
    if legacy:
        return MigUuid(
            text=text,
            legacy=True,
            gpu_uuid=legacy["gpu"],
            gpu_instance_id=int(legacy["gi"]),
            compute_instance_id=int(legacy["ci"]),
        )
    if _MIG_UUID_RE.match(text):
        return MigUuid(text=text, legacy=False)
    raise NameParseError(
        f"{text!r} is not a MIG device UUID; expected MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx "
        "(driver R470+) or MIG-GPU-<gpu uuid>/<gpu instance>/<compute instance> (older drivers); "
        "copy it from `nvidia-smi -L`"
    )


@attrs.frozen(kw_only=True)
class MigDevice:
    """One live MIG device (a compute instance inside a GPU instance)."""

    uuid: str
    gpu_instance_id: int
    compute_instance_id: int
    profile: Profile
    placement_start: int | None
    placement_size: int | None
    memory_mib: int
    sms: int

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data."""
        data = attrs.asdict(self, recurse=False)
        data["profile"] = self.profile.name
        return data


@attrs.frozen(kw_only=True)
class VgpuDevice:
    """The vGPU a virtual machine sees: one MIG instance of its parent GPU, or a time-sliced share."""

    type_name: str  # "A100D-2-20C", without the "GRID "/"NVIDIA " prefix NVML puts before it
    uuid: str
    time_sliced: bool
    parent_gpu: Gpu | None
    profile: Profile | None  # the MIG profile it stands for; None when time-sliced or unknown
    # A MIG-backed time-sliced type (DC-1-2Q): the MIG profile whose one instance several VMs
    # share; time_sliced is True and profile None, since the VM does not own the instance.
    shared_instance: Profile | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data; GPU and profile by name."""
        return {
            "type_name": self.type_name,
            "uuid": self.uuid,
            "time_sliced": self.time_sliced,
            "parent_gpu": self.parent_gpu.name if self.parent_gpu else None,
            "profile": self.profile.name if self.profile else None,
            "shared_instance": self.shared_instance.name if self.shared_instance else None,
        }


@attrs.frozen(kw_only=True)
class GpuState:
    """One physical GPU as NVML sees it, matched against the catalog; or, with `error`, a GPU
    that could not be read (lost), with what it answered before."""

    index: int
    name: str  # "" where a lost GPU did not say
    uuid: str  # "" where a lost GPU did not say
    pci_device_id: int | None  # None where a lost GPU did not say
    memory_mib: int | None  # None where a lost GPU did not say
    mig_current: bool | None
    mig_pending: bool | None
    catalog_gpu: Gpu | None
    shipped_gpu: Gpu | None
    mig_devices: tuple[MigDevice, ...] = attrs.field(converter=tuple[MigDevice, ...])
    disagreements: tuple[str, ...] = attrs.field(converter=tuple[str, ...])
    virtualization: str | None = (
        None  # "none", "passthrough", "vgpu" (a VM guest), ...; None: unknown
    )
    vgpu: VgpuDevice | None = None  # set inside a VM whose GPU is a vGPU
    error: str | None = None  # GPU_IS_LOST, UNKNOWN or NOT_FOUND: the GPU could not be read
    failed_query: str | None = None  # the NVML function that answered `error`

    @property
    def lost(self) -> bool:
        """True for a GPU that answered GPU_IS_LOST, UNKNOWN or NOT_FOUND (nothing runs on it)."""
        return self.error is not None

    @property
    def label(self) -> str:
        """'GPU 1 (NVIDIA H100 80GB HBM3)', or 'GPU 1' where a lost GPU gave no name."""
        return f"GPU {self.index} ({self.name})" if self.name else f"GPU {self.index}"

    @property
    def problem(self) -> str:
        """For a lost GPU, what NVML answered to which query and the fix, in one sentence; ""
        for a healthy one."""
        if self.error is None:
            return ""
        return (
            f"{self.label} {lost_answer(self.error, self.failed_query or '')}, so nothing can "
            f"run on it; fix: {lost_fix(self.index)}"
        )

    @property
    def mig_vgpu(self) -> bool:
        """True inside a VM whose GPU is a MIG-backed vGPU of a known profile."""
        return self.vgpu is not None and self.vgpu.profile is not None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data; the GPU records by name."""
        layout = self.layout()
        return {
            "index": self.index,
            "name": self.name,
            "uuid": self.uuid or None,
            "pci_device_id": None if self.pci_device_id is None else f"0x{self.pci_device_id:08X}",
            "memory_mib": self.memory_mib,
            "error": self.error,
            "failed_query": self.failed_query,
            "problem": self.problem or None,
            "virtualization": self.virtualization,
            "vgpu": self.vgpu.to_dict() if self.vgpu else None,
            "mig_current": self.mig_current,
            "mig_pending": self.mig_pending,
            "catalog_gpu": self.catalog_gpu.name if self.catalog_gpu else None,
            "shipped_gpu": self.shipped_gpu.name if self.shipped_gpu else None,
            "layout": str(layout) if layout else None,
            "mig_devices": [d.to_dict() for d in self.mig_devices],
            "disagreements": list(self.disagreements),
        }

    def layout(self) -> Layout | None:
        """The layout the live GPU instances form (one entry per GPU instance), or None."""
        if self.catalog_gpu is None or not self.mig_devices:
            return None
        per_instance = {d.gpu_instance_id: d.profile for d in self.mig_devices}
        return Layout(gpu=self.catalog_gpu, profiles=tuple(per_instance.values()))


@attrs.frozen(kw_only=True)
class Detection:
    """What NVML reported: the GPUs, or a message that says why there are none."""

    gpus: tuple[GpuState, ...] = attrs.field(converter=tuple[GpuState, ...])
    message: str = ""
    driver_version: str | None = None
    cuda_driver_version: int | None = None  # NVML's encoding: 12040 is CUDA 12.4
    nvml_version: str | None = None

    @property
    def cuda_version(self) -> tuple[int, int] | None:
        """The CUDA version the driver supports, (12, 4), or None where NVML did not say."""
        if self.cuda_driver_version is None:
            return None
        return self.cuda_driver_version // 1000, self.cuda_driver_version % 1000 // 10

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data."""
        return {
            "message": self.message,
            "driver_version": self.driver_version,
            "cuda_driver_version": self.cuda_driver_version,
            "nvml_version": self.nvml_version,
            "gpus": [g.to_dict() for g in self.gpus],
        }


# --- matching against the catalog -----------------------------------------------------------
def detect(source: NvmlModule | None = None, *, catalog: Catalog | None = None) -> Detection:
    """Find the GPUs and live MIG devices. `source` replaces `pynvml` (tests pass RecordedNvml).

    Each GPU's discovery notes (`disagreements`) are logged as warnings here, for callers that
    show nothing else of them (a run), and a lost GPU's problem at info level (a run that asks
    for it is refused with it); `detect` and `doctor` print them themselves, once, from
    `detection_from_state`, which logs nothing."""
    state = read_nvml_state(pynvml if source is None else source)
    detection = detection_from_state(state, catalog or default_catalog())
    for gpu in detection.gpus:
        if gpu.lost:  # a run that asks for it is refused saying so; one that does not, runs
            log.info("%s", gpu.problem)
        for note in gpu.disagreements:
            log.warning("GPU %d (%s): %s", gpu.index, gpu.name, note)
    return detection


def detection_from_state(state: Mapping[str, Any], catalog: Catalog) -> Detection:
    """Interpret a state written by `read_nvml_state` (its text shown escaped: `printable`)."""
    state = _printable_state(state)
    if state.get("init_error"):
        return Detection(gpus=(), message=_no_driver_message(state["init_error"]))
    gpus = tuple(_gpu_state(i, gpu, catalog) for i, gpu in enumerate(state["gpus"]))
    message = "" if gpus else "the NVIDIA driver is loaded but reports no GPU"
    return Detection(
        gpus=gpus,
        message=message,
        driver_version=state.get("driver_version"),
        cuda_driver_version=state.get("cuda_driver_version"),
        nvml_version=state.get("nvml_version"),
    )


def _printable_state(value: Any) -> Any:
    """The state with every string passed through `printable` (a GPU name with an escape
    sequence in a replay, or from a misbehaving driver, is shown, never run by a terminal)."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, Mapping):
        return {printable(k): _printable_state(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_printable_state(v) for v in value]
    return value


# What each error a lost GPU answered means.
_LOST_MEANING = {
    "GPU_IS_LOST": "it fell off the bus or the driver lost it",
    "UNKNOWN": "an internal driver error",
    "NOT_FOUND": "it went away after NVML counted it",
}


def lost_answer(error: str, query: str) -> str:
    """'answered GPU_IS_LOST to nvmlDeviceGetMemoryInfo (it fell off the bus or the driver lost
    it)': what a lost GPU said."""
    return f"answered {error} to {query or 'a query'} ({_LOST_MEANING.get(error, 'unreadable')})"


def lost_fix(index: int) -> str:
    """How to get a lost GPU back."""
    return (
        f"look for an Xid error in `dmesg` and at `nvidia-smi -i {index}`, then reset the GPU "
        f"as root (`nvidia-smi -r -i {index}`) or reboot"
    )


def _lost_gpu_state(index: int, gpu: Mapping[str, Any]) -> GpuState:
    """A GPU recorded in an error state: what it answered before, and the error."""
    pci = gpu.get("pci_device_id")
    memory = gpu.get("memory_total_bytes")
    return GpuState(
        index=index,
        name=gpu.get("name") or "",
        uuid=gpu.get("uuid") or "",
        pci_device_id=None if pci is None else int(pci, 16),
        memory_mib=None if memory is None else memory // 2**20,
        mig_current=None,
        mig_pending=None,
        catalog_gpu=None,
        shipped_gpu=None,
        mig_devices=(),
        disagreements=(),
        error=gpu["error"],
        failed_query=gpu.get("failed_query"),
    )


def _no_driver_message(error: str) -> str:
    return (
        f"no NVIDIA GPU is usable here: NVML could not start ({error.replace('_', ' ').lower()}); "
        "install or load the NVIDIA driver, or run on a machine with an NVIDIA GPU"
    )


def _gpu_state(index: int, gpu: Mapping[str, Any], catalog: Catalog) -> GpuState:
    if gpu.get("error"):
        return _lost_gpu_state(index, gpu)
    pci = int(gpu["pci_device_id"], 16)
    subsystem = int(gpu.get("pci_subsystem_id", "0x0"), 16)
    shipped = catalog.by_pci_device_id(pci, subsystem, gpu["name"])
    if shipped is None and not any(pci in g.pci_device_ids for g in catalog):
        shipped = catalog.find(gpu["name"])  # a device ID the catalog lacks: the name decides
    mode = gpu.get("mig_mode")
    notes: list[str] = []
    effective = _effective_gpu(gpu, shipped, notes) if mode is not None else shipped
    virtualization = _VIRTUALIZATION_MODES.get(gpu.get("virtualization_mode"))
    vgpu = _guest_vgpu(gpu, shipped, catalog, notes) if virtualization == "vgpu" else None
    if vgpu is not None and vgpu.parent_gpu is not None:
        effective = vgpu.parent_gpu
    return GpuState(
        virtualization=virtualization,
        vgpu=vgpu,
        index=index,
        name=gpu["name"],
        uuid=gpu["uuid"],
        pci_device_id=pci,
        memory_mib=gpu["memory_total_bytes"] // 2**20,
        mig_current=None if mode is None else bool(mode[0]),
        mig_pending=None if mode is None else bool(mode[1]),
        catalog_gpu=effective,
        shipped_gpu=shipped,
        mig_devices=_mig_devices(gpu, effective, notes) if effective else (),
        disagreements=notes,
    )


def _guest_vgpu(
    gpu: Mapping[str, Any], shipped: Gpu | None, catalog: Catalog, notes: list[str]
) -> VgpuDevice:
    """The vGPU a VM guest sees, from the type name NVML gives as the device name."""
    type_name = _GUEST_NAME_PREFIX_RE.sub("", gpu["name"]).strip()
    sliced = _TIME_SLICED_VGPU_RE.match(type_name)
    if sliced is not None:
        return VgpuDevice(
            type_name=type_name,
            uuid=gpu["uuid"],
            time_sliced=True,
            parent_gpu=_board_parent(sliced["board"], shipped, catalog) or shipped,
            profile=None,
        )
    board = _MIG_BACKED_BOARD_RE.match(type_name)
    # A board prefix two GPUs share (Blackwell `DC`: RTX PRO 6000 SE and 4500 SE) is resolved
    # by the PCI device ID: the guest's GPU passes the catalog GPU it matched.
    by_pci = _board_parent(board["board"], shipped, catalog) if board else None
    share = mig_backed_share(type_name, by_pci, catalog=catalog)
    if share is not None:
        return VgpuDevice(
            type_name=type_name,
            uuid=gpu["uuid"],
            time_sliced=True,
            parent_gpu=share[0],
            profile=None,
            shared_instance=share[1],
        )
    try:
        parent, profile = parse_vgpu_type(type_name, by_pci, catalog=catalog)
    except NameParseError as exc:
        notes.append(
            f"the vGPU {gpu['name']!r} is neither a known MIG-backed nor a time-sliced "
            f"vGPU type ({exc})"
        )
        return VgpuDevice(
            type_name=type_name, uuid=gpu["uuid"], time_sliced=False, parent_gpu=None, profile=None
        )
    if shipped is not None and shipped.name != parent.name:
        notes.append(
            f"the vGPU type {type_name} belongs to {parent.name} but PCI ID "
            f"{gpu['pci_device_id']} is {shipped.name}; the vGPU type is used"
        )
    return VgpuDevice(
        type_name=type_name, uuid=gpu["uuid"], time_sliced=False, parent_gpu=parent, profile=profile
    )


def _board_parent(board: str, shipped: Gpu | None, catalog: Catalog) -> Gpu | None:
    """The GPU a vGPU board prefix names: the PCI-matched GPU where it carries the prefix, else
    the only catalog GPU that does; None when none or several do."""
    board = board.lower()
    if shipped is not None and board in (p.lower() for p in shipped.vgpu_prefixes):
        return shipped
    boards = [g for g in catalog if board in (p.lower() for p in g.vgpu_prefixes)]
    return boards[0] if len(boards) == 1 else None


def no_profiles_answer(gpu: Mapping[str, Any]) -> str:
    """What NVML answered when it listed no MIG profile, with the MIG mode it reported: 'every
    MIG profile query answered NOT_SUPPORTED with MIG on'."""
    error = gpu.get("gi_profile_error")
    known = isinstance(error, str) and re.fullmatch(r"[A-Z_]{1,40}", error) is not None
    answered = (
        f"every MIG profile query answered {error}" if known else "NVML listed no MIG profile"
    )
    mode = gpu.get("mig_mode")
    if not isinstance(mode, list) or not mode or mode[0] not in (0, 1):
        return answered
    return f"{answered} with MIG {'on' if mode[0] == 1 else 'off'}"


def _effective_gpu(gpu: Mapping[str, Any], shipped: Gpu | None, notes: list[str]) -> Gpu | None:
    live = list(gpu.get("gi_profiles", []))
    if shipped is None:
        return _gpu_from_live(gpu, live, notes)
    if not live:
        notes.append(f"{no_profiles_answer(gpu)}; using the shipped table")
        return shipped
    merged = [_merge_profile(entry, shipped, notes) for entry in live]
    live_ids = {entry["id"] for entry in live}
    for profile in shipped.profiles:
        if profile.profile_id not in live_ids:
            notes.append(
                f"shipped profile {profile.name} (ID {profile.profile_id}) is not offered "
                "by this driver; dropped"
            )
    return attrs.evolve(
        shipped, profiles=_without_clashing_aliases([p for p in merged if p is not None])
    )


def _without_clashing_aliases(profiles: list[Profile]) -> tuple[Profile, ...]:
    """Drop a table name kept as an alias where another live profile prints that name (a driver
    that renamed profiles across IDs): the printed names win, every name stays unique."""
    printed = {p.name.lower() for p in profiles}
    seen: set[str] = set()
    kept = []
    for profile in profiles:
        aliases = []
        for alias in profile.aliases:
            if alias.lower() not in printed and alias.lower() not in seen:
                aliases.append(alias)
                seen.add(alias.lower())
        kept.append(attrs.evolve(profile, aliases=tuple(aliases)))
    return tuple(kept)


def _live_name(entry: Mapping[str, Any]) -> str:
    return entry["name"].removeprefix("MIG ").strip()


def _live_placements(entry: Mapping[str, Any]) -> tuple[tuple[int, ...], int] | None:
    placements = entry.get("placements")
    if not placements:
        return None
    return tuple(sorted(start for start, _ in placements)), placements[0][1]


def _merge_profile(entry: Mapping[str, Any], shipped: Gpu, notes: list[str]) -> Profile | None:
    table = shipped.profile_by_id(entry["id"])
    placements = _live_placements(entry)
    if table is None:
        notes.append(
            f"live profile {_live_name(entry)} (ID {entry['id']}) is not in the shipped "
            "table; added from live data"
        )
        return _profile_from_live(entry, placements, notes)
    starts, size = placements or (table.placement_starts, table.placement_size)
    name = _live_name(entry)
    max_instances = entry["instanceCount"]
    if not shipped.nvml_instance_counts_reliable and max_instances != table.max_instances:
        notes.append(
            f"{table.name}: NVML reports max {max_instances} instances, a known NVML bug "
            f"on this GPU; kept the shipped {table.max_instances}"
        )
        max_instances = table.max_instances
    live = Profile(
        name=name,
        profile_id=entry["id"],
        memory_slices=size,
        compute_slices=entry["sliceCount"],
        max_instances=max_instances,
        placement_starts=starts,
        placement_size=size,
        provenance="live",
        sms=entry["multiprocessorCount"],
        memory_gib=round(entry["memorySizeMB"] / 1024, 2),
        copy_engines=entry["copyEngineCount"],
        decoders=entry["decoderCount"],
        encoders=entry["encoderCount"],
        jpeg_decoders=entry["jpegCount"],
        ofa=entry["ofaCount"],
        nvml_constant=_constant_name(entry["constant"], name, notes),
        inferred_fields=() if placements else ("placement_starts", "placement_size"),
        note=table.note,
        # the same ID may print under another name (GB200 early boards, GB300 on driver 61x):
        # the table's names stay usable as aliases of the live one
        aliases=tuple(n for n in table.names if n.lower() != name.lower()),
        attributes=_live_attributes(entry, name, notes),
    )
    notes.extend(_differences(table, live))
    return live


_COMPARED = (
    "name",
    "nvml_constant",
    "compute_slices",
    "memory_slices",
    "max_instances",
    "placement_starts",
    "placement_size",
    "sms",
    "copy_engines",
    "decoders",
    "encoders",
    "jpeg_decoders",
    "ofa",
)


def profile_differences(
    table: Profile, live: Profile
) -> list[tuple[str, ProfileValue, ProfileValue]]:
    """(field, shipped value, live value) for every field of one profile where live NVML data
    differs from the shipped table; memory only beyond the GiB drift between drivers."""
    found: list[tuple[str, ProfileValue, ProfileValue]] = [
        (field, getattr(table, field), getattr(live, field))
        for field in _COMPARED
        if getattr(table, field) is not None
        and getattr(table, field) != getattr(live, field)
        and not (field == "name" and live.name.lower() in (n.lower() for n in table.names))
    ]
    if (
        table.memory_gib is not None
        and live.memory_gib is not None
        and abs(table.memory_gib - live.memory_gib) > _GIB_TOLERANCE
    ):
        found.append(("memory_gib", table.memory_gib, live.memory_gib))
    return found


def _differences(table: Profile, live: Profile) -> list[str]:
    return [
        f"{table.name}: memory is {theirs} GiB live but {ours} GiB in the shipped table; live "
        "value used"
        if field == "memory_gib"
        else f"{table.name}: {field} is {theirs!r} live but {ours!r} in the shipped table; live value used"
        for field, ours, theirs in profile_differences(table, live)
    ]


def _profile_from_live(
    entry: Mapping[str, Any], placements: tuple[tuple[int, ...], int] | None, notes: list[str]
) -> Profile | None:
    if placements is None:
        notes.append(f"live profile {_live_name(entry)} has no readable placements; left out")
        return None
    starts, size = placements
    name = _live_name(entry)
    return Profile(
        name=name,
        profile_id=entry["id"],
        memory_slices=size,
        compute_slices=entry["sliceCount"],
        max_instances=entry["instanceCount"],
        placement_starts=starts,
        placement_size=size,
        provenance="live",
        sms=entry["multiprocessorCount"],
        memory_gib=round(entry["memorySizeMB"] / 1024, 2),
        copy_engines=entry["copyEngineCount"],
        decoders=entry["decoderCount"],
        encoders=entry["encoderCount"],
        jpeg_decoders=entry["jpegCount"],
        ofa=entry["ofaCount"],
        nvml_constant=_constant_name(entry["constant"], name, notes),
        attributes=_live_attributes(entry, name, notes),
    )


def _constant_name(constant: int, name: str, notes: list[str]) -> str:
    """`1_SLICE_REV2` for constant 9 (NVML_GPU_INSTANCE_PROFILE_* without its prefix); a
    constant this table does not know is kept as `unknown 0x12` and noted, not refused."""
    known = GI_PROFILE_CONSTANTS.get(constant)
    if known is None:
        notes.append(
            f"live profile {name} has NVML profile constant 0x{constant:02X}, unknown to "
            "mlperf-mig (it knows 0x00-0x11); recorded, attributes taken from its name"
        )
        return f"unknown 0x{constant:02X}"
    return known[0]


def _live_attributes(entry: Mapping[str, Any], name: str, notes: list[str]) -> tuple[str, ...]:
    """A live profile's attributes: from its name (`+me`, `-me`, `+me.all`, `+gfx`), or from its
    NVML constant where the name does not parse; `gfx` also from the v3 capability bit CAPS_GFX."""
    attributes = name_attributes(name)
    if attributes is None:
        known = GI_PROFILE_CONSTANTS.get(entry["constant"])
        attributes = known[1] if known else ()
        notes.append(
            f"live profile name {name!r} is not <N>g.<GB>gb[+me|-me|+me.all|+gfx]; kept "
            f"as printed, attributes {list(attributes) or 'none'} from its NVML constant"
        )
    if (entry.get("capabilities") or 0) & GI_PROFILE_CAPS_GFX:
        attributes = (*attributes, "gfx")
    return ordered_attributes(attributes)


def _gpu_from_live(
    gpu: Mapping[str, Any], live: list[Mapping[str, Any]], notes: list[str]
) -> Gpu | None:
    name = re.sub(r"^NVIDIA\s+", "", gpu["name"])
    profiles = [p for p in (_profile_from_live(e, _live_placements(e), notes) for e in live) if p]
    if not profiles:
        notes.append(
            f"{name} (PCI {gpu['pci_device_id']}) is not in the catalog and NVML gives no "
            "MIG profiles with placements; add a data file for it (see systems/gpus/)"
        )
        return None
    notes.append(
        f"{name} (PCI {gpu['pci_device_id']}) is not in the catalog; its record was built "
        "from live NVML data (add a data file to keep it)"
    )
    return Gpu(
        name=name,
        nvml_names=(gpu["name"],),
        pci_device_ids=(int(gpu["pci_device_id"], 16),),
        memory_slices=max(max(p.placement_starts) + p.placement_size for p in profiles),
        compute_slices=max(p.compute_slices for p in profiles),
        profiles=tuple(profiles),
        provenance="live",
        sources=("live NVML data",),
    )


def _mig_devices(gpu: Mapping[str, Any], board: Gpu, notes: list[str]) -> tuple[MigDevice, ...]:
    instances = {g["id"]: g for g in gpu.get("gpu_instances", [])}
    devices = []
    for entry in gpu.get("mig_devices", []):
        instance = instances.get(entry["gpu_instance_id"])
        profile = _device_profile(entry, instance, board)
        if profile is None:
            notes.append(f"MIG device {entry['uuid']} matches no profile of {board.name}; left out")
            continue
        _check_legacy_uuid(entry, notes)
        devices.append(
            MigDevice(
                uuid=entry["uuid"],
                gpu_instance_id=entry["gpu_instance_id"],
                compute_instance_id=entry["compute_instance_id"],
                profile=profile,
                placement_start=instance["start"] if instance else None,
                placement_size=instance["size"] if instance else None,
                memory_mib=entry["memorySizeMB"],
                sms=entry["multiprocessorCount"],
            )
        )
    if gpu.get("gpu_instance_error"):
        notes.append(
            f"GPU-instance details need more privileges ({gpu['gpu_instance_error']}); "
            "profiles matched by slice count and memory, placements unknown"
        )
    return tuple(devices)


def _device_profile(
    entry: Mapping[str, Any], instance: Mapping[str, Any] | None, board: Gpu
) -> Profile | None:
    if instance is not None:
        return board.profile_by_id(instance["profile_id"])
    candidates = [p for p in board.profiles if p.compute_slices == entry["gpuInstanceSliceCount"]]
    if not candidates:
        return None
    memory_gib = entry["memorySizeMB"] / 1024
    return min(
        candidates,
        key=lambda p: (
            abs((p.memory_gib or 0) - memory_gib),
            (p.ofa or 0) != entry["sharedOfaCount"],
            (p.decoders or 0) != entry["sharedDecoderCount"],
            not p.plain,
        ),
    )


def _check_legacy_uuid(entry: Mapping[str, Any], notes: list[str]) -> None:
    try:
        uuid = parse_mig_uuid(entry["uuid"])
    except NameParseError as exc:
        notes.append(str(exc))
        return
    ids = (entry["gpu_instance_id"], entry["compute_instance_id"])
    if uuid.legacy and (uuid.gpu_instance_id, uuid.compute_instance_id) != ids:
        notes.append(
            f"legacy MIG UUID {uuid.text} names GPU instance {uuid.gpu_instance_id}/"
            f"compute instance {uuid.compute_instance_id} but NVML says {ids[0]}/{ids[1]}"
        )
