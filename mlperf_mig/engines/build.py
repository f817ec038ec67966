"""Build or reuse engines, and open them: the engine builder's entry points.

`EngineSpec.create` resolves what to build (backend, precision, recipe batch sizes, the model and
its hash); `build_engine` builds it into the cache or reuses the cached file; `open_backend` does
that and loads the engine in this process.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import attrs

from mlperf_mig.benchmark import get_benchmark
from mlperf_mig.engines import cache
from mlperf_mig.engines.backend import Backend
from mlperf_mig.engines.backends import backend_class, resolve_backend
from mlperf_mig.engines.models import ModelFile, generated_model, user_model
from mlperf_mig.engines.recipes import load_recipe
from mlperf_mig.engines.spec import PRECISIONS, SPEC_FORMAT, VARIANTS, EngineSpec
from mlperf_mig.errors import (
    BackendUnavailableError,
    EngineBuildError,
    EngineMismatchError,
    ModelFileError,
    PrecisionError,
    UnknownProfileError,
)

log = logging.getLogger(__name__)


@attrs.frozen(kw_only=True)
class BuiltEngine:
    """An engine file in the cache, checked, and whether it was reused rather than built."""

    spec: EngineSpec
    path: Path
    reused: bool


def create_spec(
    benchmark: str,
    *,
    backend: str,
    precision: str | None,
    variant: str,
    model_path: str | os.PathLike[str] | None,
    seed: int,
    gpu: str | None,
    mig_profile: str | None,
    loadgen_scenario: str,
    batch_sizes: tuple[int, ...] | None,
    cache_dir: str | os.PathLike[str] | None,
) -> EngineSpec:
    """See EngineSpec.create."""
    bench = get_benchmark(benchmark)
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
            f"seed {seed} is negative; the synthetic weights need a seed >= 0 (for example --seed 0)"
        )
    name = resolve_backend(backend)
    cls = backend_class(name)
    gpu_name, profile_name, compute_slices = _resolve_target(gpu, mig_profile)
    user_file = user_model(model_path, bench.name) if model_path is not None else None
    draft = EngineSpec(
        benchmark=bench.name, backend=name, variant=variant, gpu=gpu_name, mig_profile=profile_name
    )
    supported = cls.precisions(draft)
    if precision is None:
        precision = user_file.precision if user_file is not None else supported[0]
    _check_precision(attrs.evolve(draft, precision=precision), cls)
    if user_file is not None and user_file.precision != precision:
        raise PrecisionError(
            f"model file {str(user_file.path)!r} is a {user_file.precision} graph, not "
            f"{precision}; pass --precision {user_file.precision} or a {precision} graph"
        )
    recipe = load_recipe(bench.name, precision)
    if compute_slices is None and name == "tensorrt":
        compute_slices = recipe.whole_gpu_slices  # TensorRT without a named GPU: a whole GPU
    sizes = batch_sizes or (recipe.batch_size(compute_slices, loadgen_scenario),)
    model_file = user_file
    if model_file is None and cls.engine_suffix:
        model_file = generated_model(
            bench.name, variant=variant, precision=precision, seed=seed, cache_dir=cache_dir
        )
    return attrs.evolve(
        draft,
        precision=precision,
        model=model_file.sha256 if model_file is not None else None,
        model_path=str(user_file.path) if user_file is not None else None,
        seed=seed,
        batch_sizes=sizes,
        seq_buckets=recipe.seq_buckets,
        workspace_mib=recipe.workspace_mib if name == "tensorrt" else None,
        backend_version=cls.version(),
    )


def _resolve_target(
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


def _check_precision(spec: EngineSpec, cls: type[Backend]) -> None:
    supported = cls.precisions(spec)
    if spec.precision not in supported:
        where = f" on {spec.gpu}" if spec.gpu else " on the CPU"
        raise PrecisionError(
            f"the {spec.backend} backend cannot compute {spec.precision}{where}; "
            f"it can do {', '.join(supported)}"
        )


def _check_backend(spec: EngineSpec) -> type[Backend]:
    cls = backend_class(spec.backend)
    reason = cls.availability()
    if reason is not None:
        raise BackendUnavailableError(f"backend {spec.backend!r} cannot run here: {reason}")
    installed = cls.version()
    if spec.backend_version is not None and spec.backend_version != installed:
        raise EngineMismatchError(
            f"the spec is for {spec.backend} {spec.backend_version} but {installed} is "
            "installed; create the spec again (EngineSpec.create) on this machine"
        )
    _check_precision(spec, cls)
    return cls


def engine_path(spec: EngineSpec, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where the engine of `spec` lives in the cache."""
    cls = backend_class(spec.backend)
    return cache.cache_root(cache_dir) / "engines" / (spec.file_name + cls.engine_suffix)


def _model_file(spec: EngineSpec, cache_dir: str | os.PathLike[str] | None) -> ModelFile:
    """The ONNX file the spec names, checked against the spec's hash."""
    if spec.model_path is not None:
        model = user_model(spec.model_path, spec.benchmark)
        if model.sha256 != spec.model:
            raise ModelFileError(
                f"model file {spec.model_path!r} changed since the spec was created "
                f"(sha256 {model.sha256[:12]}..., expected {str(spec.model)[:12]}...); "
                "create the spec again"
            )
        return model
    model = generated_model(
        spec.benchmark,
        variant=spec.variant,
        precision=spec.precision,
        seed=spec.seed,
        cache_dir=cache_dir,
    )
    if model.sha256 != spec.model:
        raise EngineBuildError(
            f"the generated {spec.benchmark} graph hashes to {model.sha256[:12]}..., but the "
            f"spec expects {str(spec.model)[:12]}... (made by another mlperf-mig version?); "
            "create the spec again on this machine"
        )
    return model


def build_engine(spec: EngineSpec, cache_dir: str | os.PathLike[str] | None = None) -> BuiltEngine:
    """The engine file of `spec`: reused from the cache when intact, else built and cached."""
    cls = _check_backend(spec)
    if not cls.engine_suffix:
        raise EngineBuildError(f"the {spec.backend} backend has no engine file to build")
    path = engine_path(spec, cache_dir)
    made_from = {
        "cache_key": spec.cache_key,
        "backend_version": cls.version(),
        "spec_format": SPEC_FORMAT,
    }
    if cache.read_valid(path, made_from) is not None:
        log.info("reusing engine %s", path)
        return BuiltEngine(spec=spec, path=path, reused=True)
    model = _model_file(spec, cache_dir)
    log.info("building %s engine %s from %s", spec.backend, path, model.path)
    cache.write_cached(
        path,
        lambda tmp: cls.build(spec, model.path, tmp),
        {**made_from, "spec": spec.to_dict()},
    )
    return BuiltEngine(spec=spec, path=path, reused=False)


def open_backend(
    spec: EngineSpec,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    threads: int | None = None,
) -> Backend:
    """Build or reuse the engine of `spec`, then load it for inference in this process."""
    cls = _check_backend(spec)
    if not cls.engine_suffix:
        return cls.load(spec, None, threads=threads)
    built = build_engine(spec, cache_dir)
    return cls.load(spec, built.path, threads=threads)
