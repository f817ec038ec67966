"""The CPU provider's saved, mapped copy of an engine and the session settings that use it."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import attrs
import numpy as np
import pytest

from mlperf_mig.engines import EngineSpec, build_engine, open_backend, resolve_spec
from mlperf_mig.engines.backends.onnxruntime import backend as ort_backend
from mlperf_mig.engines.backends.onnxruntime import cpu_copy as onnxruntime_cpu
from mlperf_mig.engines.backends.onnxruntime.backend import session_options
from mlperf_mig.errors import OutputDirError
from mlperf_mig.workloads import get_workload
from mlperf_mig.workloads.bert import BERT
from mlperf_mig.workloads.resnet50 import RESNET50

ort = pytest.importorskip("onnxruntime")


@pytest.fixture(name="spec")
def fixture_spec(cache_dir: Path) -> EngineSpec:
    """A tiny ResNet50 spec on the CPU provider, in the test's own cache."""
    return resolve_spec(get_workload("resnet50"), backend="onnxruntime", variant="tiny")


def _reference_outputs(engine: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """What the engine file computes when ONNX Runtime optimises it in this session."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(str(engine), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def test_cpu_load_saves_a_mapped_copy_next_to_the_engine(spec: EngineSpec) -> None:
    """Loading on the CPU saves the optimised graph with its weights in a separate data file."""
    engine = build_engine(spec).path
    with open_backend(spec, threads=1) as backend:
        loaded = backend.model_path
    folder = onnxruntime_cpu.shared_model_folder(engine)
    assert loaded == folder / onnxruntime_cpu.MODEL_NAME
    weights = folder / onnxruntime_cpu.WEIGHTS_NAME
    assert weights.stat().st_size > loaded.stat().st_size
    manifest = json.loads((folder / onnxruntime_cpu.MANIFEST_NAME).read_text())
    assert manifest["made_from"]["cpu"] == onnxruntime_cpu.cpu_fingerprint()
    assert folder.name.endswith(onnxruntime_cpu.cpu_fingerprint())


def test_cpu_session_runs_the_copy_without_optimising_it_again(spec: EngineSpec) -> None:
    """The session on the copy has graph optimisations and the memory pattern off."""
    with open_backend(spec, threads=1) as backend:
        options = backend._session.get_session_options()
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    assert options.enable_mem_pattern is False
    assert options.intra_op_num_threads == 1


def test_cpu_session_options(spec: EngineSpec) -> None:
    """CPU sessions flush denormals, use one inter-op thread and no memory pattern."""
    options = session_options(spec, threads=2)
    assert options.get_session_config_entry("session.set_denormal_as_zero") == "1"
    assert (options.inter_op_num_threads, options.intra_op_num_threads) == (1, 2)
    assert options.enable_mem_pattern is False
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL


def test_gpu_session_options_keep_the_memory_pattern(spec: EngineSpec) -> None:
    """Sessions on the CUDA provider keep ONNX Runtime's memory pattern."""
    options = session_options(attrs.evolve(spec, gpu="H100-SXM5-80GB"), threads=None)
    assert options.enable_mem_pattern is True
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL


@pytest.mark.parametrize(("benchmark", "precision"), [(RESNET50, "fp32"), (BERT, "int8")])
def test_copy_computes_what_the_engine_computes(cache_dir: Path, benchmark, precision: str) -> None:
    """The saved copy gives the outputs of the engine optimised in the session itself."""
    spec = resolve_spec(benchmark.name, backend="onnxruntime", precision=precision, variant="tiny")
    feeds = benchmark.calibration_feeds(2, seed=0)
    with open_backend(spec, threads=1) as backend:
        got = backend.run(feeds)
    expected = _reference_outputs(build_engine(spec).path, feeds)
    for tensor, want in zip(benchmark.outputs, expected):
        np.testing.assert_allclose(got[tensor.name], want, rtol=1e-4, atol=1e-5)


def test_second_load_reuses_the_copy(spec: EngineSpec) -> None:
    """A second session maps the copy the first one saved instead of saving another."""
    with open_backend(spec, threads=1) as backend:
        weights = backend.model_path.with_name(onnxruntime_cpu.WEIGHTS_NAME)
    written = weights.stat().st_mtime_ns, weights.stat().st_ino
    with open_backend(spec, threads=1) as backend:
        assert backend.model_path.with_name(onnxruntime_cpu.WEIGHTS_NAME) == weights
    assert (weights.stat().st_mtime_ns, weights.stat().st_ino) == written


def test_damaged_copy_is_made_again(spec: EngineSpec) -> None:
    """A copy whose weights changed on disk is discarded and saved again, never loaded."""
    with open_backend(spec, threads=1) as backend:
        weights = backend.model_path.with_name(onnxruntime_cpu.WEIGHTS_NAME)
        expected = backend.run(RESNET50.calibration_feeds(2, seed=0))
    original = weights.read_bytes()
    weights.write_bytes(original[:100] + bytes([original[100] ^ 0xFF]) + original[101:])
    with open_backend(spec, threads=1) as backend:
        got = backend.run(RESNET50.calibration_feeds(2, seed=0))
    assert weights.read_bytes() == original
    np.testing.assert_array_equal(got["softmax_tensor:0"], expected["softmax_tensor:0"])


def test_unchanged_copy_is_not_hashed_again(
    spec: EngineSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a copy's files were verified with a stamp, later loads do not read them again; a
    changed file is still hashed (and found damaged)."""
    from mlperf_mig.engines import cache

    monkeypatch.setattr(cache, "STAMP_SETTLE_S", 0.0)
    with open_backend(spec, threads=1) as backend:
        folder = backend.model_path.parent
    with open_backend(spec, threads=1):
        pass  # this load verifies the files and records their stamps
    hashed: list[str] = []
    real = cache._hashed

    def counting(path: str | os.PathLike[str]) -> tuple[str, list[int] | None]:
        hashed.append(Path(path).name)
        return real(path)

    monkeypatch.setattr(cache, "_hashed", counting)
    with open_backend(spec, threads=1):
        pass
    assert onnxruntime_cpu.WEIGHTS_NAME not in hashed
    (folder / onnxruntime_cpu.WEIGHTS_NAME).touch()
    with open_backend(spec, threads=1):
        pass
    assert onnxruntime_cpu.WEIGHTS_NAME in hashed


def test_copy_from_another_cpu_is_replaced(spec: EngineSpec) -> None:
    """A copy whose manifest names another CPU type is not used."""
    with open_backend(spec, threads=1) as backend:
        folder = backend.model_path.parent
    manifest_path = folder / onnxruntime_cpu.MANIFEST_NAME
    manifest = json.loads(manifest_path.read_text())
    manifest["made_from"]["cpu"] = "another-cpu"
    manifest_path.write_text(json.dumps(manifest))
    with open_backend(spec, threads=1):
        pass
    assert json.loads(manifest_path.read_text())["made_from"]["cpu"] == (
        onnxruntime_cpu.cpu_fingerprint()
    )


def test_unwritable_cache_loads_the_engine_itself(
    spec: EngineSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the copy cannot be saved, the session optimises the engine file as before."""

    def refuse(folder: Path) -> Path:
        raise OutputDirError(f"{folder} is read-only")

    engine = build_engine(spec).path
    monkeypatch.setattr(onnxruntime_cpu, "ensure_writable_dir", refuse)
    with open_backend(spec, threads=1) as backend:
        options = backend._session.get_session_options()
        assert backend.model_path == engine
        assert backend.device.provider == "CPUExecutionProvider"
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    assert not onnxruntime_cpu.shared_model_folder(engine).exists()


def test_concurrent_loads_save_one_copy(spec: EngineSpec, monkeypatch: pytest.MonkeyPatch) -> None:
    """Instances that load at the same time save the copy once and all map it."""
    saved: list[Path] = []
    save = ort_backend._save_cpu_copy

    def counting_save(spec: EngineSpec, engine_path: Path, folder: Path) -> None:
        saved.append(folder)
        save(spec, engine_path, folder)

    monkeypatch.setattr(ort_backend, "_save_cpu_copy", counting_save)
    engine = build_engine(spec).path

    def load(_: int) -> Path:
        with open_backend(spec, threads=1) as backend:
            return backend.model_path

    with ThreadPoolExecutor(max_workers=3) as pool:
        loaded = set(pool.map(load, range(3)))
    assert loaded == {onnxruntime_cpu.shared_model_folder(engine) / onnxruntime_cpu.MODEL_NAME}
    assert len(saved) == 1
    assert not [p for p in engine.parent.iterdir() if p.name.endswith(".tmp")]


class _RecordingSession:
    """An InferenceSession stand-in that records the batch of each run and delegates it."""

    def __init__(self, session: ort.InferenceSession) -> None:
        self.session = session
        self.batches: list[int] = []

    def run(self, names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        self.batches.append(len(next(iter(feeds.values()))))
        return self.session.run(names, feeds)


def test_cpu_batch_runs_in_runs_of_two_samples_per_thread(spec: EngineSpec) -> None:
    """A CPU batch of 5 with one intra-op thread is run as session runs of 2, 2 and 1 samples."""
    with open_backend(spec, threads=1) as backend:
        recording = _RecordingSession(backend._session)
        backend._session = recording
        outputs = backend.run(RESNET50.calibration_feeds(5, seed=0))
    assert recording.batches == [2, 2, 1]
    assert [len(outputs[t.name]) for t in RESNET50.outputs] == [5, 5]


def test_cpu_runs_give_the_outputs_of_one_whole_run(spec: EngineSpec) -> None:
    """Outputs of a batch run in parts equal those of the same batch in one session run."""
    feeds = RESNET50.calibration_feeds(5, seed=0)
    with open_backend(spec, threads=1) as backend:
        parts = backend.run(feeds)
        whole = backend._session.run(list(RESNET50.output_names()), feeds)
    for tensor, want in zip(RESNET50.outputs, whole):
        np.testing.assert_allclose(parts[tensor.name], want, rtol=1e-6, atol=1e-7)


def test_samples_per_run_scales_with_threads(spec: EngineSpec) -> None:
    """A CPU session takes two samples per intra-op thread in one run."""
    assert ort_backend.samples_per_run(spec, threads=1) == 2
    assert ort_backend.samples_per_run(spec, threads=3) == 6


def test_default_threads_count_the_process_cpus(spec: EngineSpec) -> None:
    """Without a thread count, a run takes two samples per CPU this process may use."""
    cpus = len(os.sched_getaffinity(0))
    assert ort_backend.samples_per_run(spec, threads=None) == 2 * cpus


def test_gpu_sessions_run_the_whole_batch(spec: EngineSpec) -> None:
    """A CUDA-provider session runs every batch in one session run."""
    assert ort_backend.samples_per_run(attrs.evolve(spec, gpu="H100-SXM5-80GB"), threads=1) is None
