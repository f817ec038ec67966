"""Build or reuse engines, and open them: the engine builder's entry points.

`resolve_spec` (engines/resolve.py) resolves what to build; `build_engine` builds it into the
cache or reuses the cached file; `open_backend` does that and loads the engine in this process.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import attrs

from mlperf_mig.engines import cache
from mlperf_mig.engines.backend import Backend
from mlperf_mig.engines.backends import backend_class
from mlperf_mig.engines.models import ModelFile, generated_model, user_model
from mlperf_mig.engines.resolve import check_precision
from mlperf_mig.engines.spec import SPEC_FORMAT, EngineSpec
from mlperf_mig.errors import (
    BackendUnavailableError,
    EngineBuildError,
    EngineMismatchError,
    ModelFileError,
)

log = logging.getLogger(__name__)


@attrs.frozen(kw_only=True)
class BuiltEngine:
    """An engine file in the cache, checked, and whether it was reused rather than built."""

    spec: EngineSpec
    path: Path
    reused: bool


def _check_backend(spec: EngineSpec) -> type[Backend]:
    cls = backend_class(spec.backend)
    reason = cls.availability()
    if reason is not None:
        raise BackendUnavailableError(f"backend {spec.backend!r} cannot run here: {reason}")
    installed = cls.version()
    if spec.backend_version is not None and spec.backend_version != installed:
        raise EngineMismatchError(
            f"the spec is for {spec.backend} {spec.backend_version} but {installed} is "
            "installed; resolve the spec again (resolve_spec) on this machine"
        )
    check_precision(spec, cls)
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
