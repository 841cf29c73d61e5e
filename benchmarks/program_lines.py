"""The program's line, scored: does the report of what the default search finds point at
the line the program's fix changes?

    python benchmarks/program_lines.py                      # every buggy program, ~30 min
    python benchmarks/program_lines.py --only swallowed_oom,bugs/setup_stats_file
    python benchmarks/program_lines.py --table              # the table of the results so far

**The programs and the truth.** Every buggy program of ``examples/`` and the line its fix
changes, from ``examples/fix_lines.py`` (an anchor text per program, on exactly one line:
``tests/test_fix_lines.py``). The truth is the program's source, not anything the run
produces: unlike ``benchmarks/localization.py``'s table, which reads the culprit back from
chaoslight's own injection log.

**The search.** ``chaoslight.fuzz(target, max_time=..., seed=...)`` with every other
argument at its default (kinds, checks, timeout, replays), as ``chaoslight fuzz TARGET
--max-time 30 --seed 0`` runs it; ``world_size`` is the program's own (3 for
``three_rank_reduce``). One warm World per world size; each program's search holds the
machine's lock (``--lock``) for itself, so other jobs interleave between programs.

**The first user frame named.** What a user reads of the failure, in order: the line
``chaoslight fuzz`` prints after ``failure:`` (the verdict's reason: a rank's position,
``(on_train_epoch_end → trainer.save_checkpoint(path), f.py:57)``, or the collective's
caller, ``_export at f.py:12``), its ``note:`` lines, then the root cause's traceback as
``chaoslight replay`` prints it (``show_cause_traceback``). The first frame of the
program's own code (a file under ``examples/``, its helper modules included) in the
failure line and notes; else the innermost program frame of the traceback (the line that
was running: Python prints it last). Scored against the fix line: **exact** (that line),
**function** (a line of the function or class holding it, ``FixLine.scope``), or
**miss** (another line, or no program frame named at all). A hang report that names
``trainer.fit(...)`` instead of the barrier that split the ranks is a miss.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import chaoslight  # noqa: E402
from chaoslight._report import show_cause_traceback  # noqa: E402
from chaoslight._search._statuses import CampaignStatus  # noqa: E402
from examples.fix_lines import FIX_LINES, HERE, FixLine  # noqa: E402

LOCK = "/tmp/chaoslight-cpu.lock"
RESULTS = ROOT / ".chaoslight" / "program_lines.jsonl"
EXACT, FUNCTION, MISS = "exact", "function", "miss"

FOUND_WORDS = {
    CampaignStatus.FOUND: "yes",
    CampaignStatus.BASELINE: "yes, no fault",
    CampaignStatus.FLAKY_BASELINE: "yes, flaky without faults",
    CampaignStatus.FLAKY: "flaky",
    CampaignStatus.CLEAN: "no",
    CampaignStatus.INTERNAL_ERROR: "internal error",
}
NOT_FOUND = (CampaignStatus.CLEAN, CampaignStatus.INTERNAL_ERROR)


# -- the frames a report names ------------------------------------------------------------
@dataclass(frozen=True)
class Named:
    """A frame of the program's code a report names: its file, line, function, and the
    part of the report it is in (``failure``, ``note``, ``traceback``)."""

    path: str
    line: int
    function: str
    part: str

    def cell(self) -> str:
        return f"`{self.function}`, {Path(self.path).name}:{self.line} ({self.part})"


# ``(on_train_epoch_end → trainer.save_checkpoint(path), f.py:57)``: a rank's position.
POSITION = re.compile(r"\((?P<function>[\w.<>]+)(?: → .*?)?, (?P<file>[\w.-]+\.py):(?P<line>\d+)\)")
# ``_export at f.py:12``: who called the collective a rank is blocked in.
CALLER = re.compile(r"\b(?P<function>[\w<>]+) at (?P<file>[\w.-]+\.py):(?P<line>\d+)")
# ``  File "/abs/f.py", line 12, in _export``: a traceback's frame.
TRACEBACK = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>\S+)')


def program_file(name: str, folder: Path) -> Path | None:
    """The program's own file ``name`` (a path, or a bare file name as evidence writes it),
    or None when it is not under ``examples/``: a bare name is looked for in the program's
    folder first, then in every collection (the planted helpers are shared)."""
    path = Path(name)
    if path.is_absolute():
        return path if path.is_relative_to(HERE) else None
    for candidate in (folder / name, *sorted(HERE.glob(f"*/{name}"))):
        if candidate.is_file():
            return candidate
    return None


def named_frames(text: str, part: str, folder: Path) -> list[Named]:
    """The program frames ``text`` names, in the order it names them."""
    hits = [m for pattern in (POSITION, CALLER, TRACEBACK) for m in pattern.finditer(text)]
    found = []
    for match in sorted(hits, key=lambda m: m.start()):
        path = program_file(match["file"], folder)
        if path is not None:
            found.append(Named(str(path), int(match["line"]), match["function"], part))
    return found


def first_named(parts: list[tuple[str, str]], folder: Path) -> Named | None:
    """The first program frame of the failure line and notes, else the innermost program
    frame of the traceback (see the module)."""
    for part, text in parts:
        frames = named_frames(text, part, folder)
        if frames:
            return frames[-1] if part == "traceback" else frames[0]
    return None


def score(named: Named | None, fix: FixLine) -> str:
    """``exact``, ``function`` or ``miss`` (see the module)."""
    if named is None or Path(named.path) != fix.path:
        return MISS
    if named.line == fix.line():
        return EXACT
    scope = fix.scope()
    return FUNCTION if scope is not None and scope.holds(named.line) else MISS


class Lines:
    """A console that keeps what is printed (``show_cause_traceback`` prints to one)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def print(self, text: str = "") -> None:
        self.lines.append(str(text))


