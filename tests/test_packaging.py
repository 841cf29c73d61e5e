"""The wheel: it installs on its own and ships chaoslight and chaoslight.strategies only."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOT_SHIPPED = shutil.ignore_patterns(
    ".git",
    "tests",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".*_cache",
    ".hypothesis",
    ".chaoslight",
    ".venv",
    "venv",
    "lightning_logs",
    "*.ckpt",
)


def run(*command: str | Path, cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_REQUIRE_VIRTUALENV")}
    result = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, f"{command} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from a copy of the source tree (so the checkout gets no build/ folder)."""
    source = tmp_path_factory.mktemp("source") / "chaoslight"
    shutil.copytree(ROOT, source, ignore=NOT_SHIPPED)
    out = tmp_path_factory.mktemp("dist")
    run(
        sys.executable,
        "-m",
        "build",
        "--wheel",
        "--no-isolation",
        "--skip-dependency-check",
        "--outdir",
        out,
        ".",
        cwd=source,
    )
    (built,) = out.glob("chaoslight-*.whl")
    return built


@pytest.mark.slow
def test_wheel_holds_only_the_chaoslight_package(wheel: Path) -> None:
    """The wheel's top-level names are chaoslight and its dist-info: no bare ``strategies``."""
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names}
    assert top == {"chaoslight", "chaoslight-0.1.0.dist-info"}
    assert "chaoslight/strategies/__init__.py" in names
    assert "chaoslight/py.typed" in names
    assert "chaoslight/_runtime/_engine.py" in names


@pytest.mark.slow
def test_wheel_installs_and_imports_in_a_fresh_venv(wheel: Path, tmp_path: Path) -> None:
    """Installed into a fresh venv, chaoslight and chaoslight.strategies import from the venv."""
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    if sys.prefix != sys.base_prefix:
        # This suite runs in a venv (as the README's users do): a venv made from it is made
        # from the base interpreter, whose packages lack chaoslight's dependencies (torch,
        # psutil, ...), so the new venv sees this venv's packages as site dirs.
        purelib = run(
            python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=tmp_path
        )
        outer = [p for p in sys.path if p.endswith("site-packages")]
        lines = "".join(f"import site; site.addsitedir({p!r})\n" for p in outer)
        (Path(purelib.strip()) / "_outer_venv.pth").write_text(lines)
    # The system pip, running under the venv's python, installs into the venv.
    run(python, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet", wheel, cwd=tmp_path)
    check = textwrap.dedent(
        """
        import importlib.util, json, sys
        import chaoslight, chaoslight.strategies
        schedule = chaoslight.Schedule.parse("oom@lightning.training_step rank=1 step=3")
        print(json.dumps({
            "chaoslight": chaoslight.__file__,
            "strategies": chaoslight.strategies.__file__,
            "bare_strategies": importlib.util.find_spec("strategies") is not None,
            "text": str(schedule),
            "prefix": sys.prefix,
        }))
        """
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    found = json.loads(run(python, "-c", check, cwd=elsewhere))
    site = Path(found["prefix"]).resolve()
    assert site == venv.resolve()
    assert Path(found["chaoslight"]).resolve().is_relative_to(site)
    assert Path(found["strategies"]).resolve().is_relative_to(site)
    assert not Path(found["chaoslight"]).resolve().is_relative_to(ROOT)
    assert found["bare_strategies"] is False
    assert found["text"] == "oom@lightning.training_step rank=1 step=3"
    # The [project.scripts] entry point and the pytest11 plugin work from the installed wheel.
    listed = run(venv / "bin" / "chaoslight", "sites", cwd=elsewhere)
    assert "lightning.training_step" in listed
    plugin_check = "import chaoslight._pytest_plugin as p, sys; print(p.__file__)"
    plugin_file = run(python, "-c", plugin_check, cwd=elsewhere).strip()
    assert Path(plugin_file).resolve().is_relative_to(site)
    helped = run(python, "-m", "pytest", "--help", cwd=elsewhere)
    assert "--chaos-world-size" in helped and "--chaos-timeout" in helped
