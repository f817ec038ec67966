"""What vLLM loads: the generated Llama-3.1-8B config (dummy weights) and a user's folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlperf_mig.engines.backends.vllm.model import (
    LLAMA_3_1_8B,
    LlamaShape,
    VllmModel,
    llama_config,
)
from mlperf_mig.errors import ModelFileError


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
    """A config.json written for a shape reads back as that shape."""
    assert LlamaShape.from_config(llama_config(), "config.json") == LLAMA_3_1_8B


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
    assert not model.dummy and model.load_format == "auto" and model.shape == LLAMA_3_1_8B
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
    assert LlamaShape.from_config(config, "c").num_key_value_heads == 32
