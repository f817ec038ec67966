"""Engine cache: reuse, rebuild of damaged or stale files, stamps of verified files, cache folder
choice, atomic writes."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from mlperf_mig.engines import EngineSpec, build_engine, cache, cache_root, resolve_spec
from mlperf_mig.engines.cache import CACHE_ENV, sidecar_path
from mlperf_mig.workloads import get_workload


@pytest.fixture(name="spec")
def fixture_spec(cache_dir: Path) -> EngineSpec:
    """A tiny ResNet50 engine spec for ONNX Runtime on the CPU."""
    return resolve_spec(
        get_workload("resnet50"), backend="onnxruntime", variant="tiny", cache_dir=cache_dir
    )


def test_first_build_builds(spec: EngineSpec, cache_dir: Path) -> None:
    """An empty cache builds the engine and says so."""
    built = build_engine(spec, cache_dir)
    assert not built.reused and built.path.is_file() and sidecar_path(built.path).is_file()


def test_second_build_is_reused(spec: EngineSpec, cache_dir: Path) -> None:
    """Building the same spec again reuses the cached file untouched."""
    first = build_engine(spec, cache_dir)
    mtime = first.path.stat().st_mtime_ns
    second = build_engine(spec, cache_dir)
    assert second.reused and second.path == first.path
    assert second.path.stat().st_mtime_ns == mtime


def test_corrupted_engine_is_rebuilt(spec: EngineSpec, cache_dir: Path) -> None:
    """A flipped byte in the engine fails the checksum, and the engine is built again."""
    path = build_engine(spec, cache_dir).path
    original = path.read_bytes()
    damaged = bytearray(original)
    damaged[len(damaged) // 2] ^= 0xFF
    path.write_bytes(bytes(damaged))
    rebuilt = build_engine(spec, cache_dir)
    assert not rebuilt.reused and rebuilt.path.read_bytes() == original


def test_truncated_engine_is_rebuilt(spec: EngineSpec, cache_dir: Path) -> None:
    """A truncated engine file is detected by its size and built again."""
    path = build_engine(spec, cache_dir).path
    path.write_bytes(path.read_bytes()[:100])
    assert not build_engine(spec, cache_dir).reused


def test_a_folder_where_the_engine_belongs_is_one_clear_error(
    spec: EngineSpec, cache_dir: Path
) -> None:
    """A folder in the cache at the engine's path is refused with the path and the fix, not deleted."""
    from mlperf_mig.errors import OutputDirError

    path = build_engine(spec, cache_dir).path
    path.unlink()
    path.mkdir()
    with pytest.raises(OutputDirError, match=r"holds a folder where the file .* belongs; remove"):
        build_engine(spec, cache_dir)
    assert path.is_dir()


def test_engine_without_checksum_is_rebuilt(spec: EngineSpec, cache_dir: Path) -> None:
    """An engine whose sidecar is missing is never trusted."""
    path = build_engine(spec, cache_dir).path
    sidecar_path(path).unlink()
    assert not build_engine(spec, cache_dir).reused


def test_engine_of_another_backend_version_is_rebuilt(spec: EngineSpec, cache_dir: Path) -> None:
    """A cached engine recorded for another backend version is built again."""
    path = build_engine(spec, cache_dir).path
    meta = json.loads(sidecar_path(path).read_text())
    meta["backend_version"] = "0.0.1"
    sidecar_path(path).write_text(json.dumps(meta))
    assert not build_engine(spec, cache_dir).reused


def test_deleted_generated_model_is_regenerated(spec: EngineSpec, cache_dir: Path) -> None:
    """A build after the generated ONNX was deleted regenerates the same graph."""
    for onnx_file in (cache_dir / "models").glob("*.onnx"):
        onnx_file.unlink()
    assert not build_engine(spec, cache_dir).reused


def test_no_temporary_files_are_left(spec: EngineSpec, cache_dir: Path) -> None:
    """Atomic writes leave only the engine, the model and their checksum files."""
    build_engine(spec, cache_dir)
    leftovers = [p.name for p in cache_dir.rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == []


def test_cache_argument_beats_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An explicit cache folder wins over MLPERF_MIG_CACHE."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "env"))
    assert cache_root(tmp_path / "arg") == tmp_path / "arg"


def test_environment_beats_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MLPERF_MIG_CACHE replaces the per-user default folder."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "env"))
    assert cache_root() == tmp_path / "env"


def test_default_is_per_user(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without argument or variable the cache is ~/.cache/mlperf-mig."""
    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert cache_root() == Path.home() / ".cache" / "mlperf-mig"


def _hash_counter(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files the cache hashes from now on, in order."""
    hashed: list[str] = []
    real = cache._hashed

    def counting(path: Any) -> Any:
        hashed.append(str(path))
        return real(path)

    monkeypatch.setattr(cache, "_hashed", counting)
    return hashed


def test_verified_engine_is_not_hashed_again(
    spec: EngineSpec, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once an engine has passed its checksum, later reuses do not read it again while it is
    unchanged."""
    monkeypatch.setattr(cache, "STAMP_SETTLE_S", 0.0)
    path = build_engine(spec, cache_dir).path
    time.sleep(0.05)  # past the file system's time granularity
    assert build_engine(spec, cache_dir).reused
    hashed = _hash_counter(monkeypatch)
    assert build_engine(spec, cache_dir).reused
    assert str(path) not in hashed


def test_changed_engine_is_rebuilt_after_a_verified_reuse(
    spec: EngineSpec, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A byte flipped in place after a verified reuse, with the modification time put back,
    is still found, and the engine is built again."""
    monkeypatch.setattr(cache, "STAMP_SETTLE_S", 0.0)
    path = build_engine(spec, cache_dir).path
    original = path.read_bytes()
    time.sleep(0.05)
    assert build_engine(spec, cache_dir).reused
    time.sleep(0.05)
    times = path.stat()
    with open(path, "r+b") as handle:
        handle.seek(len(original) // 2)
        handle.write(bytes([original[len(original) // 2] ^ 0xFF]))
    os.utime(path, ns=(times.st_atime_ns, times.st_mtime_ns))
    rebuilt = build_engine(spec, cache_dir)
    assert not rebuilt.reused and rebuilt.path.read_bytes() == original


def test_recently_changed_engine_is_hashed_at_every_reuse(
    spec: EngineSpec, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An engine changed less than STAMP_SETTLE_S ago (a change within the file system's time
    granularity could keep its times) is hashed in full each time it is reused."""
    monkeypatch.setattr(cache, "STAMP_SETTLE_S", 3600.0)
    path = build_engine(spec, cache_dir).path
    hashed = _hash_counter(monkeypatch)
    assert build_engine(spec, cache_dir).reused and build_engine(spec, cache_dir).reused
    assert hashed.count(str(path)) == 2
