"""The engine builder: model graphs, engine specs and cache, and the inference backends.

Everything is exported lazily, so that `import mlperf_mig.engines` imports neither onnx nor
onnxruntime nor TensorRT; each name loads its module on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlperf_mig.engines.backend import Backend, DeviceReport
    from mlperf_mig.engines.backends import (
        BackendInfo,
        available_backends,
        backend_class,
        backend_info,
        backend_names,
        find_backend,
        iter_backend_infos,
        resolve_backend,
    )
    from mlperf_mig.engines.backends.null import NullBackend
    from mlperf_mig.engines.build import BuiltEngine, build_engine, engine_path, open_backend
    from mlperf_mig.engines.cache import cache_root
    from mlperf_mig.engines.models import (
        ModelFile,
        check_interface,
        generate_model,
        generated_model,
        user_model,
    )
    from mlperf_mig.engines.recipes import Recipe, load_recipe
    from mlperf_mig.engines.resolve import resolve_spec
    from mlperf_mig.engines.spec import PRECISIONS, VARIANTS, EngineSpec

_EXPORTS = {
    "Backend": "backend",
    "DeviceReport": "backend",
    "BackendInfo": "backends",
    "available_backends": "backends",
    "backend_class": "backends",
    "backend_info": "backends",
    "backend_names": "backends",
    "find_backend": "backends",
    "iter_backend_infos": "backends",
    "resolve_backend": "backends",
    "BuiltEngine": "build",
    "build_engine": "build",
    "engine_path": "build",
    "open_backend": "build",
    "cache_root": "cache",
    "ModelFile": "models",
    "check_interface": "models",
    "generate_model": "models",
    "generated_model": "models",
    "user_model": "models",
    "NullBackend": "backends.null",
    "Recipe": "recipes",
    "load_recipe": "recipes",
    "PRECISIONS": "spec",
    "VARIANTS": "spec",
    "EngineSpec": "spec",
    "resolve_spec": "resolve",
}

__all__ = [
    "PRECISIONS",
    "VARIANTS",
    "Backend",
    "BackendInfo",
    "BuiltEngine",
    "DeviceReport",
    "EngineSpec",
    "ModelFile",
    "NullBackend",
    "Recipe",
    "available_backends",
    "backend_class",
    "backend_info",
    "backend_names",
    "build_engine",
    "cache_root",
    "check_interface",
    "engine_path",
    "find_backend",
    "generate_model",
    "generated_model",
    "iter_backend_infos",
    "load_recipe",
    "open_backend",
    "resolve_backend",
    "resolve_spec",
    "user_model",
]


def __getattr__(name: str) -> object:  # every exported name is typed by the imports above
    try:
        module = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def __dir__() -> list[str]:
    return __all__
