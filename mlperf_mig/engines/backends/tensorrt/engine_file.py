"""The TensorRT engine file: a header saying where the engine was built, then TensorRT's serialized engine.

A serialized TensorRT engine only runs with the TensorRT version that built it, and its kernels were chosen
for the device it was built on: an engine built on a 7g instance runs on a 1g instance but with
tactics tuned for the wrong slice. The header records the GPU, the MIG profile, the compute
capability and the TensorRT version so that loading can refuse an engine from elsewhere before
TensorRT sees it.

Layout: MAGIC, the header length as 8 little-endian bytes, the header as UTF-8 JSON, the serialized engine.
Reading the header needs neither TensorRT nor a GPU.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

import attrs

from mlperf_mig.engines.backends.tensorrt.cuda import DeviceIdentity
from mlperf_mig.errors import EngineBuildError, EngineMismatchError

MAGIC = b"MLPERF-MIG-TRT\n"
FORMAT_VERSION = 1
_LENGTH = struct.Struct("<Q")
_MAX_HEADER_BYTES = 1 << 20


@attrs.frozen(kw_only=True)
class ShapeRange:
    """The min / opt / max shapes of one input in one optimization profile."""

    min: tuple[int, ...] = attrs.field(converter=tuple[int, ...])
    opt: tuple[int, ...] = attrs.field(converter=tuple[int, ...])
    max: tuple[int, ...] = attrs.field(converter=tuple[int, ...])

    def contains(self, shape: tuple[int, ...]) -> bool:
        return len(shape) == len(self.min) and all(
            lo <= d <= hi for lo, d, hi in zip(self.min, shape, self.max)
        )

    def to_dict(self) -> dict[str, list[int]]:
        return {"min": list(self.min), "opt": list(self.opt), "max": list(self.max)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ShapeRange:
        return cls(min=data["min"], opt=data["opt"], max=data["max"])


Profile = dict[str, ShapeRange]  # input name -> shapes, one per optimization profile


@attrs.frozen(kw_only=True)
class EngineHeader:
    """Where and for what an engine was built."""

    format_version: int = FORMAT_VERSION
    tensorrt_version: str
    gpu: str
    mig_profile: str | None
    device_name: str
    compute_capability: str
    benchmark: str
    precision: str
    cache_key: str | None = None
    profiles: tuple[Profile, ...] = ()

    @classmethod
    def for_device(
        cls,
        device: DeviceIdentity,
        *,
        tensorrt_version: str,
        benchmark: str,
        precision: str,
        cache_key: str | None,
        profiles: tuple[Profile, ...],
    ) -> EngineHeader:
        return cls(
            tensorrt_version=tensorrt_version,
            gpu=device.gpu,
            mig_profile=device.mig_profile,
            device_name=device.name,
            compute_capability=device.compute_capability,
            benchmark=benchmark,
            precision=precision,
            cache_key=cache_key,
            profiles=profiles,
        )

    def to_dict(self) -> dict[str, Any]:
        data = attrs.asdict(self, recurse=False)
        data["profiles"] = [
            {name: shapes.to_dict() for name, shapes in profile.items()}
            for profile in self.profiles
        ]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EngineHeader:
        fields = {f.name for f in attrs.fields(cls)}
        values = {k: v for k, v in data.items() if k in fields}
        values["profiles"] = tuple(
            {name: ShapeRange.from_dict(shapes) for name, shapes in profile.items()}
            for profile in data.get("profiles", ())
        )
        return cls(**values)

    def mismatches(self, device: DeviceIdentity, tensorrt_version: str) -> tuple[str, ...]:
        """What differs between the build and this process, each as 'what: built X, here Y'."""
        found = []
        if self.gpu != device.gpu:
            found.append(f"GPU: built on {self.gpu}, this process has {device.gpu}")
        if self.mig_profile != device.mig_profile:
            found.append(
                f"MIG profile: built on {_profile_text(self.mig_profile)}, "
                f"this process has {_profile_text(device.mig_profile)}"
            )
        if self.compute_capability != device.compute_capability:
            found.append(
                f"compute capability: built for {self.compute_capability}, "
                f"this device has {device.compute_capability}"
            )
        if self.tensorrt_version != tensorrt_version:
            found.append(
                f"TensorRT: built with {self.tensorrt_version}, this process has {tensorrt_version}"
            )
        return tuple(found)

    def check_runs_here(
        self, device: DeviceIdentity, tensorrt_version: str, path: str | os.PathLike[str]
    ) -> None:
        """Raise EngineMismatchError unless the engine was built for this device and TensorRT."""
        found = self.mismatches(device, tensorrt_version)
        if found:
            raise EngineMismatchError(
                f"TensorRT engine {str(path)!r} was built elsewhere ({'; '.join(found)}); "
                "rebuild it on this device (delete the file or run `mlperf-mig build` inside "
                "the MIG instance it will run on)"
            )


def _profile_text(profile: str | None) -> str:
    return "the whole GPU" if profile is None else profile


def engine_file_prefix(header: EngineHeader) -> bytes:
    """What comes before the serialized engine in an engine file: MAGIC, header length, header JSON."""
    text = json.dumps(header.to_dict(), sort_keys=True).encode("utf-8")
    return MAGIC + _LENGTH.pack(len(text)) + text


def write_engine_file(
    path: str | os.PathLike[str], header: EngineHeader, serialized: bytes | memoryview
) -> Path:
    """Write header and serialized engine to `path` (the engine cache makes the write atomic).

    The serialized engine is written from TensorRT's own buffer: a BERT-Large engine is over a gigabyte and is
    not copied on the way.
    """
    destination = Path(path)
    with destination.open("wb") as handle:
        handle.write(engine_file_prefix(header))
        handle.write(serialized)
    return destination


def decode_engine_file(
    data: bytes, path: str | os.PathLike[str]
) -> tuple[EngineHeader, memoryview]:
    """Split engine-file bytes into header and serialized engine; EngineBuildError if they are not one."""
    where = str(path)
    if not data.startswith(MAGIC):
        raise EngineBuildError(
            f"{where!r} is not a mlperf-mig TensorRT engine file (no header); "
            "delete it and build the engine again"
        )
    start = len(MAGIC) + _LENGTH.size
    if len(data) < start:
        raise EngineBuildError(
            f"TensorRT engine file {where!r} is truncated; delete it and rebuild"
        )
    (length,) = _LENGTH.unpack_from(data, len(MAGIC))
    if length > _MAX_HEADER_BYTES or len(data) < start + length:
        raise EngineBuildError(
            f"TensorRT engine file {where!r} is truncated; delete it and rebuild"
        )
    try:
        header = EngineHeader.from_dict(json.loads(data[start : start + length]))
    except (ValueError, TypeError, KeyError) as exc:
        raise EngineBuildError(
            f"TensorRT engine file {where!r} has a corrupt header ({exc}); delete it and rebuild"
        ) from None
    if header.format_version != FORMAT_VERSION:
        raise EngineMismatchError(
            f"TensorRT engine file {where!r} has header format {header.format_version}, this "
            f"mlperf-mig reads format {FORMAT_VERSION}; rebuild the engine"
        )
    serialized = memoryview(data)[start + length :]
    if not serialized:
        raise EngineBuildError(
            f"TensorRT engine file {where!r} holds no serialized engine; delete it and rebuild"
        )
    return header, serialized


def read_engine_file(path: str | os.PathLike[str]) -> tuple[EngineHeader, memoryview]:
    """Read an engine file written by write_engine_file."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise EngineBuildError(
            f"cannot read TensorRT engine file {str(path)!r} ({exc.strerror or exc}); build it first"
        ) from None
    return decode_engine_file(data, path)
