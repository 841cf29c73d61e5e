"""Which Lightning releases chaoslight works with: a smoke test per release, in a throwaway venv.

    python benchmarks/compat.py [--cache DIR] [--version REQUIREMENT ...] [--output FILE]

For each release (by default ``pytorch-lightning`` latest 2.4.x, 2.5.1, latest 2.5.x, latest
2.6.x and ``lightning`` latest 2.6.x) it makes a venv under ``--cache`` (default
``~/.cache/chaoslight-compat``) that sees this interpreter's packages
(``--system-site-packages``, so the CPU torch here is reused), installs only that release and
whatever it needs that is missing, with ``torch==<this torch>`` in the same pip command so pip
can never swap torch, and checks afterwards that the venv imports this very torch. The other
Lightning flavour is hidden in the venv, so each row tests one Lightning alone. chaoslight
comes from this checkout (``PYTHONPATH``). A venv is reused on later runs (a ``.ready`` file
marks a finished one), so a second run costs only the smoke tests.

In each venv ``compat_smoke.py FLAVOUR`` runs its ``STEPS`` one after the other and prints
one JSON line per step (a new step is one entry there). The result is a Markdown table
(release x step: ok, or FAILED and why) written to ``--output`` (default
``docs/reference/compat.md``). Exit status: 0 all passed, 1 some step failed, 3 a venv could
not be built because the package index cannot be reached (the reason: stderr's last line).

``--version`` takes a pip requirement for the row, optionally followed by extra requirements
the release needs, in one string: ``--version "pytorch-lightning==2.3.3 setuptools<81"``.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import importlib
import importlib.metadata
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from compat_smoke import FLAVOUR_VARIABLE, STEPS  # beside this file, on sys.path

ROOT = Path(__file__).resolve().parents[1]
SMOKE = Path(__file__).resolve().with_name("compat_smoke.py")
DEFAULT_VERSIONS = (
    "pytorch-lightning~=2.4.0",
    "pytorch-lightning==2.5.1",
    "pytorch-lightning~=2.5.0",
    "pytorch-lightning~=2.6.0",
    "lightning~=2.6.0",
)
DEFAULT_CACHE = Path.home() / ".cache" / "chaoslight-compat"
DEFAULT_OUTPUT = ROOT / "docs" / "reference" / "compat.md"
# Which module each distribution provides, and the other flavour hidden beside it.
FLAVOURS = {"pytorch-lightning": "pytorch_lightning", "lightning": "lightning.pytorch"}
HIDDEN = {"pytorch-lightning": "lightning", "lightning": "pytorch_lightning"}
PIP_TIMEOUT_S = 600
SMOKE_TIMEOUT_S = 900
INDEX_PROBE_S = 5
EXIT_FAILED, EXIT_NO_INDEX = 1, 3


HIDE_MODULE = '''"""Hides {hidden!r} in this venv: one Lightning flavour is tested alone."""
import sys


class _Hide:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == {hidden!r} or name.startswith({hidden!r} + "."):
            raise ModuleNotFoundError(f"No module named {{name!r}} (hidden)", name=name)
        return None


sys.meta_path.insert(0, _Hide)
'''


class NoIndex(Exception):
    """The venv is not cached and pip cannot reach the package index to build it."""


@dataclass(frozen=True)
class Row:
    """One release to test: its pip requirement, then any extra requirements it needs."""

    spec: str

    @property
    def requirements(self) -> list[str]:
        return self.spec.split()

    @property
    def package(self) -> str:
        name = re.match(r"[A-Za-z0-9_.-]+", self.requirements[0])
        return (name.group(0) if name else "").lower().replace("_", "-")

    @property
    def flavour(self) -> str:
        return FLAVOURS[self.package]


@dataclass
class Result:
    row: Row
    version: str = "?"
    cells: dict[str, str] | None = None
    build_s: float = 0.0
    smoke_s: float = 0.0
    not_run: str = ""


def torch_pin(version: str) -> str:
    """``torch==2.13.0`` for ``2.13.0+cpu``: the local part is left to the installed wheel."""
    return "torch==" + version.split("+")[0]


def venv_path(cache: Path, row: Row, torch_version: str) -> Path:
    key = f"{row.spec}|{sys.version}|{torch_version}"
    slug = re.sub(r"[^A-Za-z0-9.]+", "-", row.spec).strip("-")
    return cache / f"{slug}-{hashlib.sha256(key.encode()).hexdigest()[:10]}"


def _python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _run(
    command: list[str], timeout: float, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run ``command``; with ``check``, a failure raises RuntimeError with its last line."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        why = _last_line(done.stderr) or f"exit {done.returncode}"
        raise RuntimeError(f"{' '.join(command[:4])} ...: {why}")
    return done


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def index_reachable(package: str) -> str:
    """'' when pip can list ``package``'s releases within a few seconds, else why not."""
    command = [sys.executable, "-m", "pip", "index", "versions", package]
    command += ["--timeout", str(INDEX_PROBE_S), "--retries", "0", "--disable-pip-version-check"]
    try:
        done = _run(command, timeout=6 * INDEX_PROBE_S, check=False)
    except subprocess.TimeoutExpired:
        return f"pip index versions {package} took over {6 * INDEX_PROBE_S} s"
    return "" if done.returncode == 0 else _last_line(done.stderr) or f"exit {done.returncode}"


