"""No import circles between the library's modules, and each module imports alone.

The import graph is read from the source: every `import` a module runs (at the top or inside a
function, which is how a circle hides; not those under `if TYPE_CHECKING:`, which never run). A
name taken from a package that exports it lazily (`_EXPORTS` in its `__init__.py`) counts as an
import of the module that defines it. A circle in that graph fails the test with its path.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

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


def import_graph() -> dict[str, set[str]]:
    """module -> the library modules it imports when it runs."""
    modules = _modules()
    trees = {name: ast.parse(path.read_text(encoding="utf-8")) for name, path in modules.items()}
    exports = {name: _lazy_exports(tree) for name, tree in trees.items()}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, tree in trees.items():
        package = name if modules[name].name == "__init__.py" else name.rpartition(".")[0]
        for node in _run_time_imports(tree):
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
