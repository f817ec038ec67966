"""What vLLM loads: a Llama decoder's folder, and the shape (shape.DecoderShape) it describes.

Without user weights, vLLM's dummy load format (random weights, no download) runs on a generated
folder holding only the config.json of Llama-3.1-8B-Instruct, the MLPerf llama3.1-8b model: a
performance run needs the shape, never the 16 GB of weights. With user weights, `--model` names a
Hugging Face folder whose files are checked before a worker starts.

The shape is the workload's own (workloads/llama3_1_8b/shape.py): the plan's fit and vLLM's
settings (settings.py) size the same weights and KV cache from it (reference/llm.md section 4: 8B
BF16 is about 16 GB, its KV cache 128 KiB per token).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from mlperf_mig._io import atomic_write_json, read_small_text
from mlperf_mig.engines.cache import cache_root
from mlperf_mig.errors import ModelFileError
from mlperf_mig.workloads.llama3_1_8b.shape import FULL, DecoderShape, RopeScaling

CONFIG_NAME = "config.json"
TOKENIZER_NAME = "tokenizer.json"
WEIGHTS_PATTERN = "*.safetensors"
GENERATION_CONFIG_NAME = "generation_config.json"
CONFIG_LIMIT = 1 << 20  # a config.json is a few KiB


def shape_from_config(config: Mapping[str, Any], source: str) -> DecoderShape:
    """The decoder shape a Hugging Face Llama config.json describes; ModelFileError in one line
    naming the bad field. The end ids are the config's `eos_token_id` (one id or a list, the
    first taken as the tokenizer's end token)."""
    sizes = {
        field: _config_int(config, key, source)
        for field, key in (
            ("hidden", "hidden_size"),
            ("layers", "num_hidden_layers"),
            ("heads", "num_attention_heads"),
            ("intermediate", "intermediate_size"),
            ("vocab_size", "vocab_size"),
            ("max_positions", "max_position_embeddings"),
            ("bos_token_id", "bos_token_id"),
        )
    }
    sizes["kv_heads"] = (
        _config_int(config, "num_key_value_heads", source)
        if "num_key_value_heads" in config
        else sizes["heads"]
    )
    sizes["head_dim"] = (
        _config_int(config, "head_dim", source)
        if config.get("head_dim") is not None
        else sizes["hidden"] // sizes["heads"]
    )
    end_ids = _eos_ids(config.get("eos_token_id"), source)
    if not end_ids:
        raise ModelFileError(f"{source}: eos_token_id is missing; expected a token id or a list")
    tied = config.get("tie_word_embeddings", False)
    if not isinstance(tied, bool):
        raise ModelFileError(f"{source}: tie_word_embeddings is {tied!r}, not true or false")
    try:
        return DecoderShape(
            **sizes,
            # where the config leaves them out, what transformers' LlamaConfig (and so vLLM)
            # takes: rope_theta 10000, rms_norm_eps 1e-6
            rope_theta=_config_float(config, "rope_theta", source, default=10000.0),
            rope_scaling=_rope_scaling(config.get("rope_scaling"), source),
            rms_epsilon=_config_float(config, "rms_norm_eps", source, default=1e-6),
            eos_token_id=end_ids[0],
            stop_token_ids=end_ids[1:],
            tied_embeddings=tied,
        )
    except ValueError as exc:
        raise ModelFileError(f"{source}: {exc}") from None


def _config_int(config: Mapping[str, Any], name: str, source: str) -> int:
    value = config.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ModelFileError(f"{source}: {name} is {value!r}; expected a non-negative integer")
    return value


def _config_float(config: Mapping[str, Any], name: str, source: str, *, default: float) -> float:
    value = config.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ModelFileError(f"{source}: {name} is {value!r}; expected a positive number")
    return float(value)


