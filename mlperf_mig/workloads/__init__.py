"""The one table of workloads (MLPerf benchmarks), read by option parsing, the CLI and the
readers of files alike.

Each workload is a folder here, `workloads/<name>/`, whose `__init__.py` exports its `WORKLOAD`
(see `workloads/workload.py`), or `WORKLOADS` when the folder holds variants of one model
(llama3.1-8b and llama3.1-8b-edge). Adding a workload is adding a folder: the table finds it. Workload
modules import their heavy libraries (onnx, tokenizers, pillow) only inside the methods that need
them, so that this table works without them loaded.

A name is resolved once, at the edge (options, the CLI, a file read back); from there on the
workload object travels. Nothing outside a workload folder compares a workload's name.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil

from mlperf_mig.errors import UnknownBenchmarkError
from mlperf_mig.workloads.workload import CheckerModel, Score, TensorSpec, Workload

__all__ = [
    "CheckerModel",
    "Score",
    "TensorSpec",
    "Workload",
    "get_workload",
    "workload_names",
    "workload_names_text",
    "workloads",
]


@functools.cache
def _table() -> dict[str, Workload]:
    """name (and alias) -> workload of every workload folder, in listing order."""
    listed: list[Workload] = []
    for module in pkgutil.iter_modules(__path__):
        if not module.ispkg:
            continue
        folder = importlib.import_module(f"{__name__}.{module.name}")
        exported = getattr(folder, "WORKLOADS", None) or (getattr(folder, "WORKLOAD", None),)
        ours = [w for w in exported if isinstance(w, Workload)]
        if not ours or len(ours) != len(exported):
            raise TypeError(
                f"workload folder {module.name!r} exports no Workload as WORKLOAD or WORKLOADS"
            )
        listed.extend(ours)
    found: dict[str, Workload] = {}
    for workload in sorted(listed, key=lambda w: (w.listing_order, w.name)):
        for name in (workload.name, *workload.aliases):
            if name in found:
                raise TypeError(f"workload name {name!r} is taken by two workload folders")
            found[name] = workload
    return found


def workloads() -> tuple[Workload, ...]:
    """Every workload of this installation, each once."""
    return tuple(dict.fromkeys(_table().values()))


def workload_names() -> tuple[str, ...]:
    """The names of every workload (aliases left out)."""
    return tuple(w.name for w in workloads())


def workload_names_text() -> str:
    """The names as help texts list them: 'resnet50, bert, llama3.1-8b or llama3.1-8b-edge'."""
    *most, last = workload_names()
    return f"{', '.join(most)} or {last}" if most else last


def get_workload(name: str | Workload) -> Workload:
    """The workload called `name` (case-insensitive; aliases such as 'bert-99' accepted); a
    Workload is returned as it is, so that records may take either."""
    if isinstance(name, Workload):
        return name
    try:
        return _table()[str(name).strip().lower()]
    except KeyError:
        raise UnknownBenchmarkError(
            f"unknown benchmark {name!r}; expected one of {', '.join(workload_names())}"
        ) from None