def report_parts(result: Any) -> list[tuple[str, str]]:
    """What the user reads of a found failure, in order (see the module)."""
    verdict = result.verdict
    parts = [("failure", str(verdict.reason))]
    parts += [("note", str(note)) for note in verdict.notes]
    if result.outcome is not None:
        console = Lines()
        show_cause_traceback(console, result.outcome)  # type: ignore[arg-type]
        parts.append(("traceback", "\n".join(console.lines)))
    return parts


# -- one program --------------------------------------------------------------------------
BY_NAME = {fix.name: fix for fix in FIX_LINES}


@dataclass
class Row:
    """One program's search: what it found, and the report's parts (``report_parts``), kept
    so that ``--table`` scores them again against the registry as it is now."""

    program: str
    found: str
    seconds: float
    examples: int = 0
    schedule: str = ""
    parts: list[tuple[str, str]] = field(default_factory=list)

    @property
    def fix(self) -> FixLine:
        return BY_NAME[self.program]

    def named(self) -> Named | None:
        return first_named(self.parts, self.fix.path.parent)

    def score(self) -> str:
        """``exact``, ``function``, ``miss``, or ``-`` when nothing was found."""
        return score(self.named(), self.fix) if self.parts else "-"

    def cells(self) -> str:
        named = self.named()
        cells = [f"`{self.program}`", self.found, named.cell() if named else "none"]
        cells += [fix_cell(self.fix), self.score(), f"{self.seconds:.0f}"]
        return "| " + " | ".join(cells) + " |"


def fix_cell(fix: FixLine) -> str:
    scope = fix.scope()
    return f"{fix.path.name}:{fix.line()}" + (f" (`{scope.name}`)" if scope else "")


def measure(fix: FixLine, world: Any, max_time: float, seed: int) -> Row:
    """Search ``fix``'s program once with the default search; keep what its report says."""
    started = time.monotonic()
    result, _ = chaoslight.fuzz(
        str(HERE / fix.target),
        world=world,
        max_time=max_time,
        seed=seed,
        world_size=fix.world_size,
    )
    seconds = time.monotonic() - started
    found = FOUND_WORDS.get(result.status, str(result.status))
    if result.known:  # Lightning's own bugs, reported apart (exit 0 unless --strict)
        keys = ", ".join(getattr(k.issue, "key", str(k.issue)) for k in result.known)
        found += f"; reported apart: {keys}"
    parts = []
    if result.verdict is not None and result.status not in NOT_FOUND:
        parts = report_parts(result)
    schedule = result.schedule.to_text() if result.schedule is not None else ""
    return Row(fix.name, found, seconds, result.examples, schedule, parts)


