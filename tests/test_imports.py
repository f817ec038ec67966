"""The layers of the library, checked on every module: no import circle, no import up the layers,
no two folders importing each other, and each module imports alone.

The import graph is read from the source: every `import` a module runs (at the top or inside a
function, which is how a circle hides) and, in the full graph the layer tests read, those under
`if TYPE_CHECKING:` too (a type hint is a dependency all the same). A name taken from a package
that exports it lazily (`_EXPORTS` in its `__init__.py`) counts as an import of the module that
defines it. A circle in that graph fails the test with its path.

Layers, lowest first (docs/architecture.md "Layers"): the shared base modules, registry/,
emulation/, workloads/, engines/, harness/, telemetry/, placement/, runner/, study/, cluster/,
submission/ and doctor/, and the public face (the package's __init__.py, api.py, run_cli.py,
cli.py, __main__.py) on top.
Every module of the library belongs to one, so a new folder fails the test until it is placed.
"""

from __future__ import annotations

import ast
import functools
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
    """Every library module by name, `mlperf_mig.__main__` included (it is read, never imported)."""
    return {_module_name(path): path for path in sorted(PACKAGE_DIR.rglob("*.py"))}


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
    imports under `if TYPE_CHECKING:`); a fresh copy of the graph, built once a session."""
    return {name: set(imported) for name, imported in _import_graph(type_only).items()}


@functools.cache
def _import_graph(type_only: bool) -> dict[str, set[str]]:
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


# Each import that closes a circle and stays until it is broken, with why; the test fails when
# one is gone, so the list stays the truth.
ALLOWED_IN_CIRCLE: dict[tuple[str, str], str] = {}


def test_the_library_has_no_import_circle() -> None:
    """No chain of imports (type-only and function-level ones included) leads from a library
    module back to itself, but through the imports listed in ALLOWED_IN_CIRCLE."""
    graph = import_graph(type_only=True)
    for module, target in ALLOWED_IN_CIRCLE:
        graph[module] = graph[module] - {target}
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_every_allowed_circle_import_still_closes_a_circle() -> None:
    """An import listed in ALLOWED_IN_CIRCLE is there and still closes a circle (else it is
    taken off the list)."""
    for module, target in ALLOWED_IN_CIRCLE:
        graph = import_graph(type_only=True)
        assert target in graph[module], f"{module} -> {target} is gone: take it off the list"
        assert module in _reachable(graph, target), f"{module} -> {target} closes no circle"


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """The modules `start` reaches through the graph."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in graph[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


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


# The layers, lowest first: a module imports none of a higher layer. A layer is a list of the
# folders and top-level modules in it; one that does not exist (yet) is passed over. The package
# itself (`mlperf_mig/__init__.py`) is the face: it hands on the notebook API (and names it for
# type checkers); its version is the base module `_version.py`.
LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "mlperf_mig._version",
        "mlperf_mig._text",
        "mlperf_mig.errors",
        "mlperf_mig._io",
        "mlperf_mig._paths",
        "mlperf_mig._table",
        "mlperf_mig._cli_args",
        "mlperf_mig._checks",
        "mlperf_mig._report",
    ),
    ("mlperf_mig.registry",),
    ("mlperf_mig.emulation",),
    ("mlperf_mig.workloads",),
    ("mlperf_mig.engines",),
    ("mlperf_mig.harness",),
    ("mlperf_mig.telemetry",),
    ("mlperf_mig.placement",),
    ("mlperf_mig.runner",),
    ("mlperf_mig.study",),
    ("mlperf_mig.cluster",),
    ("mlperf_mig.submission", "mlperf_mig.doctor"),
    (
        "mlperf_mig",
        "mlperf_mig.api",
        "mlperf_mig.run_cli",
        "mlperf_mig.study_cli",
        "mlperf_mig.cli",
        "mlperf_mig.__main__",
    ),
)
# Each import up the layers that stays, with why; the test fails when one is gone, so the list
# stays the truth. These are study/ measuring through the public face.
ALLOWED_UPWARD: dict[tuple[str, str], str] = {}


def unit(module: str) -> str:
    """The folder or top-level module a module belongs to (`mlperf_mig.runner.plan` ->
    `mlperf_mig.runner`; the package itself is its own)."""
    return ".".join(module.split(".")[:2])


