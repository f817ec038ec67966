"""Issue 33, finding 3: the cache is trusted only when it is the user's, as ssh treats its keys.

The cache folder is created 0700; a folder owned by another user or writable by others is
refused in one line with the fix; a calibration record or samples file planted by another user
is a miss (measured or generated again); what the cache fed a worker that failed is named in
its error. Another user is played by this process reporting another uid (os.getuid), or by a
real chown where the tests run as root."""

from __future__ import annotations

import json
import logging
import os
import stat
from multiprocessing import Pipe
from pathlib import Path

import numpy as np
import pytest

from mlperf_mig import cli
from mlperf_mig.engines import cache as engine_cache
from mlperf_mig.engines.cache import cache_root
from mlperf_mig.errors import OutputDirError
from mlperf_mig.harness import reuse
from mlperf_mig.harness.reuse import WorkCache
from mlperf_mig.harness.samples import SampleLibrary, input_layouts
from mlperf_mig.runner.worker import _Channel
from mlperf_mig.workloads import get_workload
from mlperf_mig.workloads.samples import SyntheticSource

OTHER_UID = 4242


def _as_other_user(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make `path` another user's: chown it when root, else make this process another uid."""
    if os.getuid() == 0:
        os.chown(path, OTHER_UID, -1, follow_symlinks=False)
    else:
        uid = os.getuid()
        monkeypatch.setattr(os, "getuid", lambda: uid + 1)


def test_new_cache_folder_is_created_0700(tmp_path: Path) -> None:
    """A cache folder that does not exist yet is made readable and writable by the user alone."""
    root = cache_root(tmp_path / "deep" / "cache")
    assert root.is_dir() and stat.S_IMODE(root.stat().st_mode) == 0o700


@pytest.mark.parametrize("hostile", ["foreign", "world-writable", "group-writable"])
def test_untrusted_cache_folder_refuses_the_run(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    hostile: str,
) -> None:
    """A run whose cache folder is another user's or writable by others: exit 2, one line
    naming the folder and the fix, nothing written to the output folder or the cache."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    if hostile == "foreign":
        _as_other_user(cache, monkeypatch)
    else:
        cache.chmod(0o777 if hostile == "world-writable" else 0o770)
    monkeypatch.setenv("MLPERF_MIG_CACHE", str(cache))
    outdir = tmp_path / "run"
    code = cli.main(["run", "--scenario", "1g.10gb", "--backend", "null", "--outdir", str(outdir)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "Traceback" not in err
    assert f"the cache folder {str(cache)!r}" in err and "chmod go-w" in err
    assert not outdir.exists() and list(cache.iterdir()) == []


def test_untrusted_cache_folder_raises_in_the_library(tmp_path: Path) -> None:
    """The library call refuses it too, as an OutputDirError."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o777)
    cache.chmod(0o777)
    with pytest.raises(OutputDirError, match="writable by others"):
        cache_root(cache)


def _inputs() -> dict[str, object]:
    return {"kind": "calibrated target", "loadgen_scenario": "Server", "engine": "x"}


@pytest.mark.parametrize("hostile", ["foreign", "world-writable"])
def test_planted_calibration_record_is_not_used(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    hostile: str,
) -> None:
    """A calibration record with the right key and inputs, but another user's (or writable by
    anyone), is a miss naming it: the run measures its own target."""
    work = WorkCache(cache_root(tmp_path / "cache"))
    work.store_target(_inputs(), 334.0)
    (record,) = (tmp_path / "cache" / reuse.CALIBRATION_DIR).glob("*.json")
    assert work.target(_inputs()) == 334.0
    if hostile == "foreign":
        if os.getuid() != 0:
            pytest.skip("planting another user's file inside the user's own folder needs root")
        os.chown(record, OTHER_UID, -1)
    else:
        record.chmod(0o666)
    with caplog.at_level(logging.WARNING):
        assert work.target(_inputs()) is None
    assert any(str(record) in r.getMessage() for r in caplog.records)


def test_implausible_cached_target_is_not_used(tmp_path: Path) -> None:
    """A record of the user's own with a Server target above calibration's cap is a miss."""
    work = WorkCache(cache_root(tmp_path / "cache"))
    work.store_target(_inputs(), 1e9)
    assert work.target(_inputs()) is None


def _load(work: WorkCache) -> SampleLibrary:
    bench = get_workload("bert")
    source = SyntheticSource(benchmark=bench, total_count=200, performance_count=64, seed=0)
    library = SampleLibrary.allocate(input_layouts(bench), capacity=64, total_count=200)
    work.load_samples(library, [5, 9, 100], source)
    return library


def test_planted_samples_file_is_not_mapped(tmp_path: Path) -> None:
    """A samples file whose bytes and SHA-256 an attacker replaced together, left writable by
    anyone, is generated again: the crafted token ids never reach a test."""
    work = WorkCache(cache_root(tmp_path / "cache"))
    expected = _load(work).buffers["input_ids"][:3].copy()
    (data,) = (tmp_path / "cache" / reuse.SAMPLES_DIR).glob("*.bin")
    meta = data.with_suffix(".json")
    crafted = np.full(data.stat().st_size, 0x7F, dtype=np.uint8).tobytes()
    data.write_bytes(crafted)
    record = json.loads(meta.read_text())
    import hashlib

    record.update(sha256=hashlib.sha256(crafted).hexdigest(), stamp=None)
    meta.write_text(json.dumps(record))
    data.chmod(0o666)
    library = _load(work)
    assert library.buffers["input_ids"].flags.writeable  # generated, not the mapped file
    np.testing.assert_array_equal(library.buffers["input_ids"][:3], expected)


def test_failed_worker_names_what_the_cache_fed_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker that fails after using cached files says which, and how to get rid of them."""
    monkeypatch.setattr(engine_cache, "_fed", [])
    engine_cache.note_fed("samples file", "/c/samples/ab.bin")
    engine_cache.note_fed("calibrated target", "/c/calibration/ab.json")
    ours, theirs = Pipe()
    channel = _Channel(theirs, theirs, 1.0)
    try:
        raise ValueError("token id 999999 out of range")
    except ValueError as exc:
        channel.error(exc)
    _, kind, message, _ = ours.recv()
    assert kind == "ValueError" and message.startswith("token id 999999 out of range")
    assert "'/c/samples/ab.bin'" in message and "'/c/calibration/ab.json'" in message
    assert "delete it" in message


def test_entries_are_written_private_whatever_the_umask(tmp_path: Path) -> None:
    """Under umask 000 a kept target is still writable by the user alone, so it is reused."""
    old = os.umask(0)
    try:
        work = WorkCache(cache_root(tmp_path / "cache"))
        work.store_target(_inputs(), 334.0)
    finally:
        os.umask(old)
    (record,) = (tmp_path / "cache" / reuse.CALIBRATION_DIR).glob("*.json")
    assert stat.S_IMODE(record.stat().st_mode) == 0o644
    assert work.target(_inputs()) == 334.0


def test_world_writable_capacity_cache_is_not_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A capacity.json anyone can write is ignored with a warning naming it, and not replaced."""
    from mlperf_mig.runner.capacity_store import read_capacities, store_capacity

    store_capacity("speed|x", {"qps": 5.0}, tmp_path / "cache")
    path = tmp_path / "cache" / "capacity.json"
    path.chmod(0o666)
    with caplog.at_level(logging.WARNING):
        assert read_capacities(tmp_path / "cache") == {}
    assert any(str(path) in r.getMessage() for r in caplog.records)
    with pytest.raises(OutputDirError, match="writable by anyone"):
        store_capacity("speed|y", {"qps": 6.0}, tmp_path / "cache")


def test_world_writable_engine_file_is_discarded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A cached engine (or its sidecar) anyone can write is discarded with a warning naming it,
    and made again: never loaded."""
    root = cache_root(tmp_path / "cache")
    path = root / "engines" / "model.onnx"
    engine_cache.write_cached(path, lambda tmp: tmp.write_bytes(b"engine"), {"made_from": "x"})
    assert engine_cache.read_valid(path, {"made_from": "x"}) is not None
    path.chmod(0o666)
    with caplog.at_level(logging.WARNING):
        assert engine_cache.read_valid(path, {"made_from": "x"}) is None
    assert any("writable by anyone" in r.getMessage() for r in caplog.records)
    assert not path.exists()
