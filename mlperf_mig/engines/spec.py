"""EngineSpec: everything that determines an engine file, with a stable cache key and file name.

`EngineSpec.create` resolves what to build (backend, precision, recipe batch sizes, the model and
its hash); engines/build.py builds, caches and opens what a spec names.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, SupportsInt

import attrs

from mlperf_mig.engines.backends import backend_class, backend_names, resolve_backend
from mlperf_mig.errors import ModelFileError, PrecisionError, UnknownProfileError
from mlperf_mig.workloads import Workload, get_workload

if TYPE_CHECKING:
    from mlperf_mig.engines.backend import Backend

PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "int8")
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


def _known_backend(instance: EngineSpec, attribute: attrs.Attribute, value: str) -> None:
    if value not in backend_names():
        raise ValueError(
            f"{attribute.name} must be one of {', '.join(backend_names())}, got {value!r}"
        )


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

    Build specs with `EngineSpec.create`, which resolves the backend, the model and the recipe;
    the plain constructor does no I/O.
    """

    benchmark: Workload = attrs.field(converter=get_workload)  # a name read back is resolved here
    backend: str = attrs.field(validator=_known_backend)
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

    @classmethod
    def create(
        cls,
        benchmark: Workload | str,
        *,
        backend: str = "auto",
        precision: str | None = None,
        variant: str = "full",
        model_path: str | os.PathLike[str] | None = None,
        seed: int = 0,
        gpu: str | None = None,
        mig_profile: str | None = None,
        loadgen_scenario: str = "Offline",
        batch_sizes: tuple[int, ...] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> EngineSpec:
        """Resolve a complete spec: backend, precision, recipe values and the model's hash.

        Generates (or reuses) the synthetic ONNX graph, or checks and hashes the user's file at
        `model_path`. With `gpu` and `mig_profile` the batch sizes are the recipe's for that
        profile size; without a GPU they are the recipe's CPU batch sizes.
        """
        from mlperf_mig.engines.models import generated_model, user_model
        from mlperf_mig.engines.recipes import load_recipe

        if precision is not None and precision not in PRECISIONS:
            raise PrecisionError(
                f"unknown precision {precision!r}; expected one of {', '.join(PRECISIONS)}"
            )
        if variant not in VARIANTS:
            raise ModelFileError(
                f"unknown model variant {variant!r}; expected one of {', '.join(VARIANTS)}"
            )
        if seed < 0:
            raise ModelFileError(
                f"seed {seed} is negative; the synthetic weights need a seed >= 0 "
                "(for example --seed 0)"
            )
        name = resolve_backend(backend)
        backend_cls = backend_class(name)
        gpu_name, profile_name, compute_slices = _resolve_device(gpu, mig_profile)
        draft = cls(
            benchmark=benchmark,  # a name (the engines CLI's) is resolved by the field
            backend=name,
            variant=variant,
            gpu=gpu_name,
            mig_profile=profile_name,
        )
        bench = draft.benchmark
        user_file = user_model(model_path, bench) if model_path is not None else None
        supported = backend_cls.precisions(draft)
        if precision is None:
            precision = user_file.precision if user_file is not None else supported[0]
        check_precision(attrs.evolve(draft, precision=precision), backend_cls)
        if user_file is not None and user_file.precision != precision:
            raise PrecisionError(
                f"model file {str(user_file.path)!r} is a {user_file.precision} graph, not "
                f"{precision}; pass --precision {user_file.precision} or a {precision} graph"
            )
        recipe = load_recipe(bench, precision)
        if compute_slices is None and backend_cls.needs_gpu:
            compute_slices = (
                recipe.whole_gpu_slices
            )  # a GPU backend without a named GPU: a whole GPU
        sizes = batch_sizes or (recipe.batch_size(compute_slices, loadgen_scenario),)
        model_file = user_file
        if model_file is None and backend_cls.engine_suffix:
            model_file = generated_model(
                bench, variant=variant, precision=precision, seed=seed, cache_dir=cache_dir
            )
        return attrs.evolve(
            draft,
            precision=precision,
            model=model_file.sha256 if model_file is not None else None,
            model_path=str(user_file.path) if user_file is not None else None,
            seed=seed,
            batch_sizes=sizes,
            seq_buckets=recipe.seq_buckets,
            workspace_mib=recipe.workspace_mib if backend_cls.uses_workspace else None,
            backend_version=backend_cls.version(),
        )


def _resolve_device(
    gpu: str | None, mig_profile: str | None
) -> tuple[str | None, str | None, int | None]:
    """(GPU name, profile name, compute slices) from the registry; all None for the CPU."""
    if gpu is None:
        if mig_profile is not None:
            raise UnknownProfileError(
                f"MIG profile {mig_profile!r} needs its GPU (profile names differ between GPUs); "
                "pass the GPU too (--gpu)"
            )
        return None, None, None
    from mlperf_mig.registry import default_catalog

    gpu_record = default_catalog().get(gpu)
    if mig_profile is None:
        return gpu_record.name, None, gpu_record.compute_slices
    profile = gpu_record.profile(mig_profile)
    return gpu_record.name, profile.name, profile.compute_slices


def check_precision(spec: EngineSpec, backend_cls: type[Backend]) -> None:
    """Refuse a precision the spec's backend cannot compute on the spec's device."""
    supported = backend_cls.precisions(spec)
    if spec.precision not in supported:
        where = f" on {spec.gpu}" if spec.gpu else " on the CPU"
        raise PrecisionError(
            f"the {spec.backend} backend cannot compute {spec.precision}{where}; "
            f"it can do {', '.join(supported)}"
        )
