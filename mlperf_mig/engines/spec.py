"""EngineSpec: everything that determines an engine file, with a stable cache key and file name.

A spec is a plain record: engines/resolve.py `resolve_spec` resolves one (backend, precision,
recipe batch sizes, the model and its hash; it asks the backend table, which is why it is not
here: the backends name this record); engines/build.py builds, caches and opens what a spec names.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from typing import Any, SupportsInt

import attrs

from mlperf_mig.workloads import Workload, get_workload

PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "bf16", "fp8", "int8")  # bf16, fp8: vLLM
VARIANTS: tuple[str, ...] = ("full", "tiny")

# Bump when the meaning of a field or the engine file layout changes: every cached engine is rebuilt.
SPEC_FORMAT = 1

# Fields that do not change the engine bytes, so they stay out of the cache key.
_NOT_IN_KEY = ("model_path",)


def _positive_ints(values: Iterable[SupportsInt | str]) -> tuple[int, ...]:
    return tuple(sorted({int(v) for v in values}))


def _check_positive(
    instance: EngineSpec, attribute: attrs.Attribute, value: tuple[int, ...]
) -> None:
    if any(v < 1 for v in value):
        raise ValueError(f"{attribute.name} must be positive integers, got {value}")


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-")


@attrs.frozen(kw_only=True)
class EngineSpec:
    """What an engine is built from and for; two equal specs give interchangeable engines.

    `model` is the SHA-256 of the ONNX file's bytes (None for the null backend). `model_path` names
    a user-supplied ONNX file; None means the generated graph of (benchmark, variant, precision,
    seed), which the model cache regenerates when it is missing. For ONNX Runtime a spec with a
    `gpu` runs on the CUDA provider, one without on the CPU provider. `batch_sizes` are the batch
    sizes the engine is optimised for (one TensorRT optimisation profile each; the largest is the
    most a `run` call may pass); `seq_buckets` are BERT's sequence-length buckets (empty for
    ResNet50), the largest being the official 384.

    Build specs with `resolve_spec` (engines/resolve.py), which resolves the backend, the model and the recipe;
    the plain constructor does no I/O.
    """

    benchmark: Workload = attrs.field(converter=get_workload)  # a name read back is resolved here
    backend: str  # a name of the backend table, checked where the spec is resolved or opened
    precision: str = attrs.field(default="fp32", validator=attrs.validators.in_(PRECISIONS))
    variant: str = attrs.field(default="full", validator=attrs.validators.in_(VARIANTS))
    model: str | None = None
    model_path: str | None = None
    seed: int = 0
    batch_sizes: tuple[int, ...] = attrs.field(
        default=(1,), converter=_positive_ints, validator=_check_positive
    )
    seq_buckets: tuple[int, ...] = attrs.field(
        default=(), converter=_positive_ints, validator=_check_positive
    )
    workspace_mib: int | None = None
    gpu: str | None = None
    mig_profile: str | None = None
    backend_version: str | None = None

    @batch_sizes.validator
    def _batch_sizes_not_empty(self, attribute: attrs.Attribute, value: tuple[int, ...]) -> None:
        if not value:
            raise ValueError("batch_sizes must name at least one batch size")

    @property
    def max_batch_size(self) -> int:
        return self.batch_sizes[-1]

    @property
    def seq_len(self) -> int | None:
        """The longest sequence the engine takes (BERT), None for ResNet50."""
        return self.seq_buckets[-1] if self.seq_buckets else None

    @property
    def cache_key(self) -> str:
        """A stable hex digest of every field that changes the engine bytes."""
        fields = {k: v for k, v in self.to_dict().items() if k not in _NOT_IN_KEY}
        fields["format"] = SPEC_FORMAT
        canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:20]

    @property
    def file_name(self) -> str:
        """A readable file name that still is unique per cache key (suffix added by the backend)."""
        parts = [self.benchmark.name, self.variant if self.model_path is None else "user"]
        parts += [self.precision, self.backend]
        if self.gpu:
            parts.append(_slug(self.gpu))
        if self.mig_profile:
            parts.append(_slug(self.mig_profile))
        parts.append(f"b{self.max_batch_size}")
        if self.seq_len:
            parts.append(f"s{self.seq_len}")
        parts.append(self.cache_key[:12])
        return "-".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (the workload by name), as the cache key and engine files hold it."""
        return {**attrs.asdict(self, recurse=False), "benchmark": self.benchmark.name}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EngineSpec:
        return cls(**data)
