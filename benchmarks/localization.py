"""The culprit report against the injection log: does what a failing run's report names
first point at the fault that was injected?

**What this table is, plainly.** ``outcome.culprit`` (``_report/_culprit.py``) is read
from chaoslight's own injection log: the first ``fired`` event of a fault that can fail a
job, its rank, site and step, cause ``injected fault``. The truth below is that same
``fired`` event. With one such fault per run, the rank, site, step and cause columns are
100 % **by construction** whenever the fault fired and a rank failed: they check that the
report does not lose the culprit, not that it localizes anything. Only ``text`` (the
verdict's first clause puts that rank, site and step before any other) and the time to
the verdict measure something. Where the *program's* bug is, against a truth the run
does not produce (the line its fix changes), is ``benchmarks/program_lines.py``.

    python benchmarks/localization.py --quick         # 2 programs, 2 points per kind (~2 min)
    python benchmarks/localization.py                 # 9 programs, 3 points each: 27 per kind
    python benchmarks/localization.py --points 5 --seed 1 --only oom,crash

**The kinds.** Every registered fault kind whose traits say it can make a job fail: its
severity is hard or desync, or it kills the process (``_schedule/_kind.py``); a kind
another change registers is scored as soon as it is. A drawn fault whose class is benign
all the same (a small allocation with no memory budget) is skipped. The hangs are the
desync kinds (a dropped sync) and every run that hung, whatever its fault (a row of
their own).

**The points.** For each program, one fault-free run records its reach (the same
``ReachRecorder`` and ``Reach.focused()`` a search starts from); each point is one fault of
the kind, its parameters the kind's defaults, at a (rank, site, step) drawn as the search
draws them (``Space``: a site the kind may fire at among those reached, the user's own
hooks ``USER_WEIGHT`` times as likely, then one of the steps that site was reached at,
then a rank). Each point runs once in one warm 2-rank World, with the default checks.

**The truth.** The drawn rank, site and step, confirmed by the rank's ``fired`` event of
that fault (its time is the fault's moment). A point whose fault never fired, or whose
run passed (the program recovered: there is nothing to localize) is not scored; both
are counted.

**What the report names first.** ``outcome.culprit`` (``_report/_culprit.py``): the
rank, the site, the step and the kind of cause (``injected fault``, or ``own error``,
``hung``, ``consequence``) the report puts first, as data. Scored: rank, site and step
equal to the truth, and the cause ``injected fault`` (the fault itself, not a peer's
consequence of it). The text is scored too (``text``): the first clause of the verdict's
reason (of the summary when the verdict did not fail: a correct program failing
cleanly) names ``rank R`` before any other rank, the site, and the step.

**Time to the verdict.** From the fault's ``fired`` event to the moment the oracle's
verdict exists (``judge`` returned here; one monotonic clock on one machine): the World's
hang decision, or the last rank's end, plus reading the logs and judging. Target: 100 %
rank and cause on every kind, >= 95 % site and step, p90 <= 2 s.
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import chaoslight  # noqa: E402
from chaoslight._checks._reach import ReachRecorder  # noqa: E402
from chaoslight._report import HUNG, PASSED  # noqa: E402
from chaoslight._runtime import FIRED  # noqa: E402
from chaoslight._schedule import FAULT_KINDS, Fault, Schedule, Severity  # noqa: E402
from chaoslight._search import DEFAULT_CHECKS  # noqa: E402
from chaoslight._search._drawing import reach_sites  # noqa: E402
from chaoslight._search._reach import USER_WEIGHT, Reach, Space  # noqa: E402
from chaoslight._verdict._oracle import judge  # noqa: E402

EXAMPLES = ROOT / "examples"
# (folder, program, function): correct programs and buggy ones, from every collection.
PROGRAMS: tuple[tuple[str, str, str], ...] = (
    ("corpus", "metrics_sync", "train"),
    ("bugs", "constant_loss_on_error", "train_buggy"),
    ("shapes", "user_collectives", "train"),
    ("corpus", "oom_skip", "train_buggy"),
    ("shapes", "gan_manual", "train"),
    ("catalogue", "swallowed_exception", "train_buggy"),
    ("bugs", "rank0_save_checkpoint", "train_fixed"),
    ("shapes", "save_checkpoint_end", "train"),
    ("shapes", "resume_from_checkpoint", "train"),  # loads a checkpoint: the load faults
)
HUNG_ROW = "(every hung run)"
TIMEOUT_S = 30.0
TARGET_P90_S = 2.0


# -- the kinds and the points --------------------------------------------------------------
def failing_kinds() -> list[type[Fault]]:
    """Every registered kind whose traits say it can make a job fail, simplest first."""
    ordered = sorted(FAULT_KINDS.values(), key=lambda cls: cls.simplicity)
    return [
        cls
        for cls in ordered
        if cls.severity in (Severity.HARD, Severity.DESYNC) or cls.kills_process
    ]


def not_scored() -> list[str]:
    """Each kind the default search draws that is not scored, with the reason its traits
    give: one that cannot make a correct job fail has no culprit to name."""
    scored = set(failing_kinds())
    return [
        f"{cls.kind}: severity {cls.severity.value}, kills no process: it cannot make a job fail"
        for cls in sorted(FAULT_KINDS.values(), key=lambda cls: cls.simplicity)
        if cls.drawn_by_default and cls not in scored
    ]


def draw_point(
    kind: type[Fault], space: Space, rng: random.Random
) -> tuple[str, int, int | None] | None:
    """(site, rank, step) for ``kind`` as the search's ``Space.triggers`` draws it, or None
    when no reached site can take it."""
    able = space.able(kind.drawn_at)
    if not able or space.reach is None:
        return None
    steps_of: dict[str, list[int | None]] = {}
    for site, step in space.reach.points:
        if site in able:
            steps_of.setdefault(site, []).append(step)
    user = space.reach.user
    weighted = [s for s in steps_of for _ in range(USER_WEIGHT if s in user else 1)]
    if not weighted:
        return None
    site = rng.choice(sorted(weighted))
    return site, rng.randrange(space.world_size), rng.choice(steps_of[site])


def make_fault(kind: type[Fault], site: str, rank: int, step: int | None) -> Fault | None:
    """The kind's fault with its default parameters, or None when it cannot fire there."""
    try:
        return kind(site=site, rank=rank, step=step)
    except Exception:  # a kind whose defaults need more than a trigger
        return None


