"""Work kept between runs (harness/reuse.py): measured targets and generated samples, each used
only for the very inputs it was made from, and never when the cache file is damaged or hostile."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pytest

from mlperf_mig.emulation.cpu_budget import BUDGET_ENV, SHARE_ENV
from mlperf_mig.engines import EngineSpec, resolve_spec
from mlperf_mig.harness import InstanceTask, SettingsSpec, reuse, run_instance
from mlperf_mig.harness.instance import calibration_inputs, target_was_wrong
from mlperf_mig.harness.result import InstanceResult
from mlperf_mig.harness.reuse import WorkCache, key_digest
from mlperf_mig.harness.samples import SampleLibrary, input_layouts
from mlperf_mig.workloads import get_workload
from mlperf_mig.workloads.samples import SyntheticSource


@pytest.fixture(name="engine_cache", scope="module")
def fixture_engine_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("engines")


@pytest.fixture(name="spec", scope="module")
def fixture_spec(engine_cache: Path) -> EngineSpec:
    return resolve_spec(
        get_workload("resnet50"), backend="onnxruntime", variant="tiny", cache_dir=engine_cache
    )


def _task(spec: EngineSpec | None, outdir: Path, cache: Path, **fields: Any) -> InstanceTask:
    defaults: dict[str, Any] = {
        "benchmark": "resnet50",
        "loadgen_scenario": "Offline",
        "threads": 1,
    }
    defaults.update(fields)
    return InstanceTask(outdir=outdir, engine=spec, cache_dir=cache, **defaults)


def _inputs(spec: EngineSpec, tmp_path: Path, **fields: Any) -> dict[str, Any]:
    batch = fields.pop("batch_size", 8)
    per_query = fields.pop("samples_per_query", 8)
    task = _task(spec, tmp_path / "run", tmp_path / "cache", **fields)
    inputs = calibration_inputs(task, batch, per_query, path="library")
    assert inputs is not None
    return inputs


# --- measured targets ----------------------------------------------------------------------------
def test_kept_target_is_read_back(spec: EngineSpec, tmp_path: Path) -> None:
    """A target kept for some inputs is what a later read of the same inputs gets."""
    work = WorkCache(tmp_path / "cache")
    inputs = _inputs(spec, tmp_path)
    assert work.target(inputs) is None
    work.store_target(inputs, 123.5)
    assert work.target(_inputs(spec, tmp_path)) == 123.5


def test_null_backend_target_is_not_kept(tmp_path: Path) -> None:
    """The null backend has no engine: its calibration is never cached."""
    task = _task(None, tmp_path / "run", tmp_path / "cache")
    assert calibration_inputs(task, 8, 8, path="library") is None


@pytest.mark.parametrize(
    "change",
    [
        {"loadgen_scenario": "Server"},
        {"benchmark": "bert"},
        {"settings": SettingsSpec(preset="submission")},
        {"batch_size": 4},
        {"samples_per_query": 4},
        {"seed": 1},
        {"sample_count": 100},
        {"threads": 2},
    ],
    ids=lambda change: next(iter(change)),
)
def test_target_is_not_used_for_other_task_inputs(
    spec: EngineSpec, tmp_path: Path, change: dict[str, Any]
) -> None:
    """Another scenario, benchmark, preset, batch, query size, seed, count or thread count misses."""
    work = WorkCache(tmp_path / "cache")
    work.store_target(_inputs(spec, tmp_path), 100.0)
    assert work.target(_inputs(spec, tmp_path, **change)) is None


@pytest.mark.parametrize("field", ["variant", "backend_version", "mig_profile"])
def test_target_is_not_used_for_another_engine(
    spec: EngineSpec, tmp_path: Path, field: str
) -> None:
    """An engine of another variant, backend version or MIG profile misses."""
    work = WorkCache(tmp_path / "cache")
    work.store_target(_inputs(spec, tmp_path), 100.0)
    other = attrs.evolve(spec, **{field: "full" if field == "variant" else "other"})
    assert work.target(_inputs(other, tmp_path)) is None


def test_target_is_not_used_on_another_cpu_model(
    spec: EngineSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A target measured on another CPU model misses."""
    work = WorkCache(tmp_path / "cache")
    work.store_target(_inputs(spec, tmp_path), 100.0)
    monkeypatch.setattr(reuse, "cpu_model", lambda: "another CPU")
    assert work.target(_inputs(spec, tmp_path)) is None


