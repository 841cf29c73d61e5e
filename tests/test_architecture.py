"""The layering in ARCHITECTURE.md holds: imports go one way, no cycles, facades are exact."""

from __future__ import annotations

import ast
import importlib
import re
import warnings
from pathlib import Path

import pytest

import chaoslight

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "chaoslight"

# Lowest first; a module may import its own layer and the layers before it, never after.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("chaoslight._schedule",),
    ("chaoslight._sites",),
    ("chaoslight._runtime",),
    ("chaoslight._report",),
    ("chaoslight._world",),
    ("chaoslight._checks", "chaoslight.checks"),
    ("chaoslight._verdict",),
    ("chaoslight._search", "chaoslight.strategies"),
    ("chaoslight._cli", "chaoslight._pytest_plugin"),
    ("chaoslight",),  # the facade, chaoslight/__init__.py
)


def module_files() -> dict[str, Path]:
    """Every module of the package by dotted name."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(["chaoslight", *parts])] = path
    return found


MODULES = module_files()


def layer_of(module: str) -> int:
    best, rank = -1, -1
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), index
    return rank


def imports_of(module: str) -> set[str]:
    """The chaoslight modules ``module`` imports, at top level or inside functions."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}".rstrip(".")
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in MODULES else base)
    return {name for name in found if name in MODULES and name != module}


def test_every_module_belongs_to_a_layer() -> None:
    """Each module of the package is in exactly one of the layers ARCHITECTURE.md names."""
    assert [m for m in MODULES if layer_of(m) < 0] == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_upward_import(module: str) -> None:
    """A module imports only its own layer and the layers below it (functions included)."""
    upward = [dep for dep in imports_of(module) if layer_of(dep) > layer_of(module)]
    assert upward == [], f"{module} (layer {layer_of(module)}) imports {upward}"


def test_no_import_cycle() -> None:
    """The module import graph (top-level and function-level imports) has no cycle."""
    graph = {module: imports_of(module) for module in MODULES}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph[node]):
            # A package's __init__ importing its own submodules is how packages re-export.
            if MODULES[node].name == "__init__.py" and dep.startswith(node + "."):
                continue
            if state.get(dep) == 1:
                cycle = [*stack[stack.index(dep) :], dep]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if dep not in state:
                visit(dep)
        stack.pop()
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)


def test_the_import_scan_sees_function_level_imports() -> None:
    """The scan is not vacuous: it finds the facade's lazy import inside ``__getattr__``."""
    assert "chaoslight._runtime._callback" in imports_of("chaoslight")
    assert layer_of("chaoslight._sites._torch") < layer_of("chaoslight._world._pool")


@pytest.mark.parametrize(
    "facade", [chaoslight, chaoslight.checks, chaoslight.strategies], ids=lambda m: m.__name__
)
def test_facade_all_is_exactly_its_public_names(facade: object) -> None:
    """``__all__`` lists every public name of the facade and nothing else (no stray imports)."""
    # "@py_builtins" and the like: pytest's assertion rewriting of plugin packages.
    public = {name for name in dir(facade) if not name.startswith(("_", "@"))}
    assert set(facade.__all__) == public  # type: ignore[attr-defined]


def test_public_api_reaches_the_search_and_the_hang_error() -> None:
    """fuzz, replay, Failure and HangDetected are reachable from ``import chaoslight``."""
    assert callable(chaoslight.fuzz) and callable(chaoslight.replay)
    assert chaoslight.Failure.__name__ == "Failure"
    assert issubclass(chaoslight.HangDetected, chaoslight.ChaosError)


# The size budget: a module past WARN_LINES is told to split along its concepts (a
# warning in the test report); past FAIL_LINES it fails. A function's code (its
# docstring aside) stays under MAX_FUNCTION_LINES. A hard cap at one number made seams:
# one-line forwarders and private names exported to dodge it.
WARN_LINES, FAIL_LINES, MAX_FUNCTION_LINES = 400, 600, 80


@pytest.mark.filterwarnings("default")  # the suite makes warnings errors; this one is advice
def test_modules_stay_within_the_size_budget() -> None:
    """No module passes FAIL_LINES; one past WARN_LINES is named in a warning."""
    sizes = {m: len(p.read_text().splitlines()) for m, p in MODULES.items()}
    for module, lines in sorted(sizes.items()):
        if WARN_LINES < lines <= FAIL_LINES:
            warnings.warn(f"{module} has {lines} lines: split it along its concepts", stacklevel=1)
    assert {m: n for m, n in sizes.items() if n > FAIL_LINES} == {}