# -- the truth and the score ----------------------------------------------------------------
@dataclass(frozen=True)
class Truth:
    """Where the injected fault fired: its rank, site, step, and when (monotonic)."""

    rank: int
    site: str
    step: int | None
    fired_at: float


def truth_of(outcome: Any, fault: Fault) -> Truth | None:
    """The drawn trigger, confirmed by its ``fired`` event on its rank; None if it never fired."""
    text = str(fault)
    for event in outcome.events:
        if event.kind == FIRED and event.fault == text and event.rank == fault.rank:
            return Truth(event.rank, event.site, event.step, event.time)
    return None


@dataclass(frozen=True)
class Score:
    """One scored point: what the report named first, judged against the truth."""

    rank: bool
    site: bool
    step: bool
    cause: bool
    text: bool
    seconds: float
    hung: bool = False


FAULT_CAUSE = "injected fault"


def score(truth: Truth, culprit: Any, text: str, seconds: float, hung: bool = False) -> Score:
    """Score ``culprit`` (an ``outcome.culprit``, or None when the report names nothing)
    and the report's ``text`` against ``truth``."""
    if culprit is None:
        return Score(False, False, False, False, names_first(text, truth), seconds, hung)
    return Score(
        culprit.rank == truth.rank,
        culprit.site == truth.site,
        culprit.step == truth.step,
        culprit.cause == FAULT_CAUSE,
        names_first(text, truth),
        seconds,
        hung,
    )


SEEN = " was seen: "