def test_target_is_not_used_on_other_cpus(
    spec: EngineSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker pinned to other CPUs misses."""
    work = WorkCache(tmp_path / "cache")
    work.store_target(_inputs(spec, tmp_path), 100.0)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {12345})
    assert work.target(_inputs(spec, tmp_path)) is None


@pytest.mark.parametrize(
    "budget", [("0.5", "duty cycle"), ("0.25", "duty cycle"), ("0.5", "cgroup quota")]
)
def test_target_is_not_used_under_another_cpu_budget(
    spec: EngineSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, budget: tuple[str, str]
) -> None:
    """A target calibrated without a CPU budget is not used under one, nor one under another."""
    work = WorkCache(tmp_path / "cache")
    monkeypatch.delenv(SHARE_ENV, raising=False)
    monkeypatch.delenv(BUDGET_ENV, raising=False)
    work.store_target(_inputs(spec, tmp_path), 100.0)
    monkeypatch.setenv(SHARE_ENV, budget[0])
    monkeypatch.setenv(BUDGET_ENV, budget[1])
    assert work.target(_inputs(spec, tmp_path)) is None
    work.store_target(_inputs(spec, tmp_path), 50.0)
    monkeypatch.setenv(SHARE_ENV, "0.75")
    assert work.target(_inputs(spec, tmp_path)) is None


def _record_path(work: WorkCache, inputs: dict[str, Any]) -> Path:
    assert work.root is not None
    return work.root / reuse.CALIBRATION_DIR / f"{key_digest(inputs)}.json"


def _valid_record(inputs: dict[str, Any], target: Any = 100.0) -> dict[str, Any]:
    return {
        "format": reuse.FORMAT, "version": reuse.VERSION,
        "inputs": json.loads(json.dumps(inputs)), "target": target,
    }  # fmt: skip


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[1, 2]",
        "{}",
        "RECORD:target=NaN",
        "RECORD:target=Infinity",
        "RECORD:target=-5",
        "RECORD:target=0",
        "RECORD:target=true",
        'RECORD:target="100"',
        "RECORD:version=2",
        "RECORD:inputs=other",
        "\xff\xfe",
    ],
)
def test_hostile_calibration_record_is_not_used(
    spec: EngineSpec, tmp_path: Path, text: str
) -> None:
    """A record that is not JSON, of another version or inputs, or whose target is not a finite
    positive number, is a miss; measuring again replaces it."""
    work = WorkCache(tmp_path / "cache")
    inputs = _inputs(spec, tmp_path)
    path = _record_path(work, inputs)
    path.parent.mkdir(parents=True)
    if text.startswith("RECORD:"):
        field, _, value = text.removeprefix("RECORD:").partition("=")
        record = _valid_record(inputs)
        record[field] = {"other": 1} if value == "other" else json.loads(value)
        text = json.dumps(record)
    path.write_bytes(text.encode("utf-8", "surrogateescape") if text.isascii() else b"\xff\xfe")
    assert work.target(inputs) is None
    work.store_target(inputs, 42.0)
    assert work.target(inputs) == 42.0


def test_linked_calibration_record_is_not_followed(spec: EngineSpec, tmp_path: Path) -> None:
    """A record planted as a symbolic link (to a valid record elsewhere) is not read."""
    work = WorkCache(tmp_path / "cache")
    inputs = _inputs(spec, tmp_path)
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps(_valid_record(inputs)))
    path = _record_path(work, inputs)
    path.parent.mkdir(parents=True)
    path.symlink_to(elsewhere)
    assert work.target(inputs) is None


def test_linked_calibration_folder_is_not_followed(spec: EngineSpec, tmp_path: Path) -> None:
    """A calibration folder that is a link out of the cache is neither read nor written."""
    work = WorkCache(tmp_path / "cache")
    inputs = _inputs(spec, tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / f"{key_digest(inputs)}.json").write_text(json.dumps(_valid_record(inputs)))
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / reuse.CALIBRATION_DIR).symlink_to(outside)
    assert work.target(inputs) is None
    work.store_target(inputs, 7.0)
    assert json.loads((outside / f"{key_digest(inputs)}.json").read_text())["target"] == 100.0


def test_oversized_calibration_record_is_not_read(spec: EngineSpec, tmp_path: Path) -> None:
    """A record larger than any this tool writes is refused unread."""
    work = WorkCache(tmp_path / "cache")
    inputs = _inputs(spec, tmp_path)
    path = _record_path(work, inputs)
    path.parent.mkdir(parents=True)
    path.write_text(" " * (reuse.RECORD_LIMIT + 1) + json.dumps(_valid_record(inputs)))
    assert work.target(inputs) is None


def test_unwritable_cache_only_costs_the_reuse(spec: EngineSpec, tmp_path: Path) -> None:
    """A folder where the record belongs makes the store a logged no-op, not an error."""
    work = WorkCache(tmp_path / "cache")
    inputs = _inputs(spec, tmp_path)
    _record_path(work, inputs).mkdir(parents=True)
    work.store_target(inputs, 5.0)
    assert work.target(inputs) is None


def test_forgotten_target_is_measured_again(spec: EngineSpec, tmp_path: Path) -> None:
    """forget_target drops the entry."""
    work = WorkCache(tmp_path / "cache")
    inputs = _inputs(spec, tmp_path)
    work.store_target(inputs, 5.0)
    work.forget_target(inputs, "test")
    assert work.target(inputs) is None


def _result(**fields: Any) -> InstanceResult:
    values: dict[str, Any] = {
        "benchmark": "bert", "loadgen_scenario": "Server", "mode": "performance", "valid": False,
        "validity": "INVALID", "invalid_reasons": ("99th percentile latency too high",),
        "throughput": 10.0, "throughput_unit": "QPS", "latency_ns": {}, "effective_settings": {},
        "device": None, "log_dir": "x", "user_conf": "x", "target_source": "cached calibration",
        "samples_completed": 10, "failed_samples": 0, "error": None, "synthetic_data": True,
        "accuracy": None, "wall_s": 1.0,
    }  # fmt: skip
    values.update(fields)
    return InstanceResult(**values)


@pytest.mark.parametrize(
    ("fields", "wrong"),
    [
        ({}, True),
        ({"valid": True, "validity": "VALID"}, False),
        ({"loadgen_scenario": "Offline"}, False),
        ({"invalid_by_design": True}, False),
        ({"error": "backend failed"}, False),
    ],
)
def test_only_an_invalid_target_driven_test_drops_the_cached_target(
    fields: dict[str, Any], wrong: bool
) -> None:
    """An INVALID Server/stream test drops its cached target; a valid, Offline, by-design or
    failed one does not."""
    assert target_was_wrong(_result(**fields)) is wrong


@pytest.mark.slow
def test_second_run_says_its_target_was_cached(in_child, spec: EngineSpec, tmp_path: Path) -> None:
    """The first run measures and keeps its target; the second uses it and its result says so."""
    settings = SettingsSpec(overrides={"min_duration": 200, "min_query_count": 8})
    cache = tmp_path / "cache"
    first = in_child(run_instance, _task(spec, tmp_path / "a", cache, settings=settings))
    second = in_child(run_instance, _task(spec, tmp_path / "b", cache, settings=settings))
    assert first.target_source == "calibration"
    assert second.target_source == "cached calibration"
    assert second.effective_settings["target_qps"] == first.effective_settings["target_qps"]


# --- generated samples ---------------------------------------------------------------------------
def _library_and_source(
    benchmark: str = "bert", seed: int = 0
) -> tuple[SampleLibrary, SyntheticSource]:
    bench = get_workload(benchmark)
    source = SyntheticSource(benchmark=bench, total_count=200, performance_count=64, seed=seed)
    library = SampleLibrary.allocate(input_layouts(bench), capacity=64, total_count=200)
    return library, source


def _expected(indices: list[int], benchmark: str = "bert", seed: int = 0) -> dict[str, np.ndarray]:
    library, source = _library_and_source(benchmark, seed)
    library.load(indices, source)
    return {name: buf[: len(indices)].copy() for name, buf in library.buffers.items()}


INDICES = [5, 9, 100, 3, 7, 42]


def _samples_files(work: WorkCache) -> list[Path]:
    assert work.root is not None
    return sorted((work.root / reuse.SAMPLES_DIR).glob("*.bin"))


@pytest.mark.parametrize("benchmark", ["bert", "resnet50"])
def test_cached_samples_are_served_from_the_mapped_file(tmp_path: Path, benchmark: str) -> None:
    """The second load serves the same bytes from the read-only mapped cache file."""
    work = WorkCache(tmp_path / "cache")
    first, source = _library_and_source(benchmark)
    work.load_samples(first, INDICES, source)
    second, source = _library_and_source(benchmark)
    work.load_samples(second, INDICES, source)
    for name, expected in _expected(INDICES, benchmark).items():
        served = second.buffers[name]
        assert not served.flags.writeable
        np.testing.assert_array_equal(served, expected)
        np.testing.assert_array_equal(second.gather(second.slots([100, 3]))[name], expected[[2, 3]])


def test_other_indices_or_seed_are_generated(tmp_path: Path) -> None:
    """Another index set or seed is its own entry, generated, not served from the first."""
    work = WorkCache(tmp_path / "cache")
    library, source = _library_and_source()
    work.load_samples(library, INDICES, source)
    library, source = _library_and_source(seed=1)
    work.load_samples(library, INDICES, source)
    np.testing.assert_array_equal(
        library.buffers["input_ids"][:6], _expected(INDICES, seed=1)["input_ids"]
    )
    library, source = _library_and_source()
    work.load_samples(library, [1, 2, 3], source)
    np.testing.assert_array_equal(
        library.buffers["input_ids"][:3], _expected([1, 2, 3])["input_ids"]
    )
    assert len(_samples_files(work)) == 3


def test_library_is_writable_again_after_a_generated_load(tmp_path: Path) -> None:
    """A load that is not in the cache goes into the library's own buffers, not the mapping."""
    work = WorkCache(tmp_path / "cache")
    library, source = _library_and_source()
    work.load_samples(library, INDICES, source)
    work.load_samples(library, INDICES, source)  # mapped
    library.load([7, 8], source)
    assert library.buffers["input_ids"].flags.writeable
    np.testing.assert_array_equal(library.buffers["input_ids"][:2], _expected([7, 8])["input_ids"])


@pytest.mark.parametrize(
    "damage", ["flip", "truncate", "grow", "link", "folder", "sidecar", "size"]
)
def test_damaged_samples_file_is_not_used(tmp_path: Path, damage: str) -> None:
    """A flipped byte, a truncated or grown file, a link, a folder, an unreadable or lying
    sidecar: the samples are generated again and are right."""
    work = WorkCache(tmp_path / "cache")
    library, source = _library_and_source()
    work.load_samples(library, INDICES, source)
    (data,) = _samples_files(work)
    meta = data.with_suffix(".json")
    if damage == "flip":
        raw = bytearray(data.read_bytes())
        raw[100] ^= 0xFF
        data.write_bytes(bytes(raw))
    elif damage == "truncate":
        data.write_bytes(data.read_bytes()[:-8])
    elif damage == "grow":
        data.write_bytes(data.read_bytes() + b"\0" * 8)
    elif damage == "link":
        target = tmp_path / "elsewhere.bin"
        data.rename(target)
        data.symlink_to(target)
    elif damage == "folder":
        data.unlink()
        data.mkdir()
    elif damage == "sidecar":
        meta.write_text("{not json")
    else:
        record = json.loads(meta.read_text())
        meta.write_text(json.dumps({**record, "size": record["size"] - 8}))
    library, source = _library_and_source()
    work.load_samples(library, INDICES, source)
    assert library.buffers["input_ids"].flags.writeable  # generated, not mapped
    np.testing.assert_array_equal(library.buffers["input_ids"][:6], _expected(INDICES)["input_ids"])


def test_another_writer_is_not_raced(tmp_path: Path) -> None:
    """While another process holds the writer's lock, a load generates and writes nothing."""
    import fcntl

    work = WorkCache(tmp_path / "cache")
    library, source = _library_and_source()
    digest = key_digest(
        reuse._samples_inputs(source, INDICES, {n: b[:6] for n, b in library.buffers.items()}) or {}
    )
    lock = tmp_path / "cache" / reuse.SAMPLES_DIR / f"{digest}.lock"
    lock.parent.mkdir(parents=True)
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        work.load_samples(library, INDICES, source)
    assert _samples_files(work) == []
    np.testing.assert_array_equal(library.buffers["input_ids"][:6], _expected(INDICES)["input_ids"])


def test_shared_library_copies_cached_samples(tmp_path: Path) -> None:
    """A library on buffers handed in (shared memory) gets the cached samples copied in."""
    work = WorkCache(tmp_path / "cache")
    library, source = _library_and_source()
    work.load_samples(library, INDICES, source)
    buffers = {name: np.zeros_like(buf) for name, buf in library.buffers.items()}
    shared = SampleLibrary(buffers, total_count=200)
    work.load_samples(shared, INDICES, source)
    assert shared.buffers["input_ids"] is buffers["input_ids"]
    np.testing.assert_array_equal(buffers["input_ids"][:6], _expected(INDICES)["input_ids"])


def test_forget_key_drops_only_a_key_of_this_cache(spec: EngineSpec, tmp_path: Path) -> None:
    """A worker's key drops its target; anything not shaped like a key (a path) drops nothing."""
    work = WorkCache(tmp_path / "cache")
    inputs = _inputs(spec, tmp_path)
    work.store_target(inputs, 5.0)
    work.forget_key("../../etc/passwd", "test")
    assert work.target(inputs) == 5.0
    work.forget_key(key_digest(inputs), "test")
    assert work.target(inputs) is None


@pytest.mark.slow
def test_second_unified_run_says_its_target_was_cached(tmp_path: Path) -> None:
    """A unified run's instances keep their targets; the next identical run reuses them and its
    layout result says so."""
    import mlperf_mig

    def unified(name: str) -> Any:
        return mlperf_mig.run(
            "2g.20gb+1g.10gb", mode="unified", outdir=tmp_path / name, backend="onnxruntime",
            variant="tiny", cache_dir=tmp_path / "cache", accuracy=False, progress=False,
            settings={"min_duration": 300}, timeout_s=300,
        )  # fmt: skip

    first, second = unified("first"), unified("second")
    assert first.ok and first.layout_result.target_source == "calibration"
    assert second.ok and second.layout_result.target_source == "cached calibration"
    assert any("cached calibration" in label for label in second.labels())
