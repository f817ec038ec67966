"""No import circles between the library's modules, no import up the layers, and each module
imports alone.

The import graph is read from the source: every `import` a module runs (at the top or inside a
function, which is how a circle hides) and, in the full graph the layer test reads, those under
`if TYPE_CHECKING:` too (a type hint is a dependency all the same). A name taken from a package
that exports it lazily (`_EXPORTS` in its `__init__.py`) counts as an import of the module that
defines it. A circle in that graph fails the test with its path.

Layers, lowest first: runner/ (runs one layout), study/ (compares layouts), cluster/ (runs a
layout on Ray nodes), with the public face (mlperf_mig/api.py, run_cli.py, cli.py) on top.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import mlperf_mig

PACKAGE_DIR = Path(mlperf_mig.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    """Every library module by name (`__main__` left out: importing it runs the CLI)."""
    paths = sorted(PACKAGE_DIR.rglob("*.py"))
    return {_module_name(path): path for path in paths if path.name != "__main__.py"}


def _lazy_exports(tree: ast.Module) -> dict[str, str]:
    """name -> submodule of a package's `_EXPORTS = {"Name": "submodule", ...}`."""
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in targets):
                return ast.literal_eval(node.value)
    return {}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _all_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    yield from (node for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom))


def _run_time_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            yield from (n for child in node.orelse for n in _run_time_imports_of(child))
            continue
        yield from _run_time_imports_of(node)


