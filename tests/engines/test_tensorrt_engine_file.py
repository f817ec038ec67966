"""The TensorRT engine file: header round trip, damaged files, and the refusal to load elsewhere."""

from __future__ import annotations

import json
import re
from pathlib import Path

import attrs
import pytest

from mlperf_mig.engines.backends.tensorrt.cuda import DeviceIdentity
from mlperf_mig.engines.backends.tensorrt.engine_file import (
    FORMAT_VERSION,
    MAGIC,
    EngineHeader,
    ShapeRange,
    engine_file_prefix,
    read_engine_file,
    write_engine_file,
)
from mlperf_mig.errors import EngineBuildError, EngineMismatchError

TRT_VERSION = "10.13.3.9"
PLAN = b"\x00serialized-plan\xff" * 8


@pytest.fixture(name="device")
def fixture_device() -> DeviceIdentity:
    return DeviceIdentity(
        name="NVIDIA H200 MIG 1g.18gb",
        gpu="H200",
        mig_profile="1g.18gb",
        uuid="MIG-2f1b7c2e-0d4e-5a7b-9c1d-3e5f7a9b1c2d",
        ordinal=0,
        compute_capability="9.0",
    )


@pytest.fixture(name="header")
def fixture_header(device: DeviceIdentity) -> EngineHeader:
    profile = {
        "input_tensor:0": ShapeRange(
            min=(1, 3, 224, 224), opt=(8, 3, 224, 224), max=(8, 3, 224, 224)
        )
    }
    return EngineHeader.for_device(
        device,
        tensorrt_version=TRT_VERSION,
        benchmark="resnet50",
        precision="int8",
        cache_key="0123456789abcdef0123",
        profiles=(profile,),
    )


def test_header_round_trips_through_a_file(tmp_path: Path, header: EngineHeader) -> None:
    """What write_engine_file stores, read_engine_file gives back, plan bytes included."""
    path = write_engine_file(tmp_path / "e.plan", header, PLAN)
    read_header, plan = read_engine_file(path)
    assert read_header == header
    assert bytes(plan) == PLAN


def test_header_records_the_build_device(header: EngineHeader) -> None:
    """The header names GPU, MIG profile, device name, compute capability and TensorRT version."""
    data = header.to_dict()
    assert (data["gpu"], data["mig_profile"], data["tensorrt_version"]) == (
        "H200",
        "1g.18gb",
        TRT_VERSION,
    )
    assert data["device_name"] == "NVIDIA H200 MIG 1g.18gb"
    assert data["compute_capability"] == "9.0"
    assert data["format_version"] == FORMAT_VERSION


def test_header_is_json(header: EngineHeader) -> None:
    """The header part of the file is plain JSON after the magic and an 8-byte length."""
    prefix = engine_file_prefix(header)
    assert prefix.startswith(MAGIC)
    text = prefix[len(MAGIC) + 8 :]
    assert json.loads(text)["profiles"][0]["input_tensor:0"]["max"] == [8, 3, 224, 224]


def test_file_without_header_is_refused(tmp_path: Path) -> None:
    """A raw TensorRT plan (or any other file) is not loaded."""
    path = tmp_path / "raw.plan"
    path.write_bytes(PLAN)
    with pytest.raises(EngineBuildError, match="not a mlperf-mig TensorRT engine file"):
        read_engine_file(path)


@pytest.mark.parametrize("keep", [len(MAGIC) + 3, len(MAGIC) + 8 + 10])
def test_truncated_file_is_refused(tmp_path: Path, header: EngineHeader, keep: int) -> None:
    """A file cut inside the length or the header says it is truncated."""
    path = write_engine_file(tmp_path / "e.plan", header, PLAN)
    path.write_bytes(path.read_bytes()[:keep])
    with pytest.raises(EngineBuildError, match="truncated"):
        read_engine_file(path)


def test_file_without_serialized_engine_is_refused(tmp_path: Path, header: EngineHeader) -> None:
    """A header with nothing after it is not an engine."""
    path = write_engine_file(tmp_path / "e.plan", header, b"")
    with pytest.raises(EngineBuildError, match="holds no serialized engine"):
        read_engine_file(path)