def score_silent(truth: Truth, fault: Fault, verdict: Any, seconds: float) -> Score | None:
    """A silent fault (a flip) in a run every rank passed: what the verdict's note on it
    says (``_verdict/_silent.py``), when a check saw it: the rank, site and step it names
    first, and that it says the fault was seen. None when the note says it went
    undetected (a correct program may absorb a flip: not a failure, nothing to localize)."""
    note = next((n for n in verdict.notes if n.startswith(str(fault))), "")
    if SEEN not in note:
        return None
    head = note.split(SEEN)[0]
    ranks = _RANK.findall(head)
    rank = bool(ranks) and int(ranks[0]) == truth.rank
    step = truth.step is None or re.search(rf"\bstep={truth.step}\b", head) is not None
    return Score(rank, truth.site in head, step, True, names_first(head, truth), seconds)


_RANK = re.compile(r"\brank (\d+)")


def names_first(text: str, truth: Truth) -> bool:
    """Whether the first clause of ``text`` (up to the first '; ') names ``rank R`` before
    any other rank, and names the site and the step."""
    first = text.split("; ")[0]
    ranks = _RANK.findall(first)
    if not ranks or int(ranks[0]) != truth.rank or truth.site not in first:
        return False
    return truth.step is None or re.search(rf"\bstep[= ]{truth.step}\b", first) is not None


def percentile(values: Sequence[float], fraction: float) -> float:
    """The ``fraction`` quantile of ``values`` (nearest rank), nan for none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * len(ordered) + 0.5) - 1))
    return ordered[index]


@dataclass
class Tally:
    """One row of the table: a kind's points and their scores."""

    drawn: int = 0
    unplaced: int = 0  # no reached site could take the kind, or its defaults
    unfired: int = 0
    recovered: int = 0
    undetected: int = 0  # a silent fault the run shows no trace of (its note says so)
    scores: list[Score] = field(default_factory=list)

    def row(self, name: str) -> str:
        runs = len(self.scores)

        def pct(flag: str) -> str:
            if not runs:
                return "-"
            return f"{100 * sum(getattr(s, flag) for s in self.scores) / runs:.0f}"

        seconds = [s.seconds for s in self.scores]
        median = f"{statistics.median(seconds):.2f}" if seconds else "-"
        p90 = f"{percentile(seconds, 0.9):.2f}" if seconds else "-"
        cells = [name, str(runs), pct("rank"), pct("site"), pct("step"), pct("cause")]
        cells += [pct("text"), median, p90, str(self.recovered), str(self.unfired)]
        cells += [str(self.unplaced), str(self.undetected)]
        return "| " + " | ".join(cells) + " |"


HEADER = (
    "| kind | runs | rank % | site % | step % | cause % | text % | to verdict median s "
    "| p90 s | recovered | never fired | no site | undetected |\n" + "|---" * 13 + "|"
)


def table(tallies: dict[str, Tally]) -> str:
    """The table, one row per kind (and the hung runs), in the order given."""
    return "\n".join([HEADER, *(tally.row(name) for name, tally in tallies.items())])


def misses(tallies: dict[str, Tally]) -> list[str]:
    """The kinds short of the target (100 % rank and cause, 95 % site and step, p90 2 s)."""
    short = []
    for name, tally in tallies.items():
        runs = len(tally.scores)
        if not runs:
            continue
        rate = {f: sum(getattr(s, f) for s in tally.scores) / runs for f in Score.__annotations__}
        p90 = percentile([s.seconds for s in tally.scores], 0.9)
        exact = min(rate["rank"], rate["cause"])
        if exact < 1 or min(rate["site"], rate["step"]) < 0.95 or p90 > TARGET_P90_S:
            short.append(name)
    return short


# -- running ------------------------------------------------------------------------------
def target(folder: str, name: str, function: str) -> str:
    return f"{EXAMPLES / folder / name}.py:{function}"


def reach_of(world: Any, where: str) -> Reach | None:
    """The program's reach, recorded by a fault-free run; None when that run fails (the
    program fails by itself: a fault there would not be the cause)."""
    outcome = world.run(where, Schedule(), timeout=TIMEOUT_S, checks=[ReachRecorder()])
    if not outcome.passed:
        return None
    reach = Reach.from_outcome(outcome)
    return reach.focused() if reach is not None else None