def _rope_scaling(value: object, source: str) -> RopeScaling | None:
    """Llama 3.1's rope scaling (`rope_type` "llama3"); None when the config has none."""
    if value is None:
        return None
    if not isinstance(value, Mapping) or value.get("rope_type") != "llama3":
        raise ModelFileError(
            f"{source}: rope_scaling is {value!r}; expected null or Llama 3.1's "
            '(rope_type "llama3")'
        )
    try:
        return RopeScaling(
            factor=float(value["factor"]),
            low_freq_factor=float(value["low_freq_factor"]),
            high_freq_factor=float(value["high_freq_factor"]),
            original_max_positions=int(value["original_max_position_embeddings"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelFileError(f"{source}: rope_scaling lacks or mistypes {exc}") from None


# The fields of Llama-3.1-8B-Instruct's config.json that the shape does not carry.
_LLAMA_CONFIG_EXTRA: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "mlp_bias": False,
    "hidden_act": "silu",
    "initializer_range": 0.02,
    "pretraining_tp": 1,
    "torch_dtype": "bfloat16",
    "use_cache": True,
}


def llama_config(shape: DecoderShape = FULL) -> dict[str, Any]:
    """A config.json for LlamaForCausalLM of `shape` (default Llama-3.1-8B-Instruct's)."""
    scaling = shape.rope_scaling
    return {
        **_LLAMA_CONFIG_EXTRA,
        "hidden_size": shape.hidden,
        "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads,
        "head_dim": shape.head_dim,
        "intermediate_size": shape.intermediate,
        "vocab_size": shape.vocab_size,
        "max_position_embeddings": shape.max_positions,
        "rms_norm_eps": shape.rms_epsilon,
        "rope_theta": shape.rope_theta,
        "rope_scaling": None
        if scaling is None
        else {
            "factor": scaling.factor,
            "low_freq_factor": scaling.low_freq_factor,
            "high_freq_factor": scaling.high_freq_factor,
            "original_max_position_embeddings": scaling.original_max_positions,
            "rope_type": "llama3",
        },
        "bos_token_id": shape.bos_token_id,
        "eos_token_id": list(shape.end_ids),
        "tie_word_embeddings": shape.tied_embeddings,
    }


@attrs.frozen(kw_only=True)
class VllmModel:
    """A folder vLLM loads: generated (config only, dummy weights) or the user's weights."""

    folder: Path
    shape: DecoderShape
    dummy: bool  # random weights: vLLM's load_format "dummy"
    eos_token_ids: tuple[int, ...]  # where generation stops (empty: never before max tokens)

    @property
    def load_format(self) -> str:
        return "dummy" if self.dummy else "auto"

    @classmethod
    def generated(
        cls, shape: DecoderShape = FULL, *, cache_dir: str | os.PathLike[str] | None = None
    ) -> VllmModel:
        """The generated folder of `shape` in the engine cache (written once, atomically).

        Random weights have no meaningful end-of-sequence token: every request generates its
        maximum number of tokens, so that a run's token count does not depend on chance.
        """
        config = llama_config(shape)
        text = json.dumps(config, sort_keys=True)
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
        folder = cache_root(cache_dir) / "vllm" / f"llama-dummy-{digest}"
        path = folder / CONFIG_NAME
        if not _holds_json(path, config):
            atomic_write_json(path, config)
        return cls(folder=folder, shape=shape, dummy=True, eos_token_ids=())

    @classmethod
    def from_dir(cls, folder: str | os.PathLike[str]) -> VllmModel:
        """The user's Hugging Face folder, checked (files, config) before any worker starts."""
        path = Path(folder).expanduser()
        check_model_dir(path)
        config = _read_json(path / CONFIG_NAME)
        source = str(path / CONFIG_NAME)
        generation = path / GENERATION_CONFIG_NAME
        eos_source = _read_json(generation) if generation.is_file() else config
        return cls(
            folder=path,
            shape=shape_from_config(config, source),
            dummy=False,
            eos_token_ids=_eos_ids(
                eos_source.get("eos_token_id", config.get("eos_token_id")), source
            ),
        )


def missing_model_files(folder: Path) -> list[str]:
    """What a Hugging Face model folder for vLLM lacks: config, weights, tokenizer."""
    missing = []
    if not (folder / CONFIG_NAME).is_file():
        missing.append(CONFIG_NAME)
    if not any(p.is_file() for p in folder.glob(WEIGHTS_PATTERN)):
        missing.append(f"{WEIGHTS_PATTERN} (the weights)")
    if not (folder / TOKENIZER_NAME).is_file():
        missing.append(TOKENIZER_NAME)
    return missing


def check_model_dir(folder: Path) -> None:
    """Raise ModelFileError, in one line naming what is missing, unless `folder` holds a Hugging
    Face model (config.json, *.safetensors, tokenizer.json)."""
    if not folder.is_dir():
        raise ModelFileError(
            f"model folder {str(folder)!r} does not exist or is not a folder; pass the Hugging "
            "Face folder of Llama-3.1-8B-Instruct (config.json, *.safetensors, tokenizer.json)"
        )
    missing = missing_model_files(folder)
    if missing:
        raise ModelFileError(
            f"model folder {str(folder)!r} lacks {', '.join(missing)}; pass the Hugging Face "
            "folder of Llama-3.1-8B-Instruct (config.json, *.safetensors, tokenizer.json)"
        )


def _read_json(path: Path) -> dict[str, Any]:
    """A JSON object of the user's model folder (links followed: a Hugging Face cache snapshot
    links its files into the cache's blobs)."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(CONFIG_LIMIT + 1)
        if len(raw) > CONFIG_LIMIT:
            raise ValueError(f"larger than {CONFIG_LIMIT} bytes")
        data = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelFileError(f"cannot read {str(path)!r} as JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ModelFileError(f"{str(path)!r} holds {type(data).__name__}, not a JSON object")
    return data


def _holds_json(path: Path, expected: Mapping[str, Any]) -> bool:
    try:
        return bool(json.loads(read_small_text(path)) == expected)
    except (OSError, ValueError):
        return False


def _eos_ids(value: object, source: str) -> tuple[int, ...]:
    values: list[object] = (
        value if isinstance(value, list) else [value] if value is not None else []
    )
    ids = [v for v in values if isinstance(v, int) and not isinstance(v, bool) and v >= 0]
    if len(ids) != len(values):
        raise ModelFileError(f"{source}: eos_token_id is {value!r}; expected token ids")
    return tuple(ids)
