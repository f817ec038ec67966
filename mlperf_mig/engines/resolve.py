"""Resolving an engine spec: which backend, precision, batch sizes and model a request means.

Here rather than in engines/spec.py because it asks the backend table, and the backends' interface
names the spec record: the record stays below both.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import attrs

from mlperf_mig.engines.backends import backend_class, resolve_backend
from mlperf_mig.engines.spec import PRECISIONS, VARIANTS, EngineSpec
from mlperf_mig.errors import ModelFileError, PrecisionError, UnknownProfileError
from mlperf_mig.workloads import Workload

if TYPE_CHECKING:
    from mlperf_mig.engines.backend import Backend


def resolve_spec(
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
    draft = EngineSpec(
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
        compute_slices = recipe.whole_gpu_slices  # a GPU backend without a named GPU: a whole GPU
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