def _run_time_imports_of(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node
    else:
        yield from _run_time_imports(node)


def import_graph(*, type_only: bool = False) -> dict[str, set[str]]:
    """module -> the library modules it imports when it runs (with `type_only`, also those it
    imports under `if TYPE_CHECKING:`)."""
    modules = _modules()
    trees = {name: ast.parse(path.read_text(encoding="utf-8")) for name, path in modules.items()}
    exports = {name: _lazy_exports(tree) for name, tree in trees.items()}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, tree in trees.items():
        package = name if modules[name].name == "__init__.py" else name.rpartition(".")[0]
        for node in (_all_imports if type_only else _run_time_imports)(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                    base = f"{base}.{node.module}" if node.module else base
                targets = []
                for alias in node.names:
                    if f"{base}.{alias.name}" in modules:
                        targets.append(f"{base}.{alias.name}")
                    elif alias.name in exports.get(base, {}):
                        targets.append(f"{base}.{exports[base][alias.name]}")
                    else:
                        targets.append(base)
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle (its modules, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_library_has_no_import_circle() -> None:
    """No chain of run-time imports leads from a library module back to itself."""
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_type_only_imports_are_in_the_full_graph() -> None:
    """An import under `if TYPE_CHECKING:` is an edge of the full graph, not of the run-time one."""
    module, imported = _a_type_only_import()
    assert imported in import_graph(type_only=True)[module]
    assert imported not in import_graph()[module]


def _a_type_only_import() -> tuple[str, str]:
    """(module, module it imports only under `if TYPE_CHECKING:`), found in the source."""
    run_time = import_graph()
    for module, imported in sorted(import_graph(type_only=True).items()):
        only_typed = sorted(imported - run_time[module])
        if only_typed:
            return module, only_typed[0]
    raise AssertionError("no module imports anything under `if TYPE_CHECKING:`; nothing to check")


# The layers, lowest first: a module of a layer imports none of a higher one.
LAYERS = ("mlperf_mig.runner", "mlperf_mig.study", "mlperf_mig.cluster")
FACE = ("mlperf_mig.api", "mlperf_mig.run_cli", "mlperf_mig.cli")
# Each import up the layers that stays, with why. All are inside the function that needs them.
ALLOWED_UPWARD = {
    (
        "mlperf_mig.runner.plan",
        "mlperf_mig.cluster.connect",
    ): "planning a cluster run opens the cluster session to read the nodes' inventories",
    (
        "mlperf_mig.runner.plan",
        "mlperf_mig.cluster.inventory",
    ): "planning a cluster run takes the nodes' inventories",
    (
        "mlperf_mig.runner.plan",
        "mlperf_mig.cluster.placement",
    ): "planning a cluster run places the instances on the nodes' GPUs",
    (
        "mlperf_mig.runner.execute",
        "mlperf_mig.cluster.rounds",
    ): "a cluster run's rounds are the cluster's (Ray actors instead of worker processes)",
    (
        "mlperf_mig.study.api",
        "mlperf_mig.api",
    ): "advise without measurements runs the public sweep (cluster session, stop signals)",
    (
        "mlperf_mig.study.capacity",
        "mlperf_mig.api",
    ): "the capacity search measures through the public plan and run",
}


def _layer(module: str) -> int | None:
    """The layer of a module (0 runner, 1 study, 2 cluster, 3 the public face), None for others."""
    for rank, package in enumerate(LAYERS):
        if module == package or module.startswith(package + "."):
            return rank
    return len(LAYERS) if module in FACE else None


def upward_imports(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """(importer, imported) pairs where a module of a layer imports one of a higher layer."""
    found = set()
    for module, imported in graph.items():
        low = _layer(module)
        for target in imported:
            high = _layer(target)
            if low is not None and high is not None and high > low:
                found.add((module, target))
    return found


def test_no_import_runs_up_the_layers() -> None:
    """runner/ imports neither study/ nor cluster/, study/ does not import cluster/, and neither
    imports the public face, except the imports listed with their reasons in ALLOWED_UPWARD."""
    unexpected = upward_imports(import_graph(type_only=True)) - set(ALLOWED_UPWARD)
    assert not unexpected, "imports up the layers: " + ", ".join(
        f"{a} -> {b}" for a, b in sorted(unexpected)
    )


def test_every_allowed_upward_import_is_still_there() -> None:
    """An allowed upward import that is gone is taken off the list (the list stays the truth)."""
    assert set(ALLOWED_UPWARD) <= upward_imports(import_graph(type_only=True))


def test_an_upward_import_is_found() -> None:
    """runner importing study, study importing cluster and study importing the face are found;
    an import down the layers is not."""
    graph = {
        "mlperf_mig.runner.plan": {"mlperf_mig.study.sweep"},
        "mlperf_mig.study.sweep": {"mlperf_mig.runner.plan", "mlperf_mig.cluster.rounds"},
        "mlperf_mig.study.chart": {"mlperf_mig.api"},
        "mlperf_mig.api": {"mlperf_mig.study.sweep", "mlperf_mig.cluster.connect"},
    }
    assert upward_imports(graph) == {
        ("mlperf_mig.runner.plan", "mlperf_mig.study.sweep"),
        ("mlperf_mig.study.sweep", "mlperf_mig.cluster.rounds"),
        ("mlperf_mig.study.chart", "mlperf_mig.api"),
    }


def test_a_circle_is_found() -> None:
    """The checker reports the modules of a circle in order, the first repeated at the end."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert find_cycle(graph) == ["a", "b", "c", "a"]


def test_lazy_exports_count_as_imports_of_their_module() -> None:
    """`from mlperf_mig.engines import EngineSpec` is an import of mlperf_mig.engines.spec."""
    assert "mlperf_mig.engines.spec" in import_graph()["mlperf_mig.harness.cli"]


_IMPORT_EACH_ALONE = """
import importlib, sys
failed = []
for name in sys.argv[1:]:
    for loaded in [m for m in sys.modules if m == "mlperf_mig" or m.startswith("mlperf_mig.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed.append(f"{name}: {type(exc).__name__}: {exc}")
print("\\n".join(failed))
"""


@pytest.mark.slow
def test_each_module_imports_alone() -> None:
    """Each module imports first, with no other library module loaded (one interpreter, emptied
    of the library before each import)."""
    result = subprocess.run(
        [sys.executable, "-c", _IMPORT_EACH_ALONE, *sorted(_modules())],
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == ""
