"""What vLLM loads: the shape of a Llama decoder, and the folder it reads it from.

Without user weights, vLLM's dummy load format (random weights, no download) runs on a generated
folder holding only the config.json of Llama-3.1-8B-Instruct, the MLPerf llama3.1-8b model: a
performance run needs the shape, never the 16 GB of weights. With user weights, `--model` names a
Hugging Face folder whose files are checked before a worker starts.

The shape also sizes what a slice must hold (settings.py): weights at a precision, and the KV cache
per token (reference/llm.md section 4: 8B BF16 is about 16 GB, its KV cache 128 KiB per token).
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

CONFIG_NAME = "config.json"
TOKENIZER_NAME = "tokenizer.json"
WEIGHTS_PATTERN = "*.safetensors"
GENERATION_CONFIG_NAME = "generation_config.json"
# Bytes of one weight per precision; vLLM's fp8 (online or a pre-quantized checkpoint) keeps the
# embeddings and the output head in the activation dtype (16 bits).
WEIGHT_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1}
ACTIVATION_BYTES = 2  # bf16 / fp16 activations and KV cache ("auto" cache dtype)
CONFIG_LIMIT = 1 << 20  # a config.json is a few KiB


def _positive(_instance: object, attribute: attrs.Attribute, value: int) -> None:
    if value < 1:
        raise ValueError(f"{attribute.name} must be positive, got {value}")


@attrs.frozen(kw_only=True)
class LlamaShape:
    """The sizes of a Llama-architecture decoder (what vLLM's LlamaForCausalLM builds)."""

    hidden_size: int = attrs.field(validator=_positive)
    num_hidden_layers: int = attrs.field(validator=_positive)
    num_attention_heads: int = attrs.field(validator=_positive)
    num_key_value_heads: int = attrs.field(validator=_positive)
    intermediate_size: int = attrs.field(validator=_positive)
    vocab_size: int = attrs.field(validator=_positive)
    tie_word_embeddings: bool = False

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def embedding_parameters(self) -> int:
        """The token embedding and the output head (one matrix when tied)."""
        return self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)

    @property
    def layer_parameters(self) -> int:
        """Every decoder layer's linear weights and norms (what fp8 quantizes, but the norms)."""
        kv_width = self.num_key_value_heads * self.head_dim
        attention = self.hidden_size * (self.hidden_size + 2 * kv_width) + self.hidden_size**2
        mlp = 3 * self.hidden_size * self.intermediate_size
        return self.num_hidden_layers * (attention + mlp + 2 * self.hidden_size)

    @property
    def parameters(self) -> int:
        return self.embedding_parameters + self.layer_parameters + self.hidden_size

    def weight_bytes(self, precision: str) -> int:
        """Bytes of the weights on the device at `precision` (bf16, fp16 or fp8)."""
        per_weight = WEIGHT_BYTES[precision]
        return (
            self.embedding_parameters + self.hidden_size
        ) * ACTIVATION_BYTES + self.layer_parameters * per_weight

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of every layer for one token: 128 KiB for Llama-3.1-8B."""
        return (
            2 * self.num_hidden_layers * self.num_key_value_heads * self.head_dim * ACTIVATION_BYTES
        )

    @classmethod
    def from_config(cls, config: Mapping[str, Any], source: str) -> LlamaShape:
        """The shape a Hugging Face config.json describes; ModelFileError naming the bad field."""
        fields: dict[str, Any] = {}
        for name in (
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "vocab_size",
        ):
            fields[name] = _config_int(config, name, source)
        fields["num_key_value_heads"] = (
            _config_int(config, "num_key_value_heads", source)
            if "num_key_value_heads" in config
            else fields["num_attention_heads"]
        )
        tied = config.get("tie_word_embeddings", False)
        if not isinstance(tied, bool):
            raise ModelFileError(f"{source}: tie_word_embeddings is {tied!r}, not true or false")
        try:
            return cls(**fields, tie_word_embeddings=tied)
        except ValueError as exc:
            raise ModelFileError(f"{source}: {exc}") from None


def _config_int(config: Mapping[str, Any], name: str, source: str) -> int:
    value = config.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ModelFileError(f"{source}: {name} is {value!r}; expected a positive integer")
    return value


# Llama-3.1-8B-Instruct, the model of MLPerf's llama3.1-8b (its config.json, shape and rope).
LLAMA_3_1_8B = LlamaShape(
    hidden_size=4096,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    intermediate_size=14336,
    vocab_size=128256,
)
LLAMA_3_1_8B_EOS = (128001, 128008, 128009)
_LLAMA_3_1_8B_EXTRA: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "mlp_bias": False,
    "hidden_act": "silu",
    "initializer_range": 0.02,
    "rms_norm_eps": 1e-05,
    "bos_token_id": 128000,
    "eos_token_id": list(LLAMA_3_1_8B_EOS),
    "max_position_embeddings": 131072,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "pretraining_tp": 1,
    "torch_dtype": "bfloat16",
    "use_cache": True,
}


def llama_config(shape: LlamaShape = LLAMA_3_1_8B) -> dict[str, Any]:
    """A config.json for LlamaForCausalLM of `shape` with Llama-3.1-8B-Instruct's other fields."""
    return {
        **_LLAMA_3_1_8B_EXTRA,
        "hidden_size": shape.hidden_size,
        "num_hidden_layers": shape.num_hidden_layers,
        "num_attention_heads": shape.num_attention_heads,
        "num_key_value_heads": shape.num_key_value_heads,
        "intermediate_size": shape.intermediate_size,
        "vocab_size": shape.vocab_size,
        "tie_word_embeddings": shape.tie_word_embeddings,
    }


@attrs.frozen(kw_only=True)
class VllmModel:
    """A folder vLLM loads: generated (config only, dummy weights) or the user's weights."""

    folder: Path
    shape: LlamaShape
    dummy: bool  # random weights: vLLM's load_format "dummy"
    eos_token_ids: tuple[int, ...]  # where generation stops (empty: never before max tokens)

    @property
    def load_format(self) -> str:
        return "dummy" if self.dummy else "auto"

    @classmethod
    def generated(
        cls, shape: LlamaShape = LLAMA_3_1_8B, *, cache_dir: str | os.PathLike[str] | None = None
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
            shape=LlamaShape.from_config(config, source),
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
