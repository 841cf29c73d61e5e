"""The wheel and the sdist: built from the checkout, they hold the whole package; the wheel,
installed into a venv that cannot see the checkout, runs the README's main job.

The venv gets chaoslight from the wheel alone: it is made without system site-packages,
its dependencies come from this environment's site-packages as plain path entries (so
none of that folder's ``.pth`` files runs, the checkout's editable finder among them),
and nothing runs in the checkout or with ``PYTHONPATH``. A module missing from the wheel
is then missing for the user too (``No module named 'chaoslight._report'``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VERSION = "0.1.0"
NOT_SHIPPED = shutil.ignore_patterns("__pycache__", "*.pyc")
MAIN_JOB = ("fuzz", "examples/planted/swallowed_oom.py:train", "--seed", "3")

pytestmark = pytest.mark.slow


def run(*command: str | Path, cwd: Path, status: int = 0, **env: str) -> str:
    """Run ``command`` in ``cwd`` with no PYTHONPATH and no chaoslight variables (plus
    ``env``); its stdout, once it exited ``status``."""
    clean = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "PIP_REQUIRE_VIRTUALENV") and not key.startswith("CHAOSLIGHT")
    }
    result = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == status, (
        f"{command} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    )
    return result.stdout


# Folders of the checkout and the package each installs as (setup.py says the same).
SOURCES = {"chaoslight": "chaoslight", "strategies": "chaoslight/strategies"}


def package_files() -> set[str]:
    """Every file of the package in the checkout, as an archive names it."""
    return {
        f"{installed}/{path.relative_to(ROOT / folder).as_posix()}"
        for folder, installed in SOURCES.items()
        for path in (ROOT / folder).rglob("*")
        if path.is_file()
        and path.suffix in (".py", ".typed", ".cpp")
        and "__pycache__" not in path.parts
    }


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and the wheel ``python -m build`` makes (the wheel from the sdist, as pip
    does), from a copy of what a build reads (so the checkout gets no build/ folder)."""
    source = tmp_path_factory.mktemp("source") / "chaoslight"
    for folder in SOURCES:
        shutil.copytree(ROOT / folder, source / folder, ignore=NOT_SHIPPED)
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, source / name)
    out = tmp_path_factory.mktemp("dist")
    build = ("-m", "build", "--no-isolation", "--skip-dependency-check", "--outdir", out, ".")
    run(sys.executable, *build, cwd=source)
    return out


@pytest.fixture(scope="module")
def venv(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv holding the wheel and nothing of the checkout."""
    folder = tmp_path_factory.mktemp("venv") / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", folder, cwd=folder.parent)
    python = folder / "bin" / "python"
    outer = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    # This environment's pip, run by the venv's python, installs into the venv (scripts
    # and all); --ignore-installed: the checkout's own editable chaoslight is not the venv's.
    (wheel,) = dist.glob("chaoslight-*.whl")
    pip = ("-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed", "--quiet")
    run(python, *pip, wheel, cwd=folder.parent, PYTHONPATH=os.pathsep.join(outer))
    purelib = run(
        python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=folder
    )
    # Plain path lines: a .pth adds them to sys.path without running their own .pth files.
    (Path(purelib.strip()) / "_dependencies.pth").write_text("".join(f"{p}\n" for p in outer))
    return folder


def test_the_wheel_and_the_sdist_hold_the_whole_package(dist: Path) -> None:
    """Every module of chaoslight/ and strategies/ (installed as chaoslight.strategies;
    py.typed included) is in both archives (the sdist as the tree holds them), and the
    wheel's top level is chaoslight and its dist-info only."""
    expected = package_files()
    assert {"chaoslight/_report/_outcome.py", "chaoslight/strategies/__init__.py"} <= expected
    (wheel,) = dist.glob("chaoslight-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {name.split("/")[0] for name in names} == {
        "chaoslight",
        f"chaoslight-{VERSION}.dist-info",
    }
    assert expected - names == set()
    (sdist,) = dist.glob("chaoslight-*.tar.gz")
    with tarfile.open(sdist) as archive:
        held = {name.partition("/")[2] for name in archive.getnames()}
    tree = {name.replace("chaoslight/strategies/", "strategies/", 1) for name in expected}
    assert tree - held == set()


def test_the_installed_wheel_imports_from_its_venv_alone(venv: Path, tmp_path: Path) -> None:
    """chaoslight, chaoslight.strategies, the command and the pytest plugin come from the
    venv; no editable finder and no folder of the checkout is on the path."""
    check = textwrap.dedent(
        f"""
        import importlib, importlib.util, json, sys
        import chaoslight, chaoslight.strategies, chaoslight._pytest_plugin
        print(json.dumps({{
            "files": [chaoslight.__file__, chaoslight.strategies.__file__,
                      chaoslight._pytest_plugin.__file__],
            "bare_strategies": importlib.util.find_spec("strategies") is not None,
            "finders": [repr(finder) for finder in sys.meta_path],
            "checkout": [p for p in sys.path if p and p.startswith({str(ROOT)!r})
                         and not p.endswith("site-packages")],
            "text": str(chaoslight.Schedule.parse("oom@lightning.training_step rank=1 step=3")),
            "budget": importlib.import_module("chaoslight._runtime._cpu_budget").how_counted(),
        }}))
        """
    )
    found = json.loads(run(venv / "bin" / "python", "-c", check, cwd=tmp_path))
    assert all(Path(file).resolve().is_relative_to(venv.resolve()) for file in found["files"])
    assert not any("editable" in finder.lower() for finder in found["finders"])
    assert found["checkout"] == [] and found["bare_strategies"] is False
    assert found["text"] == "oom@lightning.training_step rank=1 step=3"
    assert found["budget"] == ["allocator", ""]  # built from the C++ source the wheel holds
    assert "lightning.training_step" in run(venv / "bin" / "chaoslight", "sites", cwd=tmp_path)
    helped = run(venv / "bin" / "python", "-m", "pytest", "--help", cwd=tmp_path)
    assert "--chaos-world-size" in helped and "--chaos-timeout" in helped


def test_the_installed_wheel_runs_the_readme_main_job(venv: Path, tmp_path: Path) -> None:
    """`chaoslight fuzz examples/planted/swallowed_oom.py:train --seed 3`, from the venv in a
    project holding only that example, exits 1 with the swallowed OOM as its failure."""
    planted = tmp_path / "examples" / "planted"
    planted.mkdir(parents=True)
    for name in ("swallowed_oom.py", "_common.py"):
        shutil.copy(ROOT / "examples" / "planted" / name, planted / name)
    out = run(venv / "bin" / "chaoslight", *MAIN_JOB, cwd=tmp_path, status=1)
    assert "oom@lightning.forward" in out, out
    failure = json.loads((tmp_path / "chaoslight-failure.json").read_text())
    assert [f["kind"] for f in failure["schedule"]["faults"]] == ["oom"], failure