def run_point(
    world: Any, where: str, fault: Fault, checks: Iterable[str]
) -> tuple[Any, Any, float]:
    """One run of ``fault``: its outcome, verdict, and when the verdict existed."""
    outcome = world.run(where, Schedule([fault]), timeout=TIMEOUT_S, checks=list(checks))
    verdict = judge(outcome)
    return outcome, verdict, time.monotonic()


def report_text(outcome: Any, verdict: Any) -> str:
    """What the user reads first: the verdict's reason, else the summary's cause."""
    if verdict.failed:
        return str(verdict.reason)
    return outcome.summary().split(": ", 1)[-1]


def measure(
    world: Any,
    programs: Sequence[tuple[str, str, str]],
    kinds: Sequence[type[Fault]],
    points: int,
    seed: int,
    verbose: bool,
) -> dict[str, Tally]:
    tallies = {cls.kind: Tally() for cls in kinds}
    tallies[HUNG_ROW] = Tally()
    for folder, name, function in programs:
        where = target(folder, name, function)
        reach = reach_of(world, where)
        if reach is None:
            print(f"skipped {name}:{function}: its fault-free run fails", flush=True)
            continue
        space = Space(world.size, reach_sites(reach), 8, reach)
        rng = random.Random(f"{seed}/{name}/{function}")
        for kind in kinds:
            for _ in range(points):
                measure_point(world, where, kind, space, rng, tallies, verbose)
    return tallies


def measure_point(
    world: Any,
    where: str,
    kind: type[Fault],
    space: Space,
    rng: random.Random,
    tallies: dict[str, Tally],
    verbose: bool,
) -> None:
    tally = tallies[kind.kind]
    point = draw_point(kind, space, rng)
    fault = make_fault(kind, *point) if point is not None else None
    if fault is None:
        tally.unplaced += 1
        return
    if fault.fault_class(None) == Severity.BENIGN:
        return
    tally.drawn += 1
    outcome, verdict, decided = run_point(world, where, fault, DEFAULT_CHECKS)
    truth = truth_of(outcome, fault)
    if truth is None:
        tally.unfired += 1
        return
    if all(r.status == PASSED for r in outcome.ranks):
        if not kind.silent:
            tally.recovered += 1
            return
        found = score_silent(truth, fault, verdict, decided - truth.fired_at)
        if found is None:
            tally.undetected += 1
            return
        tally.scores.append(found)
        return
    text = report_text(outcome, verdict)
    hung = outcome.status == HUNG
    found = score(truth, getattr(outcome, "culprit", None), text, decided - truth.fired_at, hung)
    tally.scores.append(found)
    if hung:
        tallies[HUNG_ROW].scores.append(found)
    right = found.rank and found.site and found.step and found.cause and found.text
    if verbose or not right or found.seconds > TARGET_P90_S:
        program = Path(where.split(":")[0]).stem
        print(f"  {program} {fault} -> {outcome.status}, {found}: {text[:240]}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 programs, 2 points per kind")
    parser.add_argument("--points", type=int, default=3, help="per program and kind")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", default="", help="comma-separated kinds")
    parser.add_argument("--programs", default="", help="comma-separated program names")
    parser.add_argument("--verbose", action="store_true", help="print every point")
    args = parser.parse_args()
    kinds = [k for k in failing_kinds() if not args.only or k.kind in args.only.split(",")]
    programs = [p for p in PROGRAMS if not args.programs or p[1] in args.programs.split(",")]
    points = args.points
    if args.quick:
        programs, points = programs[:2], 2
    print(f"kinds scored: {', '.join(k.kind for k in kinds)}", flush=True)
    started = time.monotonic()
    with chaoslight.World(size=2) as world:
        tallies = measure(world, programs, kinds, points, args.seed, args.verbose)
    print("the culprit read from the injection log: rank/site/step/cause 100 % by construction")
    print(table(tallies))
    for line in not_scored():
        print(f"not scored: {line}")
    short = misses(tallies)
    took = time.monotonic() - started
    print(f"\n{took:.0f} s; short of the target: {', '.join(short) or 'none'}")


if __name__ == "__main__":
    main()