def layer(module: str) -> int | None:
    """The rank of a module's layer (0 the base), None for a module of no layer."""
    for rank, members in enumerate(LAYERS):
        if unit(module) in members:
            return rank
    return None


def upward_imports(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """(importer, imported) pairs where a module of a layer imports one of a higher layer."""
    found = set()
    for module, imported in graph.items():
        low = layer(module)
        for target in imported:
            high = layer(target)
            if low is not None and high is not None and high > low:
                found.add((module, target))
    return found


def two_way_pairs(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Pairs of folders (or top-level modules) each of which imports the other, in name order."""
    edges = {(unit(a), unit(b)) for a, imported in graph.items() for b in imported}
    return {(a, b) for a, b in edges if a < b and (b, a) in edges}


def test_every_module_is_in_a_layer() -> None:
    """Each folder and top-level module of the library is placed in LAYERS."""
    unplaced = sorted({unit(m) for m in _modules() if layer(m) is None})
    assert not unplaced, "not in LAYERS: " + ", ".join(unplaced)


def test_no_import_runs_up_the_layers() -> None:
    """No module imports one of a higher layer (type-only and function-level imports included),
    except the imports listed with their reasons in ALLOWED_UPWARD."""
    unexpected = upward_imports(import_graph(type_only=True)) - set(ALLOWED_UPWARD)
    assert not unexpected, "imports up the layers: " + ", ".join(
        f"{a} -> {b}" for a, b in sorted(unexpected)
    )


def test_every_allowed_upward_import_is_still_there() -> None:
    """An allowed upward import that is gone is taken off the list (the list stays the truth)."""
    assert set(ALLOWED_UPWARD) <= upward_imports(import_graph(type_only=True))


def test_no_two_folders_import_each_other() -> None:
    """No two folders (or top-level modules) import each other, but for the allowed upward
    imports."""
    graph = import_graph(type_only=True)
    for module, target in ALLOWED_UPWARD:
        graph[module] = graph[module] - {target}
    pairs = two_way_pairs(graph)
    assert not pairs, "folders importing each other: " + ", ".join(
        f"{a} <-> {b}" for a, b in sorted(pairs)
    )


def test_an_upward_import_is_found() -> None:
    """runner importing study, engines importing the runner and study importing the face are
    found; an import down the layers is not."""
    graph = {
        "mlperf_mig.runner.plan": {"mlperf_mig.study.sweep", "mlperf_mig.placement.choose"},
        "mlperf_mig.engines.backend": {"mlperf_mig.runner.jobs", "mlperf_mig.errors"},
        "mlperf_mig.study.chart": {"mlperf_mig.api"},
        "mlperf_mig.api": {"mlperf_mig.study.sweep", "mlperf_mig.cluster.connect"},
    }
    assert upward_imports(graph) == {
        ("mlperf_mig.runner.plan", "mlperf_mig.study.sweep"),
        ("mlperf_mig.engines.backend", "mlperf_mig.runner.jobs"),
        ("mlperf_mig.study.chart", "mlperf_mig.api"),
    }


def test_two_folders_importing_each_other_are_found() -> None:
    """Two folders each importing the other are one pair; a one-way import is none."""
    graph = {
        "mlperf_mig.runner.plan": {"mlperf_mig.telemetry.recorder"},
        "mlperf_mig.telemetry.recorder": {"mlperf_mig.runner.supervisor"},
        "mlperf_mig.runner.supervisor": {"mlperf_mig.errors"},
    }
    assert two_way_pairs(graph) == {("mlperf_mig.runner", "mlperf_mig.telemetry")}


def test_a_circle_is_found() -> None:
    """The checker reports the modules of a circle in order, the first repeated at the end."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert find_cycle(graph) == ["a", "b", "c", "a"]


def test_lazy_exports_count_as_imports_of_their_module() -> None:
    """`from mlperf_mig.engines import resolve_spec` is an import of mlperf_mig.engines.resolve."""
    assert "mlperf_mig.engines.resolve" in import_graph()["mlperf_mig.harness.cli"]


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
    of the library before each import); `__main__` is left out, as importing it runs the CLI."""
    names = sorted(name for name in _modules() if name != "mlperf_mig.__main__")  # it runs the CLI
    result = subprocess.run(
        [sys.executable, "-c", _IMPORT_EACH_ALONE, *names],
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == ""