def build_venv(venv: Path, row: Row, torch_version: str) -> float:
    """Make the venv unless a finished one is cached; the seconds it took (0 when cached)."""
    if (venv / ".ready").exists():
        return 0.0
    unreachable = index_reachable(row.package)
    if unreachable:
        raise NoIndex(
            f"cannot build a venv for {row.spec}: the package index did not answer ({unreachable})"
        )
    start = time.monotonic()
    shutil.rmtree(venv, ignore_errors=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    # --without-pip: this interpreter's pip is visible through the system site-packages.
    _run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], 120)
    python = str(_python(venv))
    purelib = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], 60)
    site = Path(purelib.stdout.strip())
    (site / "_chaoslight_compat_hide.py").write_text(HIDE_MODULE.format(hidden=HIDDEN[row.package]))
    (site / "_chaoslight_compat_hide.pth").write_text("import _chaoslight_compat_hide\n")
    if sys.prefix != sys.base_prefix:  # run from a venv: its packages are not "system" ones
        # As site dirs, not bare paths, so their own .pth files run too: an editable
        # install's finder is what maps chaoslight.strategies onto the checkout's strategies/.
        outer = [p for p in sys.path if p.endswith("site-packages")]
        lines = "".join(f"import site; site.addsitedir({p!r})\n" for p in outer)
        (site / "_chaoslight_compat_outer.pth").write_text(lines)
    # torch pinned in the same command: pip keeps the installed one and never fetches another.
    pip = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    _run([*pip, *row.requirements, torch_pin(torch_version)], PIP_TIMEOUT_S)
    probe = _run([python, "-c", "import torch; print(torch.__version__)"], 120)
    if probe.stdout.strip() != torch_version:
        raise RuntimeError(f"the venv imports torch {probe.stdout.strip()!r}, not {torch_version}")
    seconds = time.monotonic() - start
    (venv / ".ready").write_text(json.dumps({"spec": row.spec, "build_s": round(seconds, 1)}))
    return seconds


