"""The exception types a program catches around the sites it reaches, read from its source.

A step that handles a data-dependent error on one rank (``except ValueError: skip this
batch``) is exercised only by that error: the search's plain ``RuntimeError`` passes the
handler by. The fault-free baseline records, at each site, the program's frames on the
call path (``_checks/_reach.py``); this module reads those files with ``ast`` (nothing is
imported or run), takes the ``except`` clauses (and ``contextlib.suppress``) whose guarded
body holds the frame's line, names each class as ``module:QualName`` through the module's
imports, and keeps the ones that resolve as a schedule's exception names do
(``_runtime/_resolve.py``: builtins, torch, Lightning, modules already imported), that
the search does not exercise already, and that can be built from JSON arguments.

A handler the plain raise already reaches (``except Exception``, a bare ``except``,
``except OSError``) adds nothing: a handler tells errors apart by class only, so a
``ValueError`` there would take the same path the ``RuntimeError`` takes.
"""

from __future__ import annotations

import ast
import builtins
import importlib.util
import tokenize
import traceback
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from chaoslight._runtime._resolve import exception_class
from chaoslight._schedule import InvalidSchedule, Raise

MESSAGE = "injected by chaoslight"
# What ``raises()`` draws at every site; a handler one of these reaches is exercised already.
PLAIN_ERRORS: tuple[tuple[str, tuple[Any, ...]], ...] = (
    ("RuntimeError", (MESSAGE,)),
    ("OSError", (28, "No space left on device")),
)
# Constructor arguments tried in turn (JSON values, as a schedule stores them): one message,
# or (msg, doc, pos) as ``json.JSONDecodeError`` takes them.
ARGUMENTS: tuple[tuple[Any, ...], ...] = ((MESSAGE,), (MESSAGE, "", 0))
MAX_PER_SITE = 4  # exception types drawn at one site
MAX_CAUGHT = 32  # (site, exception) pairs in all
Caught = tuple[str, str, tuple[Any, ...]]  # (site, exception name, args)
CallFrame = tuple[str, int]  # (file, line): a program frame on a site's call path
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
GROUPS = (ast.Tuple, ast.Name, ast.Attribute)  # ERRORS = (A, B); Error = json.JSONDecodeError
TRIES = (ast.Try, ast.TryStar) if hasattr(ast, "TryStar") else (ast.Try,)


@dataclass
class Source:
    """One file's tree and module-level names, read once."""

    tree: ast.Module
    module: str
    package: str
    bindings: dict[str, str] = field(default_factory=dict)  # name -> module or module:Qual
    groups: dict[str, ast.expr] = field(default_factory=dict)  # ERRORS = (A, B)
    functions: list[ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=list)


