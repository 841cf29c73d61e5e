"""False alarms of the default ``chaoslight fuzz TARGET --max-time SECONDS`` on every
correct program the project has, at the budget a user gives a search.

    python benchmarks/false_alarms_budget.py --out fa-2.6.6.jsonl          # all, 150 s each
    python benchmarks/false_alarms_budget.py --out fa-2.5.1.jsonl --only corpus,upstream \\
        --lightning "pytorch-lightning==2.5.1"
    python benchmarks/false_alarms_budget.py --out fa-600.jsonl --max-time 600 \\
        --only "$(python benchmarks/false_alarms_budget.py --table fa-2.6.6.jsonl --slowest 10)"
    python benchmarks/false_alarms_budget.py --table fa-2.6.6.jsonl fa-2.5.1.jsonl fa-600.jsonl
    python benchmarks/false_alarms_budget.py --list                        # the program keys

The programs (``--list``; keys ``group/module:function``): every shape
(``examples/shapes``), every corpus ``train`` (``examples/corpus``, with the entry's own
checks), every fixed twin (``examples/bugs``, ``examples/catalogue`` and its robust
program, ``examples/known_issues``, ``examples/planted``, ``examples/restart`` and its
correct resume shapes), the correct loops and fixed twins of ``examples/loops`` (Fabric
and plain PyTorch), the programs of ``examples/known_issues`` whose only failure is
Lightning's (reported apart, never the program's), and ``examples/upstream``.

Each campaign is ``chaoslight.fuzz`` with the command line's defaults (every default
fault kind, the default checks plus an entry's own where it has them, 100 examples at
most, the default timeout), ``--max-time`` and ``--seed``, in a fresh Python process of
the interpreter ``--lightning`` names (another Lightning release: a venv of
``benchmarks/compat.py``'s cache, made and reused as that script does, torch pinned), in a
fresh temporary directory. It holds ``fcntl.flock`` on ``--lock``
(``/tmp/chaoslight-cpu.lock``) for that one program's campaign only, so other jobs on
the machine interleave between programs.

A finding on a correct program (any status but ``clean``; ``internal-error`` is counted
apart, as chaoslight's own bug) is a **false alarm**: its row gives the status, the first
line of the reason and the failing schedule. A framework issue reported apart is not one:
its key is listed. Each result is one JSON line appended to ``--out``; programs already
there (same key, ``--lightning``, ``--max-time``, ``--max-examples``, ``--seed``) are
skipped, so a run that stopped goes on where it stopped. ``--table`` renders JSON-lines
files as the Markdown table of ``docs/explanation/performance.md``; with ``--slowest N``
it prints instead the N programs whose search the budget cut shortest (stopped by time,
fewest examples), comma-separated, for a longer run.

Cost, measured on this 2-core machine: a campaign takes its ``--max-time`` plus 8-30 s
(the process and its World starting, the bound overshot by the example running at it:
``--max-time 20`` campaigns ran 21-48 s); the 137 programs at 150 s are about 6-7 hours of
lock time, the corpus and upstream programs on 2.5.1 about 1 hour, ten programs at 600 s
about 1.8 hours.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import fnmatch
import importlib.metadata
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from loaded import locked  # noqa: E402  (beside this file: the shared lock, held per program)

LOCK = "/tmp/chaoslight-cpu.lock"
MARK = "FALSE-ALARMS-BUDGET-RECORD "  # the line the campaign process prints its record on
CLEAN, INTERNAL = "clean", "internal-error"
NOT_RUN = "benchmark-error"  # the campaign process died or printed no record: retried
TIMED_OUT = "benchmark-timeout"
SLACK_S = 300.0  # beyond --max-time: the World's start, the example running at the bound
_ENTRY = re.compile(r"^def ([a-z]\w*)\(\)", re.M)  # a public function of no arguments


@dataclass(frozen=True)
class Program:
    """One correct program: ``group/module:function``, its world size, its own checks."""

    group: str  # a folder of examples/, or "examples" for a file of examples/ itself
    module: str
    function: str
    world_size: int = 2
    checks: Callable[[], list[Any]] | None = None  # None: the default checks
    lightning_bug: bool = False  # its only failure is Lightning's: reported apart

    @property
    def key(self) -> str:
        return f"{self.group}/{self.module}:{self.function}"

    @property
    def path(self) -> Path:
        folder = EXAMPLES if self.group == "examples" else EXAMPLES / self.group
        return folder / f"{self.module}.py"

    @property
    def target(self) -> str:
        return f"{self.path}:{self.function}"


def _entries(group: str, wanted: Callable[[str, str], bool], **options: Any) -> list[Program]:
    """The entry functions ``wanted(module, function)`` picks in ``examples/<group>/``."""
    found = []
    for path in sorted((EXAMPLES / group).glob("[!_]*.py")):
        for function in _ENTRY.findall(path.read_text()):
            if wanted(path.stem, function):
                found.append(Program(group, path.stem, function, **options))
    return found


def _named(names: tuple[str, ...]) -> Callable[[], list[Any]]:
    return lambda: list(names)


# Programs of examples/known_issues whose only failure is Lightning's own bug (its README).
LIGHTNING_ONLY = {
    "iteration_resume": "train",
    "on_exception_checkpoint": "train",
    "resume_repeats_batch": "train",
    "static_graph_manual": "train",
    "sigterm_exit_zero": "train_buggy",
    "custom_sampler_order": "train",
    "batch_sampler_rebuilt": "train",
    "eval_batch_sampler_shuffle": "train",
    "resume_workers_epoch_zero": "train",
    "fabric_loader_epoch": "train",
}


def programs() -> list[Program]:
    """Every correct program of ``examples/``, in the order the benchmark runs them."""
    from chaoslight._search import DEFAULT_CHECKS
    from examples.bugs import BUGS
    from examples.catalogue import CATALOGUE, ROBUST
    from examples.corpus import CORPUS
    from examples.shapes import SHAPES
    from examples.upstream import UPSTREAM

    chosen = [Program("upstream", p.name, p.function, p.world_size) for p in UPSTREAM]
    chosen += [Program("shapes", name, "train") for name in SHAPES]
    chosen += [Program("corpus", e.name, "train", e.world_size, e.build_checks) for e in CORPUS]
    chosen.append(Program("examples", "ddp_train", "train"))
    chosen += [Program("bugs", name, "train_fixed") for name in BUGS]
    for entry in (*CATALOGUE, ROBUST):
        own = _named((*DEFAULT_CHECKS, *entry.checks)) if entry.checks else None
        chosen.append(Program("catalogue", entry.name, entry.fixed, entry.world_size, own))
    chosen += _entries("known_issues", lambda module, function: function == "train_fixed")
    chosen += _entries(
        "known_issues",
        lambda module, function: LIGHTNING_ONLY.get(module) == function,
        lightning_bug=True,
    )
    chosen += _entries("planted", lambda module, function: function == "train_fixed")
    # Fabric and plain PyTorch loops: the correct programs and the buggy ones' fixed twins.
    chosen += _entries("loops", lambda module, function: function in ("train", "train_fixed"))
    chosen += _entries("restart", lambda module, function: function == "train_fixed")
    chosen += _entries(
        "restart",
        lambda module, function: module == "resume_shapes" and function != "iteration_based",
    )
    chosen += _entries(
        "restart",
        lambda module, function: (module, function) == ("resume_shapes", "iteration_based"),
        lightning_bug=True,  # Lightning's iteration-based resume, as its docstring says
    )
    return chosen


def select(everything: list[Program], only: str) -> list[Program]:
    """The programs ``--only`` names: a key, a group, ``group/module``, a module, or a
    shell pattern on the key (``'shapes/*'``), comma-separated."""
    tokens = [token.strip() for token in only.split(",") if token.strip()]
    if not tokens:
        return everything
    unknown = [t for t in tokens if not any(named_by(p, t) for p in everything)]
    if unknown:
        raise SystemExit(f"--only: no program is named {', '.join(unknown)} (see --list)")
    return [p for p in everything if any(named_by(p, t) for t in tokens)]


def named_by(program: Program, token: str) -> bool:
    names = (program.key, program.group, f"{program.group}/{program.module}", program.module)
    return token in names or fnmatch.fnmatchcase(program.key, token)


# The campaign, in its own process (``--campaign KEY``): one JSON record on stdout.


def lightning_release() -> str:
    """'lightning 2.6.6' or 'pytorch-lightning 2.5.1': the flavour the programs import
    (``lightning.pytorch`` first, as every program of examples/ tries)."""
    try:
        import lightning

        return f"lightning {lightning.__version__}"
    except ImportError:
        import pytorch_lightning

        return f"pytorch-lightning {pytorch_lightning.__version__}"


def run_campaign(program: Program, args: argparse.Namespace) -> dict[str, Any]:
    """The default search on one program; what the table needs of it."""
    import chaoslight

    options: dict[str, Any] = {"world_size": program.world_size, "seed": args.seed}
    if args.max_time is not None:
        options["max_time"] = args.max_time
    if args.max_examples is not None:
        options["max_examples"] = args.max_examples
    if program.checks is not None:
        options["checks"] = program.checks()
    started = time.monotonic()
    result, failure = chaoslight.fuzz(program.target, **options)
    status = str(result.status)
    record: dict[str, Any] = {
        "status": status,
        "examples": result.examples,
        "campaign_s": round(time.monotonic() - started, 1),
        "known": [{"key": k.issue.key, "schedule": _one_line(k.schedule)} for k in result.known],
        "false_alarm": status not in (CLEAN, INTERNAL),
        "reason": "",
        "schedule": "",
    }
    if status != CLEAN:
        reason = failure.reason if failure is not None else getattr(result.verdict, "reason", "")
        record["reason"] = (reason or "").strip().splitlines()[0][:300] if reason else ""
        record["schedule"] = _one_line(result.schedule)
    coverage = getattr(result, "coverage", None)
    if coverage is not None:
        with contextlib.suppress(Exception):
            record["coverage"] = coverage.line()
    record["lightning"] = lightning_release()
    record["torch"] = importlib.metadata.version("torch")
    return record


def _one_line(schedule: Any) -> str:
    """A schedule's text form on one line ('; ' between its lines); '' for none."""
    if schedule is None:
        return ""
    return "; ".join(schedule.to_text().splitlines()) or "(no fault)"


