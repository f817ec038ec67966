"""What vLLM loads: the generated Llama-3.1-8B config (dummy weights) and a user's folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlperf_mig.engines.backends.vllm.model import VllmModel, llama_config, shape_from_config
from mlperf_mig.errors import ModelFileError
from mlperf_mig.workloads.llama3_1_8b.shape import FULL, TINY


def _user_folder(folder: Path, *, config: dict | None = None, files: tuple[str, ...] = ()) -> Path:
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config or llama_config()))
    for name in files:
        (folder / name).write_bytes(b"x")
    return folder


def test_generated_config_has_the_real_8b_shape(tmp_path: Path) -> None:
    """The generated config.json is LlamaForCausalLM with Llama-3.1-8B's sizes and rope."""
    model = VllmModel.generated(cache_dir=tmp_path)
    config = json.loads((model.folder / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["torch_dtype"] == "bfloat16"
    sizes = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads")
    assert [config[k] for k in sizes] == [4096, 32, 32, 8]
    assert (config["intermediate_size"], config["vocab_size"]) == (14336, 128256)
    assert config["rope_theta"] == 500000.0 and config["max_position_embeddings"] == 131072
    assert (
        config["rope_scaling"]["rope_type"] == "llama3" and config["rope_scaling"]["factor"] == 8.0
    )


def test_generated_folder_is_in_the_cache_and_reused(tmp_path: Path) -> None:
    """The folder lives under the engine cache; a second call finds it and rewrites nothing."""
    first = VllmModel.generated(cache_dir=tmp_path)
    stamp = (first.folder / "config.json").stat().st_mtime_ns
    second = VllmModel.generated(cache_dir=tmp_path)
    assert first.folder == second.folder and first.folder.is_relative_to(tmp_path)
    assert (second.folder / "config.json").stat().st_mtime_ns == stamp
    assert first.load_format == "dummy"


def test_config_round_trips_the_shape() -> None:
    """A config.json written for a shape reads back as that shape (rope, end ids and all)."""
    assert shape_from_config(llama_config(), "config.json") == FULL
    assert shape_from_config(llama_config(TINY), "config.json") == TINY


def test_the_published_config_reads_as_the_8b_shape() -> None:
    """Llama-3.1-8B-Instruct's own config.json (end ids in its order, no head_dim) gives the
    8B sizes and the same end ids."""
    config = {**llama_config(), "eos_token_id": [128001, 128008, 128009]}
    del config["head_dim"]
    shape = shape_from_config(config, "config.json")
    assert shape.parameters == FULL.parameters and shape.head_dim == 128
    assert sorted(shape.end_ids) == sorted(FULL.end_ids) and shape.rope_scaling == FULL.rope_scaling


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("rope_scaling", {"rope_type": "yarn"}, "rope_scaling is .*expected null or Llama 3.1's"),
        ("rope_scaling", {"rope_type": "llama3"}, "rope_scaling lacks or mistypes 'factor'"),
        ("eos_token_id", None, "eos_token_id is missing"),
        ("rope_theta", "big", "rope_theta is 'big'; expected a positive number"),
        ("num_attention_heads", 5, "5 query heads cannot share 8 KV heads"),
    ],
)
def test_a_config_the_shape_cannot_take_is_one_line(
    field: str, value: object, message: str
) -> None:
    config = {**llama_config(), field: value}
    with pytest.raises(ModelFileError, match=message) as caught:
        shape_from_config(config, "config.json")
    assert "\n" not in str(caught.value) and str(caught.value).startswith("config.json: ")


def test_missing_files_are_named_in_one_line(tmp_path: Path) -> None:
    """A folder with only config.json is refused naming the weights and the tokenizer."""
    folder = _user_folder(tmp_path / "m")
    with pytest.raises(ModelFileError) as caught:
        VllmModel.from_dir(folder)
    message = str(caught.value)
    assert "\n" not in message
    assert "lacks *.safetensors (the weights), tokenizer.json;" in message


def test_a_missing_folder_is_refused(tmp_path: Path) -> None:
    """A model path that is not a folder is one line."""
    with pytest.raises(ModelFileError, match="does not exist or is not a folder"):
        VllmModel.from_dir(tmp_path / "nowhere")


def test_user_folder_gives_its_shape_and_eos(tmp_path: Path) -> None:
    """A complete folder loads with real weights, its shape, and generation_config's EOS ids."""
    folder = _user_folder(
        tmp_path / "m", files=("model-00001-of-00002.safetensors", "tokenizer.json")
    )
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [128001, 128009]}))
    model = VllmModel.from_dir(folder)
    assert not model.dummy and model.load_format == "auto" and model.shape == FULL
    assert model.eos_token_ids == (128001, 128009)


def test_a_bad_config_field_is_named(tmp_path: Path) -> None:
    """A config whose sizes are not positive integers is refused naming the field."""
    config = {**llama_config(), "num_hidden_layers": "32"}
    folder = _user_folder(tmp_path / "m", config=config, files=("a.safetensors", "tokenizer.json"))
    with pytest.raises(ModelFileError, match="num_hidden_layers is '32'"):
        VllmModel.from_dir(folder)


def test_grouped_query_heads_default_to_the_attention_heads() -> None:
    """A config without num_key_value_heads has one KV head per attention head."""
    config = {k: v for k, v in llama_config().items() if k != "num_key_value_heads"}
    assert shape_from_config(config, "c").kv_heads == 32


def test_fields_a_config_leaves_out_take_llamaconfigs_defaults() -> None:
    """Without rope_theta and rms_norm_eps, the shape takes what vLLM's LlamaConfig would
    (10000 and 1e-6), not Llama 3.1's own values."""
    config = {k: v for k, v in llama_config().items() if k not in ("rope_theta", "rms_norm_eps")}
    shape = shape_from_config(config, "config.json")
    assert (shape.rope_theta, shape.rms_epsilon) == (10000.0, 1e-6)
    assert (FULL.rope_theta, FULL.rms_epsilon) != (10000.0, 1e-6)
