"""The relations ``learned-invariants`` learns from two fault-free runs, and their judge.

No torch here: a *table* is what the observer recorded, a point of the run (a fit, a
training step, and whether it is the step's end or an epoch's end) mapped to each rank's
tracked values by name. A value's name says its kind (``"lr:0"``, ``"rng:torch"``), and
the kind says which relations may be learned about it at all (``RELATIONS_BY_KIND``):

- *equal across ranks*: at every point, every rank holds the same value;
- *constant over steps*: on each rank, within each fit, the value never changes.

A relation is kept only when it held at every point of **both** fault-free runs, about a
value present at every point on every rank of both (a value whose presence depends on
timing or data is never learned). A later run is judged only at the points both
fault-free runs reached, and never against their values: a reordered reduction changes
bits that two correct runs need not share, so "equal to the reference" is no relation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# A point of a run: (fit, step, stream); the step is the training batch index (-1 before
# any), the stream tells a step's end (``AT_STEP``) from an epoch's end (``AT_EPOCH``).
AT_STEP, AT_EPOCH = 0, 1
StepPoint = tuple[int, int, int]
ValueRow = dict[int, dict[str, Any]]  # rank -> value name -> value
ValueTable = dict[StepPoint, ValueRow]

EQUAL_ACROSS_RANKS = "equal across ranks"
CONSTANT_OVER_STEPS = "constant over steps"

# Which relations each kind of value may hold. Counters and learning rates advance or may
# follow a schedule (one driven by the clock is legitimate), so only their agreement across
# ranks is a relation; a logged metric may be anything the user computes, a timer included.
RELATIONS_BY_KIND: dict[str, tuple[str, ...]] = {
    "lr": (EQUAL_ACROSS_RANKS,),
    "counter": (EQUAL_ACROSS_RANKS,),
    "synced": (EQUAL_ACROSS_RANKS,),
    "metric": (EQUAL_ACROSS_RANKS,),
    "buffer": (EQUAL_ACROSS_RANKS, CONSTANT_OVER_STEPS),
    "rng": (EQUAL_ACROSS_RANKS, CONSTANT_OVER_STEPS),
    "parameter": (EQUAL_ACROSS_RANKS, CONSTANT_OVER_STEPS),
}
# A metric logged without sync_dist is learned equal across ranks only when it also took
# several values over the steps and the same values in both fault-free runs: a value
# computed from state every rank shares, not a rounded timer that happened to agree.
STRICT_KINDS = frozenset({"metric"})


def kind_of(name: str) -> str:
    return name.split(":", 1)[0]


def same(a: Any, b: Any) -> bool:
    """Equal, counting two NaNs as the same value."""
    return bool(a == b or (a != a and b != b))


@dataclass(frozen=True)
class LearnedRelations:
    """The relations learned: value names per relation, and the points both runs reached."""

    equal: frozenset[str] = frozenset()
    constant: frozenset[str] = frozenset()
    points: frozenset[StepPoint] = frozenset()
    # Per point and value learned equal: the value both fault-free runs held there, where
    # they held the same (a deterministic value: the random states, a learning rate). Never
    # a relation (a reorder may change bits a correct run need not share): it only names
    # which rank moved where two ranks disagree.
    agreed: dict[tuple[StepPoint, str], Any] = field(default_factory=dict, compare=False)

    def __bool__(self) -> bool:
        return bool(self.equal or self.constant)


@dataclass(frozen=True)
class BrokenRelation:
    """A learned relation a run broke: where, and the values that break it.

    ``values`` maps ranks to their values at ``point`` (every rank's, for equal across
    ranks; ``rank``'s, for constant over steps, which held ``before`` at ``since``)."""

    relation: str
    name: str
    point: StepPoint
    rank: int
    values: dict[int, Any]
    since: StepPoint | None = None
    before: Any = None


def learn(tables: list[ValueTable]) -> LearnedRelations:
    """The relations that held at every point of every one of ``tables`` (two or more
    fault-free runs; from fewer, nothing is learned)."""
    if len(tables) < 2 or not all(tables):
        return LearnedRelations()
    equal: set[str] = set()
    constant: set[str] = set()
    for stream in (AT_STEP, AT_EPOCH):
        parts = [{p: row for p, row in table.items() if p[2] == stream} for table in tables]
        if not all(parts):
            continue  # a stream one run never reached: nothing is learned from one run
        names = _present(parts)
        ranks = len(next(iter(parts[0].values())))
        for name in names:
            strict = kind_of(name) in STRICT_KINDS
            if ranks > 1 and _learnable(name, EQUAL_ACROSS_RANKS) and _equal(parts, name):
                equal |= {name} if not strict or _shared_and_moving(parts, name) else set()
            if _learnable(name, CONSTANT_OVER_STEPS) and _constant(parts, name):
                constant.add(name)
    points = frozenset(set(tables[0]).intersection(*tables[1:]))
    agreed = _agreed(tables, points, equal)
    return LearnedRelations(frozenset(equal), frozenset(constant), points, agreed)


def _agreed(
    tables: list[ValueTable], points: frozenset[StepPoint], names: set[str]
) -> dict[tuple[StepPoint, str], Any]:
    """Each value learned equal across ranks, at each point, where every fault-free run
    held the same one there."""
    agreed = {}
    for point in points:
        for name in names:
            held = [v[name] for table in tables for v in table[point].values() if name in v]
            if held and all(same(held[0], value) for value in held):
                agreed[(point, name)] = held[0]
    return agreed


def _learnable(name: str, relation: str) -> bool:
    return relation in RELATIONS_BY_KIND.get(kind_of(name), ())


def _present(tables: list[ValueTable]) -> set[str]:
    """Names present at every point on every rank of every table, with the same ranks."""
    ranks = {frozenset(row) for table in tables for row in table.values()}
    if len(ranks) != 1:
        return set()
    names: set[str] | None = None
    for table in tables:
        for row in table.values():
            for values in row.values():
                names = set(values) if names is None else names & set(values)
    return names or set()


def _equal(tables: list[ValueTable], name: str) -> bool:
    return all(
        all(same(first[name], v[name]) for v in row.values())
        for table in tables
        for row in table.values()
        for first in [row[min(row)]]
    )


def _constant(tables: list[ValueTable], name: str) -> bool:
    """The same value at every point of each fit, on each rank, in every table; and some
    fit of each table had two points or more (one point shows no constancy)."""
    for table in tables:
        seen: dict[tuple[int, int], Any] = {}
        repeated = False
        for (fit, _, _), row in sorted(table.items()):
            for rank, values in row.items():
                if (fit, rank) in seen:
                    repeated = True
                    if not same(seen[(fit, rank)], values[name]):
                        return False
                else:
                    seen[(fit, rank)] = values[name]
        if not repeated:
            return False
    return True


def _shared_and_moving(tables: list[ValueTable], name: str) -> bool:
    """Took two values or more in each table, and the same value at each common point."""
    for table in tables:
        if len({repr(v[name]) for row in table.values() for v in row.values()}) < 2:
            return False
    first, *others = tables
    for other in others:
        for point in set(first) & set(other):
            for rank, values in first[point].items():
                if not same(values[name], other[point][rank][name]):
                    return False
    return True


def first_broken(run: ValueTable, learned: LearnedRelations) -> BrokenRelation | None:
    """The earliest learned relation ``run`` breaks, at the points both reference runs
    reached and where every rank recorded the value; None when every one holds."""
    anchors: dict[tuple[int, int, int, str], tuple[StepPoint, Any]] = {}
    ranks = {frozenset(row) for point, row in run.items() if point in learned.points}
    everyone = max(ranks, key=len, default=frozenset())
    for point in sorted(set(run) & learned.points):
        row = run[point]
        if frozenset(row) != everyone:
            continue  # a rank that recorded nothing here: nothing to compare
        broken = _unequal(point, row, learned) or _moved(point, row, learned, anchors)
        if broken is not None:
            return broken
    return None


def _unequal(point: StepPoint, row: ValueRow, learned: LearnedRelations) -> BrokenRelation | None:
    for name in sorted(learned.equal):
        values = {rank: row[rank][name] for rank in sorted(row) if name in row[rank]}
        if len(values) != len(row):
            continue
        groups = [[r for r in values if same(values[r], values[rank])] for rank in values]
        if len(groups[0]) != len(values):
            odd = _odd_rank(values, groups, learned.agreed.get((point, name), _NONE))
            return BrokenRelation(EQUAL_ACROSS_RANKS, name, point, odd, values)
    return None


_NONE = object()  # no value the fault-free runs agreed on


def _odd_rank(values: dict[int, Any], groups: list[list[int]], agreed: Any) -> int:
    """The rank named: where exactly one group of equal values kept the value both
    fault-free runs held, a rank outside it (the one that moved: two ranks cannot tell
    otherwise); else one outside the largest group (three ranks or more tell it), with
    two ranks and no such value, the higher."""
    if agreed is not _NONE:
        kept = {tuple(g) for g in groups if same(values[g[0]], agreed)}
        if len(kept) == 1:
            (group,) = kept
            return next(rank for rank in values if rank not in group)
    largest = max(groups, key=len)
    return next(rank for rank in values if rank not in largest)


def _moved(
    point: StepPoint,
    row: ValueRow,
    learned: LearnedRelations,
    anchors: dict[tuple[int, int, int, str], tuple[StepPoint, Any]],
) -> BrokenRelation | None:
    fit, _, stream = point
    for name in sorted(learned.constant):
        for rank in sorted(row):
            if name not in row[rank]:
                continue
            since, value = anchors.setdefault((fit, stream, rank, name), (point, row[rank][name]))
            if not same(value, row[rank][name]):
                now = {rank: row[rank][name]}
                return BrokenRelation(CONSTANT_OVER_STEPS, name, point, rank, now, since, value)
    return None
