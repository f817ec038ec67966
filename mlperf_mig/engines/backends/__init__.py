"""The one table of inference backends, read by the API, the runner and the CLI alike.

Each backend is a folder here, `engines/backends/<name>/`, whose `__init__.py` exports its class
as `BACKEND`; the class declares the backend's facts as class attributes (see
`engines/backend.py`). Adding a backend is adding a folder: the table finds it. Backend modules
import their heavy libraries (onnxruntime, TensorRT) only inside the methods that need them, so
that this table and `import mlperf_mig.engines` work without them installed.

Nothing outside this table compares backend names: callers ask the class for its facts.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Iterator

import attrs

from mlperf_mig.engines.backend import Backend
from mlperf_mig.errors import BackendUnavailableError

AUTO = "auto"


@functools.cache
def _table() -> dict[str, type[Backend]]:
    """name -> class of every backend folder, in listing order (the order "auto" tries them)."""
    found: list[type[Backend]] = []
    for module in pkgutil.iter_modules(__path__):
        if not module.ispkg:
            continue
        cls = importlib.import_module(f"{__name__}.{module.name}").BACKEND
        if cls.name != module.name:
            raise TypeError(
                f"backend folder {module.name!r} exports a backend named {cls.name!r}; "
                "the folder and the class's `name` must agree"
            )
        found.append(cls)
    found.sort(key=lambda cls: (cls.listing_order, cls.name))
    return {cls.name: cls for cls in found}


def backend_names() -> tuple[str, ...]:
    """The names of every backend of this installation, in listing order."""
    return tuple(_table())


@attrs.frozen(kw_only=True)
class BackendInfo:
    """One backend and whether it can run on this machine."""

    name: str
    available: bool
    reason: str | None  # why it cannot run; None when it can
    version: str | None


def backend_class(name: str) -> type[Backend]:
    """The class of backend `name`; raises BackendUnavailableError for unknown ones."""
    try:
        return _table()[name]
    except KeyError:
        raise BackendUnavailableError(
            f"unknown backend {name!r}; expected one of {AUTO}, {', '.join(_table())}"
        ) from None


def find_backend(name: str) -> type[Backend] | None:
    """The class of backend `name`, or None where this installation has no such backend (a
    results file written by another installation may name one)."""
    return _table().get(name)


def backend_info(name: str) -> BackendInfo:
    try:
        cls = backend_class(name)
    except BackendUnavailableError as exc:
        return BackendInfo(name=name, available=False, reason=str(exc), version=None)
    reason = cls.availability()
    version = cls.version() if reason is None else None
    return BackendInfo(name=name, available=reason is None, reason=reason, version=version)


def iter_backend_infos() -> Iterator[BackendInfo]:
    return (backend_info(name) for name in _table())


def available_backends() -> tuple[str, ...]:
    """Names of the backends that can run here, preferred first."""
    return tuple(info.name for info in iter_backend_infos() if info.available)


def resolve_backend(name: str = AUTO, *, on_cpu: bool = False) -> str:
    """The backend to use for `name`.

    "auto" means the first backend that `auto_chooses` and can run here (TensorRT where TensorRT
    and a GPU are usable), else the last such backend, which must then be able to run (ONNX
    Runtime). `on_cpu`: the instances are CPU partitions, so backends that `needs_gpu` are
    neither chosen nor accepted. An explicit name that cannot run here raises
    BackendUnavailableError saying why.
    """
    if name == AUTO:
        candidates = [
            cls.name
            for cls in _table().values()
            if cls.auto_chooses and not (on_cpu and cls.needs_gpu)
        ]
        chosen = next((c for c in candidates if backend_info(c).available), candidates[-1])
        return resolve_backend(chosen, on_cpu=on_cpu)
    cls = backend_class(name)
    if on_cpu and cls.needs_gpu:
        cpu_ones = [c.name for c in _table().values() if c.auto_chooses and not c.needs_gpu]
        raise BackendUnavailableError(
            f"emulated partitions run on the CPU, where {cls.framework} cannot; use --backend "
            f"{' or '.join(cpu_ones)} (or auto), or run on a MIG GPU"
        )
    info = backend_info(name)
    if not info.available:
        raise BackendUnavailableError(
            f"backend {name!r} cannot run here: {info.reason}; "
            f"usable backends: {', '.join(available_backends()) or 'none'}"
        )
    return name
