"""EngineSpec: a stable cache key, a readable file name, plain-data round trips."""

from __future__ import annotations

import pickle

import attrs
import pytest

from mlperf_mig.engines import EngineSpec, resolve_spec
from mlperf_mig.workloads import get_workload


@pytest.fixture(name="spec")
def fixture_spec() -> EngineSpec:
    """A fully specified BERT TensorRT spec for a MIG profile (no I/O)."""
    return EngineSpec(
        benchmark="bert",
        backend="tensorrt",
        precision="int8",
        model="ab" * 32,
        batch_sizes=(64,),
        seq_buckets=(384, 128, 256),
        workspace_mib=2048,
        gpu="H100-SXM5-80GB",
        mig_profile="1g.10gb",
        backend_version="10.9.0",
    )


def test_cache_key_is_stable(spec: EngineSpec) -> None:
    """The key is a pure function of the fields: a known value that must not drift silently."""
    assert spec.cache_key == EngineSpec.from_dict(spec.to_dict()).cache_key
    assert spec.cache_key == "be0f5f6ce2ba4bc1d174"


def test_cache_key_ignores_model_location(spec: EngineSpec) -> None:
    """The same model bytes at another path share the engine."""
    assert attrs.evolve(spec, model_path="/elsewhere/model.onnx").cache_key == spec.cache_key


@pytest.mark.parametrize(
    "change",
    [
        {"precision": "fp16"},
        {"batch_sizes": (16,)},
        {"mig_profile": "2g.20gb"},
        {"backend_version": "10.10.0"},
        {"model": "cd" * 32},
    ],
)
def test_cache_key_changes_with_engine_inputs(spec: EngineSpec, change: dict) -> None:
    """Every field that changes the engine bytes changes the key."""
    assert attrs.evolve(spec, **change).cache_key != spec.cache_key


def test_file_name_is_readable(spec: EngineSpec) -> None:
    """The file name says benchmark, variant, precision, backend, GPU, profile, batch and length."""
    assert (
        spec.file_name
        == f"bert-full-int8-tensorrt-h100-sxm5-80gb-1g.10gb-b64-s384-{spec.cache_key[:12]}"
    )


def test_sequence_buckets_are_sorted(spec: EngineSpec) -> None:
    """Buckets are kept ascending; the largest is the sequence length."""
    assert spec.seq_buckets == (128, 256, 384) and spec.seq_len == 384


def test_round_trips_through_dict_and_pickle(spec: EngineSpec) -> None:
    """A spec crosses process boundaries as plain data or pickle unchanged."""
    assert EngineSpec.from_dict(spec.to_dict()) == spec
    assert pickle.loads(pickle.dumps(spec)) == spec


def test_rejects_unknown_precision() -> None:
    """The plain constructor validates the precision."""
    with pytest.raises(ValueError, match="precision"):
        EngineSpec(benchmark="resnet50", backend="onnxruntime", precision="int4")


def test_rejects_empty_batch_sizes() -> None:
    """An engine needs at least one batch size."""
    with pytest.raises(ValueError, match="batch_sizes"):
        EngineSpec(benchmark="resnet50", backend="onnxruntime", batch_sizes=())


def test_create_for_a_mig_profile_takes_its_recipe_batch() -> None:
    """A spec for H100 1g.10gb resolves the profile in the registry and takes the 1g batch."""
    spec = resolve_spec(
        get_workload("bert"),
        backend="null",
        precision="int8",
        gpu="H100-80GB",
        mig_profile="1g.10gb",
        loadgen_scenario="Server",
    )
    assert (spec.gpu, spec.mig_profile, spec.batch_sizes) == ("H100-SXM5-80GB", "1g.10gb", (16,))
    assert spec.seq_buckets == (128, 256, 384)