def read_source(path: str, module: str = "", package: str = "") -> Source | None:
    """The parsed file at ``path``, or None when it cannot be read or parsed."""
    try:
        with tokenize.open(path) as handle:
            tree = ast.parse(handle.read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return None
    source = Source(tree, module, package)
    _bind(source, _module_level(tree.body), source.bindings)
    source.functions = [node for node in ast.walk(tree) if isinstance(node, FUNCTIONS)]
    return source


def caught_names(source: Source, line: int) -> tuple[list[list[str]], list[str]]:
    """The handlers that would see an error raised at ``line``, in the order Python tries
    them (innermost ``try`` first, its clauses in turn), each as the classes it names
    (builtin names or ``module:QualName``); and a note for each handler expression that
    names no class (``except make_errors():``)."""
    scope = _scope_of(source, line)
    local = dict(source.bindings)
    _bind(source, [n for n in _walk(scope) if isinstance(n, (ast.Import, ast.ImportFrom))], local)
    guards: list[tuple[int, list[ast.expr | None]]] = []
    for node in _walk(scope):
        if isinstance(node, TRIES) and _holds(node.body, line):
            guards.append((node.lineno, [handler.type for handler in node.handlers]))
        elif isinstance(node, (ast.With, ast.AsyncWith)) and _holds(node.body, line):
            for item in node.items:
                suppressed = _suppressed(item.context_expr, local)
                if suppressed:
                    guards.append((node.lineno, [ast.Tuple(elts=suppressed)]))
    clauses: list[list[str]] = []
    notes: list[str] = []
    for _, expressions in sorted(guards, key=lambda guard: -guard[0]):
        clauses += [_names(expression, source, local, notes) for expression in expressions]
    return clauses, notes


@dataclass
class Reader:
    """Reads the handlers around each recorded call path, each file once."""

    modules: Mapping[str, Sequence[str]]  # file -> (module name, package), from the rank
    sources: dict[str, Source | None] = field(default_factory=dict)
    classes: dict[str, type[BaseException] | None] = field(default_factory=dict)
    read: dict[CallFrame, list[list[type[BaseException]]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def clauses_on(self, path: Iterable[CallFrame]) -> list[list[type[BaseException]]]:
        """The handlers an error raised at the innermost frame meets, in order, as classes
        (a class that does not resolve here is left out, with a note)."""
        found: list[list[type[BaseException]]] = []
        for frame in path:
            if frame not in self.read:
                self.read[frame] = self._read(*frame)
            found += self.read[frame]
        return found

    def _read(self, file: str, line: int) -> list[list[type[BaseException]]]:
        if file not in self.sources:
            module, package = [*self.modules.get(file, ()), "", ""][:2]
            self.sources[file] = read_source(file, module, package)
            if self.sources[file] is None:
                self.note(f"{file}: not read (no such file, or not Python)")
        source = self.sources[file]
        if source is None:
            return []
        clauses, notes = caught_names(source, line)
        for note in notes:
            self.note(f"{file}:{line}: {note}")
        return [[c for c in map(self.resolve, clause) if c is not None] for clause in clauses]

    def resolve(self, name: str) -> type[BaseException] | None:
        if name not in self.classes:
            try:
                self.classes[name] = exception_class(name)
            except InvalidSchedule as exc:
                self.classes[name] = None
                self.note(f"except {name}: {exc}")
        return self.classes[name]

    def note(self, note: str) -> None:
        if note not in self.notes:
            self.notes.append(note)


def caught_errors(
    paths: Mapping[str, Iterable[Iterable[CallFrame]]], modules: Mapping[str, Sequence[str]]
) -> tuple[tuple[Caught, ...], tuple[str, ...]]:
    """The (site, exception, args) a search may raise where the program catches them, and
    a note for each handler or class left out and why."""
    reader = Reader(modules)
    built: dict[type[BaseException], tuple[str, tuple[Any, ...]] | None] = {}
    found: list[Caught] = []
    for site in sorted(paths):
        drawn: list[type[BaseException]] = []
        for path in paths[site]:
            drawn += [cls for cls in _unexercised(reader.clauses_on(path)) if cls not in drawn]
        for cls in drawn[:MAX_PER_SITE]:
            if cls not in built:
                built[cls] = _drawable(cls, site, reader)
            entry = built[cls]
            if entry is not None and len(found) < MAX_CAUGHT:
                found.append((site, *entry))
    return tuple(found), tuple(reader.notes)


def _unexercised(clauses: list[list[type[BaseException]]]) -> list[type[BaseException]]:
    """The classes named by a handler that neither the search's plain raise nor its OOM
    reaches first: a handler tells errors apart by class alone, so any class it catches
    takes the path the plain error takes there. A handler of ``Exception`` (or a bare
    ``except``) that nothing drawn reaches first gets ``ValueError``, the commonest error
    a program raises of its own."""

    def first(cls: type[BaseException]) -> int | None:
        return next((i for i, c in enumerate(clauses) if issubclass(cls, tuple(c))), None)

    reached = {first(type(error)) for error in _drawn_already(clauses)}
    candidates: dict[int, type[BaseException]] = {}  # one class per handler it reaches
    for clause in clauses:
        for cls in [ValueError if cls in (Exception, BaseException) else cls for cls in clause]:
            handler = first(cls)
            if handler is not None and handler not in reached:
                candidates.setdefault(handler, cls)
    return [candidates[handler] for handler in sorted(candidates)]


def _drawn_already(clauses: list[list[type[BaseException]]]) -> list[BaseException]:
    """The plain errors, and the OOM kind's when a handler names a subclass of
    RuntimeError (only then is torch imported)."""
    plain = [vars(builtins)[name](*args) for name, args in PLAIN_ERRORS]
    narrow = any(issubclass(c, RuntimeError) and c is not RuntimeError for k in clauses for c in k)
    if not narrow:
        return plain
    from chaoslight._runtime._memory import simulated_oom

    return [*plain, simulated_oom(0, 0, "")]


def _drawable(
    cls: type[BaseException], site: str, reader: Reader
) -> tuple[str, tuple[Any, ...]] | None:
    """The name and arguments to raise ``cls`` with, or None (with a note)."""
    name = cls.__qualname__
    if not issubclass(cls, Exception):
        reader.note(f"except {name}: not an Exception (an interrupt or an exit, not an error)")
        return None
    if issubclass(cls, (StopIteration, StopAsyncIteration)):
        reader.note(f"except {name}: the end of an iteration, not an error")
        return None
    for args in ARGUMENTS:
        try:
            error = cls(*args)
            fault = Raise(cls, args, site=site)
        except Exception:  # the class's own constructor (or Raise) refused these arguments
            continue
        text = "".join(traceback.format_exception_only(type(error), error))
        if fault.surfaced_in(text):
            return fault.exception, args
    reader.note(f"except {name}: cannot be built from JSON arguments {list(ARGUMENTS)}")
    return None


def _module_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements run at import: the body, and inside its ``if`` and ``try`` blocks."""
    found: list[ast.stmt] = []
    for node in body:
        found.append(node)
        if isinstance(node, ast.If):
            found += _module_level(node.body + node.orelse)
        elif isinstance(node, TRIES):
            handlers = [s for h in node.handlers for s in h.body]
            found += _module_level(node.body + handlers + node.orelse + node.finalbody)
    return found


def _bind(source: Source, statements: Iterable[ast.stmt], into: dict[str, str]) -> None:
    """What each name these statements bind stands for: a module, or ``module:Qual``."""
    for node in statements:
        if isinstance(node, ast.Import):
            for alias in node.names:
                head = alias.name.partition(".")[0]
                into[alias.asname or head] = alias.name if alias.asname else head
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, source.package)
            for alias in node.names:
                if base is not None and alias.name != "*":
                    into[alias.asname or alias.name] = f"{base}:{alias.name}"
        elif isinstance(node, ast.ClassDef) and source.module:
            into[node.name] = f"{source.module}:{node.name}"
        elif isinstance(node, ast.Assign) and isinstance(node.value, GROUPS):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    source.groups[target.id] = node.value
                    into.pop(target.id, None)


def _absolute(node: ast.ImportFrom, package: str) -> str | None:
    name = "." * node.level + (node.module or "")
    if not node.level:
        return name
    try:
        return importlib.util.resolve_name(name, package) if package else None
    except (ImportError, ValueError):
        return None


def _names(
    expression: ast.expr | None,
    source: Source,
    local: dict[str, str],
    notes: list[str],
    depth: int = 0,
) -> list[str]:
    """The classes one ``except`` expression names (a bare ``except``: ``BaseException``)."""
    if expression is None:
        return ["BaseException"]
    if isinstance(expression, ast.Tuple):
        return [n for e in expression.elts for n in _names(e, source, local, notes, depth)]
    dotted = _dotted(expression)
    if dotted is None:
        notes.append(f"except {ast.unparse(expression)}: not a class name; not read")
        return []
    head, _, rest = dotted.partition(".")
    if head in local:
        bound = local[head]
        if ":" in bound:
            return [f"{bound}.{rest}" if rest else bound]
        if rest:
            return [f"{bound}:{rest}"]
    elif head in source.groups and not rest and depth < 2:
        return _names(source.groups[head], source, local, notes, depth + 1)
    elif not rest and isinstance(vars(builtins).get(head), type):
        return [head]
    notes.append(f"except {dotted}: not a class this file imports or defines; not read")
    return []


def _dotted(expression: ast.expr) -> str | None:
    if isinstance(expression, ast.Name):
        return expression.id
    if isinstance(expression, ast.Attribute):
        head = _dotted(expression.value)
        return None if head is None else f"{head}.{expression.attr}"
    return None


def _suppressed(expression: ast.expr, local: dict[str, str]) -> list[ast.expr]:
    """The classes ``with contextlib.suppress(A, B):`` names, as except expressions."""
    if not isinstance(expression, ast.Call):
        return []
    dotted = _dotted(expression.func) or ""
    head, _, rest = dotted.partition(".")
    bound = local.get(head, "")
    full = f"{bound}.{rest}" if rest and ":" in bound else f"{bound}:{rest}" if rest else bound
    return list(expression.args) if full == "contextlib:suppress" else []


def _holds(body: list[ast.stmt], line: int) -> bool:
    """Whether a guarded body's lines hold ``line``."""
    return bool(body) and body[0].lineno <= line <= (body[-1].end_lineno or body[-1].lineno)


def _scope_of(source: Source, line: int) -> ast.AST:
    """The innermost function whose lines hold ``line`` (the frame's code), else the module."""
    holding = [f for f in source.functions if f.lineno <= line <= (f.end_lineno or 0)]
    return max(holding, key=lambda node: node.lineno) if holding else source.tree


def _walk(scope: ast.AST) -> Iterator[ast.AST]:
    """The nodes of one frame's code: ``scope``'s, not those of a function or class in it."""
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (*FUNCTIONS, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))
