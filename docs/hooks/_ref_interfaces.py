"""Reference pages of the interfaces: the Python API, the command line, exit statuses.

The command line is read by walking the argparse parser ``chaoslight._cli`` builds, the
pytest options by calling the plugin's ``pytest_addoption`` with a recorder, the API
from the facades' ``__all__``. A public name with no docstring is a build warning.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import inspect
import pkgutil
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from _ref_markdown import code, docstring, first_line, inline, page, signature, table
from mkdocs.plugins import get_plugin_logger

import chaoslight
import chaoslight._cli as cli
from chaoslight import _pytest_plugin

log = get_plugin_logger("chaoslight-reference")


# -- the Python API -----------------------------------------------------------------------
def _kind(obj: Any) -> str:
    if inspect.ismodule(obj):
        return "module"
    if inspect.isclass(obj):
        return "exception" if issubclass(obj, BaseException) else "class"
    return "function" if callable(obj) else "constant"


def _api_row(module: ModuleType, name: str) -> list[str]:
    obj = getattr(module, name)
    kind = _kind(obj)
    if kind == "constant":
        return [code(name), kind, code(repr(obj)[:120])]
    line = first_line(obj)
    if not line:
        log.warning("%s.%s has no docstring: the API reference needs one", module.__name__, name)
    if kind in ("function", "class"):
        with contextlib.suppress(TypeError, ValueError):  # a builtin with no signature
            line = f"{code(name + signature(obj))}<br>{line}"
    return [code(name), kind, line]


def api_page() -> str:
    facades = [chaoslight, chaoslight.checks, chaoslight.strategies]
    header = ["name", "kind", "signature and summary"]
    sections = [
        f"## `{module.__name__}`\n\n{docstring(module)}\n\n"
        + table(header, (_api_row(module, n) for n in module.__all__))
        for module in facades
    ]
    intro = (
        "Every public name: the `__all__` of `chaoslight`, `chaoslight.checks` and "
        "`chaoslight.strategies`, with its signature and the first line of its docstring "
        "(`help(name)` in Python has the rest). Fault kinds, checks and sites have pages "
        "of their own: [Fault kinds](faults.md), [Checks](checks.md), [Sites](sites.md)."
    )
    return page("Python API", intro, sections)


# -- the command line ---------------------------------------------------------------------
Command = tuple[str, str, argparse.ArgumentParser]  # name, one-line help, its parser


def _subcommands(parser: argparse.ArgumentParser) -> Iterator[Command]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, helps.get(name, ""), sub


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The help text as ``--help`` prints it, defaults expanded by the parser's formatter."""
    if not action.help:
        return ""
    return parser._get_formatter()._expand_help(action)


def _argument(action: argparse.Action) -> str:
    if action.choices:
        return "one of " + ", ".join(code(c) for c in action.choices)
    if action.nargs == 0:
        return "flag"
    if action.option_strings:
        return code(action.metavar or action.dest.upper())
    return code(action.metavar or action.dest)


def _options_table(parser: argparse.ArgumentParser) -> str:
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        name = ", ".join(action.option_strings) or action.dest
        text = inline(_help(parser, action))
        if isinstance(action, argparse._AppendAction):
            text += " (repeatable)" if "repeatable" not in text else ""
        if action.required and action.option_strings:
            text += " **required**" if "required" not in text else ""
        rows.append([code(name), _argument(action), text or "—"])
    return table(["option", "argument", "help"], rows) if rows else "No options.\n"


def _command_section(name: str, summary: str, sub: argparse.ArgumentParser) -> str:
    parts = [f"## `chaoslight {name}` {{#{name}}}\n", inline(summary) + "\n"]
    parts.append("```\n" + sub.format_usage().strip() + "\n```\n")
    if sub.description:
        parts.append(inline(sub.description) + "\n")
    parts.append(_options_table(sub))
    if sub.epilog:
        parts.append("```\n" + sub.epilog.strip() + "\n```\n")
    return "\n".join(parts)