def run_smoke(venv: Path, row: Row) -> tuple[str, dict[str, str]]:
    """The release's version and one cell per step, from ``compat_smoke.py`` in the venv."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.pop(FLAVOUR_VARIABLE, None)
    with tempfile.TemporaryDirectory(prefix="chaoslight-compat-") as cwd:
        process = subprocess.Popen(
            [str(_python(venv)), str(SMOKE), row.flavour],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # so a timeout takes the World's ranks down too
        )
        try:
            out, err = process.communicate(timeout=SMOKE_TIMEOUT_S)
            ended = f"exit {process.returncode}"
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            out, err = process.communicate()
            ended = f"timed out after {SMOKE_TIMEOUT_S} s"
    version, cells = "?", {}
    for line in out.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue  # Lightning's own output
        if isinstance(doc, dict) and "version" in doc:
            version = str(doc["version"])
        elif isinstance(doc, dict) and "step" in doc:
            ok = doc.get("note") or "ok"
            cells[str(doc["step"])] = ok if doc["ok"] else f"FAILED: {doc['detail']}"
    for name, _ in STEPS:
        cells.setdefault(name, f"FAILED: the smoke ended ({ended}) first: {_last_line(err)}")
    return version, cells


def check_row(cache: Path, row: Row, torch_version: str) -> Result:
    result = Result(row)
    venv = venv_path(cache, row, torch_version)
    try:
        result.build_s = build_venv(venv, row, torch_version)
    except NoIndex as exc:
        result.not_run = str(exc)
        return result
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        result.cells = {name: f"FAILED: venv: {exc}" for name, _ in STEPS}
        return result
    start = time.monotonic()
    result.version, result.cells = run_smoke(venv, row)
    result.smoke_s = time.monotonic() - start
    return result


def _cell(text: str, limit: int = 240) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def table(results: list[Result], command: str, torch_version: str) -> str:
    """The Markdown page: how it was made, what each step checks, then the table."""
    from chaoslight._sites._versions import SUPPORTED

    today = datetime.date.today().isoformat()
    python = ".".join(map(str, sys.version_info[:3]))
    lines = [
        "# Lightning compatibility",
        "",
        f"Produced by `{command}` on {today} (Python {python}, torch {torch_version}, CPU).",
        "Each release is installed alone into its own venv beside that torch (the other",
        "Lightning flavour is hidden there) and the smoke steps below run against it.",
        f"chaoslight declares the supported range `{SUPPORTED}` for both `pytorch-lightning`",
        "and `lightning` (`chaoslight/_sites/_versions.py`); on a release whose private",
        "internals differ it raises a one-line `ChaosError` naming the package, its version",
        "and the missing internal instead of silently not firing.",
        "",
    ]
    lines += [
        f"- **{name}**: {(step.__doc__ or '').strip().replace('``', '`')}" for name, step in STEPS
    ]
    names = [name for name, _ in STEPS]
    lines += ["", "| release | " + " | ".join(names) + " | seconds |"]
    lines.append("|---" * (len(names) + 2) + "|")
    for result in results:
        release = f"{result.row.package} {result.version}"
        if result.not_run:
            lines.append(f"| {result.row.spec} | " + " | ".join(["not run"] * len(names)) + " | |")
            continue
        cells = [_cell((result.cells or {}).get(name, "?")) for name in names]
        built = f" (+{result.build_s:.0f} venv)" if result.build_s else ""
        seconds = f"{result.smoke_s:.0f}{built}"
        lines.append(f"| {release} | " + " | ".join(cells) + f" | {seconds} |")
    return "\n".join(lines) + "\n"


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="where venvs are kept")
    parser.add_argument("--version", action="append", metavar="REQUIREMENT", dest="versions")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="the Markdown file")
    args = parser.parse_args(argv)
    for spec in args.versions or ():
        if Row(spec).package not in FLAVOURS:
            parser.error(f"--version {spec!r} must start with pytorch-lightning or lightning")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    torch_version = importlib.metadata.version("torch")
    results = []
    for row in map(Row, args.versions or DEFAULT_VERSIONS):
        print(f"compat: {row.spec} ...", file=sys.stderr, flush=True)
        results.append(check_row(args.cache, row, torch_version))
        done = results[-1]
        summary = done.not_run or ", ".join(f"{k}: {v}" for k, v in (done.cells or {}).items())
        print(f"compat: {row.package} {done.version}: {summary}", file=sys.stderr, flush=True)
    given = argv if argv is not None else sys.argv[1:]
    command = " ".join(["python benchmarks/compat.py", *map(shlex.quote, given)])
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(table(results, command, torch_version))
    print(f"compat: wrote {args.output}", file=sys.stderr)
    if any(v.startswith("FAILED") for r in results for v in (r.cells or {}).values()):
        return EXIT_FAILED
    not_run = [r.not_run for r in results if r.not_run]
    if not_run:
        print(not_run[0], file=sys.stderr)
        return EXIT_NO_INDEX
    return 0


if __name__ == "__main__":
    sys.exit(main())