# The driver: one campaign process per program, under the shared lock, a JSON line each.


def identity(record: dict[str, Any]) -> tuple[Any, ...]:
    """What makes two results the same measurement: a later one replaces an earlier one."""
    return tuple(
        record.get(field) for field in ("key", "lightning_arg", "max_time", "max_examples", "seed")
    )


def load_records(paths: list[Path]) -> list[dict[str, Any]]:
    """Every record of the files, the last of each identity kept, in first-seen order."""
    kept: dict[tuple[Any, ...], dict[str, Any]] = {}
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict) and "key" in record:
                    kept[identity(record)] = record
    return list(kept.values())


def resolve_python(spec: str | None) -> str:
    """The interpreter ``--lightning`` names: none (this one), a python, a venv folder, or a
    pip requirement whose venv ``benchmarks/compat.py`` makes or reuses (torch pinned)."""
    if not spec:
        return sys.executable
    given = Path(spec).expanduser()
    if given.is_file():
        return str(given)
    if given.is_dir():
        return str(given / "bin" / "python")
    import compat  # beside this file

    row = compat.Row(spec)
    if row.package not in compat.FLAVOURS:
        raise SystemExit(f"--lightning {spec!r}: a python, a venv, or a Lightning requirement")
    torch_version = importlib.metadata.version("torch")
    venv = compat.venv_path(compat.DEFAULT_CACHE, row, torch_version)
    print(f"false alarms: the venv for {spec} is {venv}", file=sys.stderr, flush=True)
    compat.build_venv(venv, row, torch_version)
    return str(compat._python(venv))


