"""Engine recipes: NVIDIA's published MIG batch sizes, inferred values marked, CPU sizes."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlperf_mig.engines import load_recipe
from mlperf_mig.errors import DataFileError, PrecisionError, SettingsError
from mlperf_mig.workloads import get_workload


def test_resnet50_1g_offline_is_nvidias_256() -> None:
    """ResNet50 INT8 Offline on a 1g slice uses NVIDIA's published batch 256."""
    recipe = load_recipe(get_workload("resnet50"), "int8")
    assert recipe.batch_size(1, "Offline") == 256
    assert not recipe.is_inferred(1, "Offline")


def test_resnet50_7g_offline_is_the_full_gpu_setting() -> None:
    """The 7g slice uses NVIDIA's full-GPU Offline batch 2048."""
    assert load_recipe(get_workload("resnet50"), "int8").batch_size(7, "Offline") == 2048


def test_bert_1g_batches_are_nvidias() -> None:
    """BERT INT8 on 1g: Offline 64 and Server 16, as NVIDIA published."""
    recipe = load_recipe(get_workload("bert"), "int8")
    assert (recipe.batch_size(1, "Offline"), recipe.batch_size(1, "Server")) == (64, 16)


def test_interpolated_sizes_are_marked_inferred() -> None:
    """Batch sizes between the published anchors are marked inferred."""
    recipe = load_recipe(get_workload("bert"), "int8")
    assert recipe.is_inferred(3, "Offline") and recipe.is_inferred(7, "Server")


def test_stream_and_cpu_sizes_are_labelled() -> None:
    """Stream sizes are MLPerf's (not inferred); the CPU sizes are ours (inferred)."""
    recipe = load_recipe(get_workload("resnet50"), "int8")
    assert not recipe.is_inferred(3, "SingleStream") and not recipe.is_inferred(None, "MultiStream")
    assert recipe.is_inferred(None, "Offline")


def test_unlisted_profile_size_uses_next_smaller() -> None:
    """A 6-slice profile gets the 4-slice batch size."""
    recipe = load_recipe(get_workload("resnet50"), "int8")
    assert recipe.batch_size(6, "Offline") == recipe.batch_size(4, "Offline")


def test_cpu_batch_size_without_profile() -> None:
    """Without a GPU slice the recipe's CPU batch size applies."""
    assert load_recipe(get_workload("resnet50"), "fp32").batch_size(None, "offline") == 8


def test_stream_scenarios_use_mlperf_query_sizes() -> None:
    """SingleStream runs batch 1 and MultiStream 8 samples per query, on any slice."""
    recipe = load_recipe(get_workload("bert"), "fp16")
    assert (recipe.batch_size(2, "SingleStream"), recipe.batch_size(2, "MultiStream")) == (1, 8)


def test_bert_sequence_buckets_end_at_384() -> None:
    """BERT's buckets are ascending and end at the official sequence length."""
    assert load_recipe(get_workload("bert"), "int8").seq_buckets == (128, 256, 384)


def test_unknown_loadgen_scenario_is_one_error() -> None:
    """A misspelt LoadGen scenario raises SettingsError that names the four scenarios."""
    with pytest.raises(SettingsError, match="SingleStream, MultiStream, Offline, Server"):
        load_recipe(get_workload("resnet50"), "int8").batch_size(1, "Ofline")


def test_unknown_precision_is_one_error() -> None:
    """A precision without recipe raises PrecisionError."""
    with pytest.raises(PrecisionError, match="int4"):
        load_recipe(get_workload("resnet50"), "int4")


def test_malformed_recipe_names_the_file(tmp_path: Path) -> None:
    """A recipe missing a field raises DataFileError naming the file."""
    (tmp_path / "resnet50.toml").write_text('benchmark = "resnet50"\n[precision.int8]\n')
    with pytest.raises(DataFileError, match=r"resnet50\.toml"):
        load_recipe(get_workload("resnet50"), "int8", folder=tmp_path)


def test_whole_gpu_is_the_largest_profile_size() -> None:
    """The whole-GPU entry (used by TensorRT without a named GPU) is the 7-slice one."""
    assert load_recipe(get_workload("resnet50"), "int8").whole_gpu_slices == 7