def function_lengths(path: Path) -> dict[str, int]:
    """Each function's lines of code, its docstring left out, by qualified-ish name."""
    lengths = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            doc = ast.get_docstring(node, clean=False) is not None
            first = body[1] if doc and len(body) > 1 else body[0]
            start = first.lineno
            lengths[f"{path.name}:{node.name}"] = (node.end_lineno or start) - start + 1
    return lengths


def test_functions_stay_short() -> None:
    """No function's code is over MAX_FUNCTION_LINES lines (docstrings do not count)."""
    long = {
        name: n
        for path in MODULES.values()
        for name, n in function_lengths(path).items()
        if n > MAX_FUNCTION_LINES
    }
    assert long == {}


def test_the_function_budget_counts_code_not_docstrings(tmp_path: Path) -> None:
    """The function-length scan is not vacuous: it measures code and skips the docstring."""
    module = tmp_path / "m.py"
    module.write_text('def f():\n    """Doc\n\n    more."""\n    a = 1\n    return a\n')
    assert function_lengths(module) == {"m.py:f": 2}


def test_tests_import_their_helpers_one_way() -> None:
    """Tests import helpers as ``helpers`` (conftest puts tests/ on the path), never as
    ``tests.helpers``: one style that works under ``pytest`` and ``python -m pytest``."""
    offenders = [
        path.name
        for path in (ROOT / "tests").glob("*.py")
        if path.name != "test_architecture.py"
        and ("from tests." in path.read_text() or "import tests." in path.read_text())
    ]
    assert offenders == []


def test_the_search_imports_no_private_name_from_a_lower_layer() -> None:
    """No module of the search (``_search/``, ``strategies/``) imports a ``_``-prefixed name
    from a lower layer: such a name may change with no notice, so the search takes what the
    lower layers offer, through their package facades where those hold the name."""
    search = layer_of("chaoslight._search")
    scanned, private = 0, []
    for module, path in MODULES.items():
        if layer_of(module) != search:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or node.module not in MODULES:
                continue
            if layer_of(node.module) < search:
                scanned += 1
                names = [alias.name for alias in node.names if alias.name.startswith("_")]
                private += [f"{module} imports {node.module}.{name}" for name in names]
    assert scanned > 20  # the scan sees the search's imports from below
    assert private == []


PUBLIC_LOOKING = re.compile(r"[A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*|[A-Z][A-Z0-9_]*")


def defined_names(source: str) -> set[str]:
    """The CamelCase and UPPER_CASE names a module defines at its top level (a class, an
    assignment, an import under another name); a plain import, as a facade re-exports
    with, defines nothing."""
    found: set[str] = set()
    body = list(ast.parse(source).body)
    while body:
        node = body.pop()
        if isinstance(node, (ast.If, ast.Try, ast.With)):
            body += [*ast.iter_child_nodes(node)]
        elif isinstance(node, ast.ExceptHandler):
            body += node.body
        elif isinstance(node, ast.ClassDef):
            found.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            found.update(a.asname for a in node.names if a.asname not in (None, a.name))
    return {name for name in found if PUBLIC_LOOKING.fullmatch(name)}


def test_no_two_modules_define_the_same_public_looking_name() -> None:
    """A class, type alias or constant name means one thing in the package: no two modules
    define it (a second ``class Verdict``, ``INTERNAL`` or ``Progress`` fails here)."""
    where: dict[str, list[str]] = {}
    for module, path in sorted(MODULES.items()):
        for name in defined_names(path.read_text()):
            where.setdefault(name, []).append(module)
    assert where["Verdict"] == ["chaoslight._verdict._result"]  # the scan sees classes
    assert {name: modules for name, modules in where.items() if len(modules) > 1} == {}


def private_imports_of_public_names(path: Path) -> list[str]:
    """``from chaoslight._x import Name`` in ``path`` where a facade exports that object."""
    facades = [chaoslight, chaoslight.checks, chaoslight.strategies]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.ImportFrom) and node.module):
            continue
        if not node.module.startswith("chaoslight.") or "._" not in f".{node.module[11:]}":
            continue
        module = importlib.import_module(node.module)
        for alias in node.names:
            obj = getattr(module, alias.name, None)
            for facade in facades:
                if alias.name in facade.__all__ and getattr(facade, alias.name) is obj:
                    found.append(f"{path.name}: {alias.name} from {node.module}")
    return found


def test_tests_import_public_names_publicly() -> None:
    """A test imports what the public API offers from the public API, so moving a private
    module costs no test edits (private paths are for what only they hold)."""
    offenders = [
        hit
        for p in sorted((ROOT / "tests").glob("*.py"))
        for hit in private_imports_of_public_names(p)
    ]
    assert offenders == []