def source_state() -> dict[str, Any]:
    """The checkout measured: its commit, and whether chaoslight/ has changes on top."""

    def git(*words: str) -> str:
        done = subprocess.run(["git", *words], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip()

    return {
        "commit": git("rev-parse", "--short", "HEAD"),
        "dirty": bool(git("status", "--porcelain", "chaoslight")),
    }


def campaign_process(python: str, program: Program, args: argparse.Namespace) -> dict[str, Any]:
    """Run ``--campaign KEY`` in a fresh process of ``python``; its record, or why none."""
    command = [python, str(Path(__file__).resolve()), "--campaign", program.key]
    command += ["--seed", str(args.seed)]
    if args.max_time is not None:
        command += ["--max-time", str(args.max_time)]
    if args.max_examples is not None:
        command += ["--max-examples", str(args.max_examples)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    limit = (args.max_time or 1800.0) * 1.5 + SLACK_S
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="chaoslight-false-alarms-") as cwd:
        process = subprocess.Popen(
            command, cwd=cwd, env=env, text=True, start_new_session=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            out, err = process.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate()
            return {
                "status": TIMED_OUT,
                "reason": f"no result after {limit:.0f} s",
                "seconds": round(time.monotonic() - started, 1),
            }
        except BaseException:
            os.killpg(process.pid, signal.SIGKILL)  # Ctrl-C: take the World's ranks down too
            raise
    seconds = round(time.monotonic() - started, 1)
    for line in reversed(out.splitlines()):
        if line.startswith(MARK):
            return {**json.loads(line[len(MARK) :]), "seconds": seconds}
    tail = " | ".join(line.strip() for line in err.strip().splitlines()[-3:])
    return {
        "status": NOT_RUN,
        "reason": f"exit {process.returncode}: {tail}"[:400],
        "seconds": seconds,
    }


def row(record: dict[str, Any]) -> str:
    """One printed line per program."""
    known = ",".join(k["key"] for k in record.get("known", [])) or "-"
    line = (
        f"{record['key']:<52} {record.get('lightning', '?'):<24} {record['status']:<22} "
        f"{record.get('examples', '-')!s:>4} {record.get('seconds', 0):7.1f}  known: {known}"
    )
    if record["status"] != CLEAN:
        line += (
            f"\n{'':<4}{record.get('reason', '')}\n{'':<4}schedule: {record.get('schedule', '')}"
        )
    return line


def run(args: argparse.Namespace) -> int:
    """Every chosen program not already in ``--out``: its campaign, its line appended."""
    chosen = select(programs(), args.only)
    python = resolve_python(args.lightning)
    base = {
        "lightning_arg": args.lightning or "",
        "max_time": args.max_time,
        "max_examples": args.max_examples,
        "seed": args.seed,
    }
    finished = {identity(r) for r in load_records([args.out]) if r.get("status") != NOT_RUN}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    records = []
    for program in chosen:
        head = {"key": program.key, "group": program.group, **base}
        if identity(head) in finished:
            print(f"{program.key:<52} done before, in {args.out}", flush=True)
            continue
        with locked(args.lock):  # one program per hold: others interleave between
            started = datetime.datetime.now().isoformat(timespec="seconds")
            result = campaign_process(python, program, args)
        record = {
            **head,
            "target": str(program.path.relative_to(ROOT)) + f":{program.function}",
            "lightning_bug": program.lightning_bug,
            "started": started,
            **source_state(),
            **result,
        }
        record.setdefault("false_alarm", False)
        with args.out.open("a") as handle:
            handle.write(json.dumps(record) + "\n")
        records.append(record)
        print(row(record), flush=True)
    alarms = sum(bool(r["false_alarm"]) for r in records)
    print(f"\nfalse alarms: {alarms} of {len(records)} programs run now (target 0); "
          f"every result in {args.out}; the table: --table {args.out}")  # fmt: skip
    return 1 if alarms else 0


def _cell(text: str, limit: int = 220) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def table(records: list[dict[str, Any]], command: str) -> str:
    """The Markdown section of ``docs/explanation/performance.md``."""
    if not records:
        return "no records\n"
    states = sorted(
        {f"{r.get('commit', '?')}{'+changes' if r.get('dirty') else ''}" for r in records}
    )
    dates = sorted(r.get("started", "")[:10] for r in records)
    lines = [
        f"Made by `{command}` from runs of {dates[0]} to {dates[-1]} (checkout "
        f"{', '.join(states)}). Each row is one default search "
        "(`chaoslight fuzz TARGET --max-time SECONDS --seed N`), its examples, the framework "
        "issues it reported apart, and its false alarm: any finding on a correct program.",
        "",
        "| program | Lightning | budget (s) | examples | known issues reported apart "
        "| false alarm | s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in records:
        known = ", ".join(sorted({k["key"] for k in r.get("known", [])})) or "—"
        if r.get("false_alarm"):
            alarm = f"**{r['status']}**: {r.get('reason', '')} — `{r.get('schedule', '')}`"
        elif r["status"] == CLEAN:
            alarm = "0"
        else:
            alarm = f"not judged ({r['status']}: {r.get('reason', '')})"
        mark = " (Lightning's bug)" if r.get("lightning_bug") else ""
        lines.append(
            f"| `{r['key']}`{mark} | {r.get('lightning', '?')} | {r.get('max_time') or 0:g} | "
            f"{r.get('examples', '—')} | {_cell(known)} | {_cell(alarm)} | "
            f"{r.get('seconds', 0):.0f} |"
        )
    alarms = sum(bool(r.get("false_alarm")) for r in records)
    other = sum(r["status"] not in (CLEAN,) and not r.get("false_alarm") for r in records)
    hours = sum(float(r.get("seconds", 0)) for r in records) / 3600
    lines += [
        "",
        f"**{alarms} false alarms** in {len(records)} campaigns (target 0); {other} not judged "
        f"(chaoslight's internal errors, benchmark timeouts); {hours:.1f} hours of campaigns.",
    ]
    return "\n".join(lines) + "\n"


def slowest(records: list[dict[str, Any]], count: int) -> list[str]:
    """The programs whose search the budget cut shortest: clean, stopped by time before
    their examples ran out, fewest examples first (then the longest)."""
    cut = [
        r for r in records
        if r["status"] == CLEAN and r.get("max_time") is not None
        and r.get("campaign_s", 0) >= 0.95 * float(r["max_time"])
    ]  # fmt: skip
    cut.sort(key=lambda r: (r.get("examples", 0), -float(r.get("seconds", 0))))
    keys: list[str] = []
    for r in cut:
        if r["key"] not in keys:
            keys.append(r["key"])
    return keys[:count]


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("false-alarms-budget.jsonl"),
        help="JSON lines, appended; programs there are skipped (%(default)s)",
    )
    parser.add_argument(
        "--only", default="", help="keys, groups, modules or patterns, comma-separated"
    )
    parser.add_argument(
        "--max-time", type=float, default=150.0, help="seconds per campaign (%(default)s)"
    )
    parser.add_argument(
        "--max-examples",
        type=int,
        default=None,
        help="per campaign (default: the command line's, 100)",
    )
    parser.add_argument("--seed", type=int, default=0, help="Hypothesis seed (%(default)s)")
    parser.add_argument(
        "--lightning",
        default=None,
        metavar="PYTHON|VENV|REQUIREMENT",
        help='another release: a python, a venv, or e.g. "pytorch-lightning==2.5.1"',
    )
    parser.add_argument(
        "--lock", default=LOCK, help="the shared CPU lock, held per program ('' none)"
    )
    parser.add_argument(
        "--table", nargs="+", type=Path, metavar="JSONL", help="render these, run nothing"
    )
    parser.add_argument(
        "--slowest",
        type=int,
        default=0,
        metavar="N",
        help="with --table: print the N programs the budget cut shortest",
    )
    parser.add_argument("--list", action="store_true", help="print the program keys, run nothing")
    parser.add_argument("--campaign", default=None, help=argparse.SUPPRESS)  # the child process
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.list:
        for program in select(programs(), args.only):
            print(program.key + ("  (Lightning's bug)" if program.lightning_bug else ""))
        return 0
    if args.table:
        records = load_records(args.table)
        if args.slowest:
            print(",".join(slowest(records, args.slowest)))
            return 0
        given = argv if argv is not None else sys.argv[1:]
        print(
            table(
                records,
                " ".join(["python benchmarks/false_alarms_budget.py", *map(shlex.quote, given)]),
            ),
            end="",
        )
        return 0
    if args.campaign is not None:
        program = next(p for p in programs() if p.key == args.campaign)
        print(MARK + json.dumps(run_campaign(program, args)), flush=True)
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
