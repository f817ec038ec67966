"""The one registry of inference backends, read by the API and the CLI alike.

Each backend is a module and a class name; the module is imported only when the backend is asked
for, so that `import mlperf_mig.engines` works without onnxruntime or TensorRT installed.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator

import attrs

from mlperf_mig.engines.backend import Backend
from mlperf_mig.errors import BackendUnavailableError

# name -> (module, class), in order of preference for "auto".
_BACKENDS: dict[str, tuple[str, str]] = {
    "tensorrt": ("mlperf_mig.engines.tensorrt", "TensorRTBackend"),
    "onnxruntime": ("mlperf_mig.engines.onnxruntime", "OnnxRuntimeBackend"),
    "null": ("mlperf_mig.engines.null", "NullBackend"),
}
BACKEND_NAMES: tuple[str, ...] = tuple(_BACKENDS)


@attrs.frozen(kw_only=True)
class BackendInfo:
    """One backend and whether it can run on this machine."""

    name: str
    available: bool
    reason: str | None  # why it cannot run; None when it can
    version: str | None


def backend_class(name: str) -> type[Backend]:
    """The class of backend `name`; raises BackendUnavailableError for unknown or missing ones."""
    try:
        module_name, class_name = _BACKENDS[name]
    except KeyError:
        raise BackendUnavailableError(
            f"unknown backend {name!r}; expected one of auto, {', '.join(_BACKENDS)}"
        ) from None
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
        raise BackendUnavailableError(
            f"the {name} backend is not part of this installation of mlperf-mig"
        ) from None
    return getattr(module, class_name)


def backend_info(name: str) -> BackendInfo:
    try:
        cls = backend_class(name)
    except BackendUnavailableError as exc:
        return BackendInfo(name=name, available=False, reason=str(exc), version=None)
    reason = cls.availability()
    version = cls.version() if reason is None else None
    return BackendInfo(name=name, available=reason is None, reason=reason, version=version)


def iter_backend_infos() -> Iterator[BackendInfo]:
    return (backend_info(name) for name in _BACKENDS)


def available_backends() -> tuple[str, ...]:
    """Names of the backends that can run here, preferred first."""
    return tuple(info.name for info in iter_backend_infos() if info.available)


def resolve_backend(name: str = "auto") -> str:
    """The backend to use for `name`: "auto" means "tensorrt" where TensorRT and a GPU are usable,
    else "onnxruntime".

    An explicit name that cannot run here raises BackendUnavailableError saying why.
    """
    if name == "auto":
        return "tensorrt" if backend_info("tensorrt").available else "onnxruntime"
    backend_class(name)  # unknown names and missing modules raise here with their own message
    info = backend_info(name)
    if not info.available:
        raise BackendUnavailableError(
            f"backend {name!r} cannot run here: {info.reason}; "
            f"usable backends: {', '.join(available_backends()) or 'none'}"
        )
    return name
