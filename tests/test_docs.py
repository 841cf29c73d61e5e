"""The docs: README links resolve, and the site builds with --strict and its generated
reference names everything the registries hold (read here, so the test cannot drift)."""

from __future__ import annotations

import argparse
import html
import importlib
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import chaoslight
from chaoslight import checks as public_checks
from chaoslight import strategies
from chaoslight._cli import build_parser
from chaoslight._schedule import FAULT_KINDS, SITES
from chaoslight._verdict._known import KNOWN_ISSUES
from chaoslight.checks import CHECKS

ROOT = Path(__file__).resolve().parent.parent
# [text](target) outside code: the target up to a space or ")" (titles are not used here).
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _relative_links(markdown: str) -> list[str]:
    text = re.sub(r"```.*?```", "", markdown, flags=re.S)  # code blocks hold no links
    text = re.sub(r"`[^`]*`", "", text)
    targets = [target.split("#")[0] for target in LINK.findall(text)]
    return [t for t in targets if t and not re.match(r"^[a-z][a-z0-9+.-]*:", t)]


def test_readme_relative_links_resolve() -> None:
    """Every relative link in README.md names a file or folder of the repository."""
    links = _relative_links((ROOT / "README.md").read_text(encoding="utf-8"))
    assert links, "README.md has no relative links: the pattern no longer matches them"
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing, f"README.md links to missing files: {missing}"


def test_link_pattern_sees_only_real_links() -> None:
    """Links inside code are ignored, anchors are cut, and URLs are not relative links."""
    text = "[a](docs/x.md#top) `[b](no.md)` [c](https://e.org/y) ```\n[d](no2.md)\n```"
    assert _relative_links(text) == ["docs/x.md"]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The docs site, built once for this module with every warning an error."""
    pytest.importorskip("mkdocs", reason="the docs extra is not installed: pip install -e .[docs]")
    pytest.importorskip("material", reason="mkdocs-material is not installed (the docs extra)")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's banner about MkDocs 2.0
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, f"mkdocs build --strict failed:\n{build.stderr[-4000:]}"
    return out


def _page(site: Path, name: str) -> str:
    return html.unescape((site / "reference" / name / "index.html").read_text(encoding="utf-8"))


@pytest.mark.slow
def test_reference_lists_every_fault_kind(site: Path) -> None:
    """Each registered fault kind has its section, class name and text-form example."""
    page = _page(site, "faults")
    for kind, cls in FAULT_KINDS.items():
        assert f'id="{kind}"' in page, kind
        assert cls.__name__ in page, cls.__name__
        assert f"{kind}@" in page, f"no text-form example of {kind}"


@pytest.mark.slow
def test_reference_lists_every_site(site: Path) -> None:
    """Every site of the catalogue appears on the sites page."""
    page = _page(site, "sites")
    assert [name for name in SITES if f"<code>{name}</code>" not in page] == []


@pytest.mark.slow
def test_reference_lists_every_known_framework_issue(site: Path) -> None:
    """Every entry of the known-issues table has its section, reference and workaround."""
    page = _page(site, "known-issues")
    for issue in KNOWN_ISSUES:
        assert f'id="{issue.key}"' in page and issue.reference.split()[0] in page, issue.key
        assert issue.workaround[:40] in page, issue.key


@pytest.mark.slow
def test_reference_lists_every_check(site: Path) -> None:
    """Every registered check has its section on the checks page."""
    page = _page(site, "checks")
    assert [name for name in CHECKS if f'id="{name}"' not in page] == []


def _commands() -> dict[str, argparse.ArgumentParser]:
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("the chaoslight parser has no sub-commands")


@pytest.mark.slow
def test_reference_lists_every_command_and_option(site: Path) -> None:
    """Every sub-command of ``chaoslight`` and every option it takes is on the CLI page."""
    page = _page(site, "cli")
    for name, parser in _commands().items():
        assert f'id="{name}"' in page, name
        for action in parser._actions:
            for option in action.option_strings:
                assert option in page, f"chaoslight {name} {option}"


@pytest.mark.slow
def test_reference_lists_the_public_api(site: Path) -> None:
    """Every name the facades export is on the API page."""
    page = _page(site, "api")
    for module in (chaoslight, public_checks, strategies):
        missing = [name for name in module.__all__ if f"<code>{name}" not in page]
        assert missing == [], module.__name__


def _exit_constants() -> dict[str, int]:
    """Every ``EXIT_*`` and ``*_STATUS`` integer the command-line modules define."""
    found: dict[str, int] = {}
    package = sys.modules["chaoslight._cli"]
    for info in pkgutil.iter_modules(package.__path__, "chaoslight._cli."):
        if info.name.endswith("__main__"):
            continue  # running the command is all it does
        for name, value in vars(importlib.import_module(info.name)).items():
            if (name.startswith("EXIT_") or name.endswith("_STATUS")) and type(value) is int:
                found[name] = value
    return found


@pytest.mark.slow
def test_reference_has_the_formats_and_exit_statuses(site: Path) -> None:
    """The formats page round-tripped its example; the exit page has every status constant."""
    assert "compared equal (it did)" in _page(site, "formats")
    exits = _page(site, "exit-codes")
    constants = _exit_constants()
    assert "USAGE_STATUS" in constants, "the scan of chaoslight._cli found no constants"
    missing = [name for name in constants if f"<code>{name}</code>" not in exits]
    assert missing == []