def test_corrupt_header_is_refused(tmp_path: Path, header: EngineHeader) -> None:
    """Garbage where the JSON header should be is reported as a corrupt header."""
    prefix = engine_file_prefix(header)
    body = prefix[len(MAGIC) + 8 :]
    path = tmp_path / "e.plan"
    path.write_bytes(prefix[: len(MAGIC) + 8] + b"{" * len(body) + PLAN)
    with pytest.raises(EngineBuildError, match="corrupt header"):
        read_engine_file(path)


def test_missing_file_says_build_it(tmp_path: Path) -> None:
    """A missing engine file raises EngineBuildError rather than OSError."""
    with pytest.raises(EngineBuildError, match="build it first"):
        read_engine_file(tmp_path / "absent.plan")


def test_other_header_format_is_a_mismatch(tmp_path: Path, header: EngineHeader) -> None:
    """A header from another format version asks for a rebuild."""
    path = write_engine_file(tmp_path / "e.plan", attrs.evolve(header, format_version=99), PLAN)
    with pytest.raises(EngineMismatchError, match="format 99"):
        read_engine_file(path)


def test_same_device_and_version_passes(header: EngineHeader, device: DeviceIdentity) -> None:
    """The engine loads where it was built."""
    assert header.mismatches(device, TRT_VERSION) == ()
    header.check_runs_here(device, TRT_VERSION, "e.plan")


def test_other_mig_profile_is_refused(header: EngineHeader, device: DeviceIdentity) -> None:
    """An engine built on a 1g instance is refused on a 3g instance of the same GPU."""
    other = attrs.evolve(device, name="NVIDIA H200 MIG 3g.71gb", mig_profile="3g.71gb")
    with pytest.raises(
        EngineMismatchError,
        match=re.escape("MIG profile: built on 1g.18gb, this process has 3g.71gb"),
    ):
        header.check_runs_here(other, TRT_VERSION, "e.plan")


def test_whole_gpu_is_not_a_mig_profile(header: EngineHeader, device: DeviceIdentity) -> None:
    """An engine built in a MIG instance is refused on the whole GPU, and the message says so."""
    whole = attrs.evolve(device, name="NVIDIA H200", mig_profile=None)
    with pytest.raises(EngineMismatchError, match="this process has the whole GPU"):
        header.check_runs_here(whole, TRT_VERSION, "e.plan")


def test_other_gpu_is_refused(header: EngineHeader, device: DeviceIdentity) -> None:
    """An engine built on an H200 is refused on an A100, with both names in the message."""
    a100 = attrs.evolve(
        device, gpu="A100-SXM4-80GB", mig_profile="1g.10gb", compute_capability="8.0"
    )
    found = header.mismatches(a100, TRT_VERSION)
    assert any("built on H200, this process has A100-SXM4-80GB" in f for f in found)
    assert any("compute capability" in f for f in found)


def test_other_tensorrt_version_is_refused(header: EngineHeader, device: DeviceIdentity) -> None:
    """A plan only runs with the TensorRT version that built it."""
    with pytest.raises(
        EngineMismatchError, match=re.escape("built with 10.13.3.9, this process has 11.0.0")
    ):
        header.check_runs_here(device, "11.0.0", "/cache/e.plan")


def test_mismatch_message_is_one_line_and_says_rebuild(
    header: EngineHeader, device: DeviceIdentity
) -> None:
    """The CLI prints the message as one line; it names the file and how to fix it."""
    other = attrs.evolve(device, gpu="H100", mig_profile=None)
    with pytest.raises(EngineMismatchError) as excinfo:
        header.check_runs_here(other, "11.0.0", "/cache/e.plan")
    message = str(excinfo.value)
    assert "\n" not in message
    assert "/cache/e.plan" in message
    assert "rebuild" in message


def test_shape_range_contains() -> None:
    """A shape fits a range when every axis lies between min and max."""
    shapes = ShapeRange(min=(1, 384), opt=(16, 384), max=(16, 384))
    assert shapes.contains((16, 384))
    assert shapes.contains((1, 384))
    assert not shapes.contains((17, 384))
    assert not shapes.contains((4, 128))
    assert not shapes.contains((4,))