class _OptionRecorder:
    """Stands in for pytest's parser: records what the plugin's ``pytest_addoption`` adds."""

    def __init__(self) -> None:
        self.options: list[tuple[tuple[str, ...], dict[str, Any]]] = []

    def getgroup(self, *args: Any, **kwargs: Any) -> _OptionRecorder:
        return self

    def addoption(self, *names: str, **attrs: Any) -> None:
        self.options.append((names, attrs))

    def addini(self, *args: Any, **kwargs: Any) -> None:
        """Ini settings are not options; nothing to record."""


def _pytest_section() -> str:
    recorder = _OptionRecorder()
    _pytest_plugin.pytest_addoption(recorder)  # type: ignore[arg-type]
    rows = [
        [code(", ".join(names)), code(attrs.get("default")), inline(attrs.get("help", ""))]
        for names, attrs in recorder.options
    ]
    return (
        "## pytest options {#pytest}\n\n"
        "Added by the plugin that installs with chaoslight (entry point `pytest11`).\n\n"
        + table(["option", "default", "help"], rows)
    )


def cli_page() -> str:
    parser = cli.build_parser()
    commands = list(_subcommands(parser))
    summary = table(
        ["command", "what it does"], ([f"[`{n}`](#{n})", inline(h)] for n, h, _ in commands)
    )
    intro = (
        f"`{parser.prog}`: {inline(parser.description or '')} "
        "Every option below is read from the parser, with the default `--help` prints. "
        "Exit statuses: [Exit statuses](exit-codes.md).\n\n"
        "```\n" + parser.format_usage().strip() + "\n```\n\n" + summary
    )
    sections = [_command_section(n, h, sub) for n, h, sub in commands]
    return page("Command line", intro, [*sections, _pytest_section()])


# -- exit statuses ------------------------------------------------------------------------
def _cli_modules() -> list[ModuleType]:
    # __main__ runs the command when imported: it defines nothing to document.
    infos = pkgutil.iter_modules(cli.__path__, cli.__name__ + ".")
    names = [info.name for info in infos if not info.name.endswith(".__main__")]
    return [cli, *(importlib.import_module(n) for n in names)]


def _status_constants(module: ModuleType) -> Iterator[tuple[str, int, str]]:
    """``EXIT_*`` and ``*_STATUS`` integers, with the comment on their line when there is one."""
    try:
        source = inspect.getsource(module)
    except (OSError, TypeError):
        return
    lines = source.splitlines()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            for name in [t.id for t in ast.walk(target) if isinstance(t, ast.Name)]:
                value = getattr(module, name, None)
                if (name.startswith("EXIT_") or name.endswith("_STATUS")) and type(value) is int:
                    comment = lines[node.lineno - 1].partition("#")[2].strip()
                    yield name, value, comment


def exit_codes_page() -> str:
    rows = []
    described = []
    for module in _cli_modules():
        for name, value, comment in _status_constants(module):
            rows.append([code(value), code(name), code(module.__name__), inline(comment) or "—"])
        doc = inspect.getdoc(module) or ""
        if "exit status" in doc.lower() or "usage error" in doc.lower():
            described.append(f"### `{module.__name__}`\n\n{docstring(module)}\n")
        for attr, value in vars(module).items():
            if attr.endswith("STATUS_HELP") and isinstance(value, str):
                described.append(f"### `{module.__name__}.{attr}`\n\n```\n{value.strip()}\n```\n")
    rows.sort(key=lambda row: (int(row[0].strip("`")), row[1]))
    intro = (
        "What `chaoslight`'s commands exit with. The constants are read from the modules of "
        "`chaoslight._cli`; the descriptions are those modules' own words (and `chaoslight "
        "run --help` prints its table)."
    )
    sections = [
        "## The constants\n\n" + table(["status", "constant", "module", "comment"], rows),
        "## As each command describes them\n",
        *described,
    ]
    return page("Exit statuses", intro, sections)


def pages() -> dict[str, str]:
    return {
        "reference/api.md": api_page(),
        "reference/cli.md": cli_page(),
        "reference/exit-codes.md": exit_codes_page(),
    }