# -- the run ------------------------------------------------------------------------------
@contextlib.contextmanager
def locked(path: str) -> Iterator[None]:
    """Hold the machine's lock (``flock``) for one program's search."""
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def chosen(only: str) -> list[FixLine]:
    """The programs ``--only`` names (by file name, folder/file or target), else all."""
    if not only:
        return list(FIX_LINES)
    wanted = only.split(",")
    picked = [
        fix
        for fix in FIX_LINES
        if any(w in (fix.name, fix.name.split(":")[0], fix.path.stem) for w in wanted)
    ]
    if not picked:
        raise SystemExit(f"--only {only}: no buggy program of that name (examples/fix_lines.py)")
    return picked


def load(path: Path) -> dict[str, Row]:
    if not path.exists():
        return {}
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    kept = [Row(**{**row, "parts": [tuple(p) for p in row["parts"]]}) for row in rows]
    return {row.program: row for row in kept if row.program in BY_NAME}


def save(path: Path, rows: dict[str, Row]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    order = {fix.name: index for index, fix in enumerate(FIX_LINES)}
    ordered = sorted(rows.values(), key=lambda row: order.get(row.program, len(order)))
    path.write_text("".join(json.dumps(asdict(row)) + "\n" for row in ordered))


HEADER = (
    "| program | found? | first user frame named | fix line | score | s |\n"
    "|---|---|---|---|---|---|"
)


def table(rows: dict[str, Row]) -> str:
    """The Markdown table and its totals, in the registry's order."""
    order = [fix.name for fix in FIX_LINES if fix.name in rows]
    lines = [HEADER, *(rows[name].cells() for name in order)]
    found = [r for r in rows.values() if r.score() != "-"]
    counts = {s: sum(r.score() == s for r in found) for s in (EXACT, FUNCTION, MISS)}
    unnamed = sum(r.named() is None for r in found)
    lines.append(
        f"\n{len(found)} of {len(rows)} programs found; of those, the first user frame "
        f"named is the fix line in {counts[EXACT]}, in the function holding it in "
        f"{counts[FUNCTION]}, elsewhere in {counts[MISS] - unnamed}; "
        f"{unnamed} name no frame of the program."
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated programs (file names)")
    parser.add_argument("--max-time", type=float, default=30.0, help="seconds per search")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lock", default=LOCK, help="the lock each search holds")
    parser.add_argument("--results", type=Path, default=RESULTS, help="rows kept across runs")
    parser.add_argument("--table", action="store_true", help="print the table; run nothing")
    args = parser.parse_args()
    rows = load(args.results)
    if not args.table:
        run(chosen(args.only), rows, args)
    print(table(rows))


def run(fixes: list[FixLine], rows: dict[str, Row], args: argparse.Namespace) -> None:
    """Search each program, under the lock, on a World per world size kept between them
    (one that raised is closed; the next program starts a fresh one)."""
    worlds: dict[int, Any] = {}
    try:
        for fix in fixes:
            with locked(args.lock):
                try:
                    if fix.world_size not in worlds:
                        worlds[fix.world_size] = chaoslight.World(size=fix.world_size)
                        worlds[fix.world_size].start()
                    row = measure(fix, worlds[fix.world_size], args.max_time, args.seed)
                except Exception as error:  # one program's trouble is its row, not the run's
                    row = Row(fix.name, f"benchmark error: {type(error).__name__}: {error}", 0.0)
                    broken = worlds.pop(fix.world_size, None)
                    if broken is not None:
                        broken.close()
            rows[row.program] = row
            save(args.results, rows)
            reason = row.parts[0][1][:300] if row.parts else ""
            print(f"{row.cells()}\n    {row.schedule!r} {reason}", flush=True)
    finally:
        for world in worlds.values():
            world.close()


if __name__ == "__main__":
    main()
