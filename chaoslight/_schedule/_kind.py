"""What a fault kind is: the ``Fault`` base with its trigger and its traits, the oracle's
``Severity``, and ``FAULT_KINDS``, the registry ``@fault_kind`` fills (``_faults.py``).

A kind is one unit: its class carries its traits (how the oracle judges it, whether it
aborts the call or kills the process, whether and where a search draws it, its place in
the simplest-first order). Every table above this layer (the search's kind lists, the
oracle's classes, the engine's aborting faults) is derived from them, never written out
again.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, TypeVar

from chaoslight._schedule._catalog import SITES
from chaoslight._schedule._encode import fault_to_text
from chaoslight._schedule._errors import InvalidArgument, suggest
from chaoslight._schedule._validate import (
    COUNT_WHY,
    EVERY_RUN,
    MAX_COUNT,
    MAX_RANK,
    RANK_WHY,
    check_optional_bounded_int,
    check_run,
)
from chaoslight._schedule._vocabulary import Vocabulary

# A pseudo-capability for the search: any site but a collective (see ``Fault.drawn_at``).
OFF_COLLECTIVES = "off-collectives"
# In the message of every OOM chaoslight simulates (``_runtime/_memory.py``): how the
# oracle tells the injected OOM from one the program ran into by itself.
SIMULATED_OOM_MARK = "simulated by chaoslight"


class Severity(Vocabulary):
    """The oracle's class of a fault: what a correct program can be asked to do under it
    (``docs/explanation/oracle.md``), mildest first."""

    BENIGN = "benign"  # it must pass and every check hold
    HARD = "hard"  # it may fail cleanly or recover consistently, never hang or swallow
    DESYNC = "desync"  # no correct program survives it: nothing may hang


@dataclass(frozen=True)
class Fault:
    """Base of every fault kind: the trigger fields shared by all.

    - ``site``: a registered site name (``chaoslight.sites()`` lists them).
    - ``rank``: the global rank it fires on, or None for every rank.
    - ``step``: the training batch index (0-based, counted across epochs since fit
      began: Lightning's ``trainer.fit_loop.total_batch_idx``), or None for any step.
    - ``nth``: fire only on the n-th call (1-based) of the site on this rank -- within
      ``step`` when a step is given, else since injection began.
    - ``times``: how many firings at most (None: every matching call).
    - ``run``: in a schedule with restarts, the run it fires in (1 the first, 2 the first
      restart, ...), or ``"every"`` for each run (``times`` then counts per run); None,
      the default, fires in the first run that reaches it, ``times`` counted over all runs.
      ``inject()`` and ``chaoslight run`` make one run: run 1.
    """

    kind: ClassVar[str] = ""
    needs: ClassVar[str | None] = None  # a site capability this kind requires
    # The kind's traits; every layer above reads these, never a list of kind names.
    severity: ClassVar[Severity] = Severity.HARD  # the oracle's class; see fault_class()
    aborts_call: ClassVar[bool] = False  # raises at the site: the call never runs; aborts()
    kills_process: ClassVar[bool] = False  # ends its process: inject() needs allow_crash
    drawn_by_default: ClassVar[bool] = False  # a search given no faults=[...] draws it
    needs_peers: ClassVar[bool] = False  # a no-op in one process: in-process search skips it
    catchable: ClassVar[bool] = False  # raises an error into the program, which may catch it
    # Its firing is a notice whose effect comes later (a preemption's SIGTERM): it counts
    # once delivered, and a run where only such faults struck may show the framework's bug.
    acts_later: ClassVar[bool] = False
    # It changes which samples its rank reads (a batch read twice, or lost): the data
    # checks do not judge that rank's epoch, whose repeat or gap is the fault's, not the
    # program's.
    alters_data: ClassVar[bool] = False
    # It damages state and raises nothing (a flipped bit): a run that shows no trace of it
    # in any check gets a note that it went undetected (never a failure by itself).
    silent: ClassVar[bool] = False
    # It stops its rank making progress while alive (a freeze): that rank swallows nothing,
    # its own hang is the fault, and a peer that waits for it in a collective (which the
    # process group's timeout bounds) does what every correct program does.
    stalls: ClassVar[bool] = False
    # It raises nothing into the program (a batch read twice, a freeze): an error its rank
    # ends with afterwards is the program's own reaction to it, so the rank ended by it and
    # swallowed nothing of it. Its ``surfaced_in`` is False for every text: it never stands
    # for another fault's error (an OOM the same rank swallowed stays swallowed).
    raises_nothing: ClassVar[bool] = False
    simplicity: ClassVar[int] = 0  # its place in the simplest-first order a search shrinks to
    # The capability whose sites a search draws it at (OFF_COLLECTIVES: any site but a
    # collective; None: any site); a subclass that leaves it out is drawn where it can fire.
    drawn_at: ClassVar[str | None] = None

    site: str = field(kw_only=True)
    rank: int | None = field(default=None, kw_only=True)
    step: int | None = field(default=None, kw_only=True)
    nth: int | None = field(default=None, kw_only=True)
    times: int | None = field(default=1, kw_only=True)
    run: int | str | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        if not isinstance(self.site, str) or self.site not in SITES:
            raise InvalidArgument(
                f"site={self.site!r} is not a known site{suggest(str(self.site), SITES)}; "
                "chaoslight.sites() lists them"
            )
        if self.needs is not None and self.needs not in SITES[self.site].capabilities:
            able = sorted(name for name, s in SITES.items() if self.needs in s.capabilities)
            raise InvalidArgument(
                f"{self.kind} cannot fire at site={self.site!r}: it needs a {self.needs} site "
                f"({', '.join(able[:6])}, ...)"
            )
        check_optional_bounded_int("rank", self.rank, 0, MAX_RANK, RANK_WHY)
        check_optional_bounded_int("step", self.step, 0, MAX_COUNT, COUNT_WHY)
        check_optional_bounded_int("nth", self.nth, 1, MAX_COUNT, COUNT_WHY)
        check_optional_bounded_int("times", self.times, 1, MAX_COUNT, COUNT_WHY)
        check_run("run", self.run)
        self._validate()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "drawn_at" not in vars(cls):
            cls.drawn_at = cls.needs

    def _validate(self) -> None:
        """Kind-specific checks; overridden by subclasses with parameters."""

    def fault_class(self, budget: Any = None) -> Severity:
        """How the oracle judges this fault: its kind's severity, unless a parameter or
        the schedule's memory ``budget`` changes it (a reduction reordered on one rank
        alone; an allocation that cannot fail without a budget)."""
        return self.severity

    def aborts(self) -> bool:
        """Whether firing raises at the site, so the wrapped call never runs (a deferred
        OOM raises later, at a sync point)."""
        return self.aborts_call

    def surfaced_in(self, error_text: str) -> bool:
        """Whether a rank's error (its traceback and message) is this fault's own, come to
        the surface: how the oracle tells a rank ended by its fault from one that swallowed
        it and failed later. A kind that ends its rank by other means says False."""
        return False

    def kills_with(self) -> int | None:
        """The signal it ends its process with, when nothing handles it (a crash's, a
        preemption's SIGTERM); None for a kind that sends none. A rank that died of that
        signal after it fired died of the fault, not of something that came after it."""
        return None

    def gentler(self) -> Fault | None:
        """The same trigger as a milder fault that may fail a program the same way, for a
        search to report the simplest cause it can (a freeze as a straggler of its
        length); None for a kind with none."""
        return None

    def ridden_out(self) -> Fault:
        """What it amounts to once its rank ran again after it: a freeze that ended is a
        pause, judged as a delay of the same length; every other kind is itself."""
        return self

    def reaches_group(self) -> bool:
        """Whether it signals its rank's whole process group, as a scheduler signals every
        process of a job step (the rank's DataLoader workers too)."""
        return False

    def params(self) -> dict[str, Any]:
        """The kind's own parameters (not the trigger), as JSON-compatible values."""
        trigger = {"site", "rank", "step", "nth", "times", "run"}
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in trigger}

    def trigger(self) -> dict[str, Any]:
        return {
            "site": self.site,
            "rank": self.rank,
            "step": self.step,
            "nth": self.nth,
            "times": self.times,
            "run": self.run,
        }

    def fires_in(self, run: int) -> bool:
        """Whether it may fire in run ``run`` (1 the first) of a job: an unbound fault in
        any run (until its ``times`` are spent), a bound one in its own run only."""
        return self.run is None or self.run == EVERY_RUN or self.run == run

    def __str__(self) -> str:
        return fault_to_text(self)


F = TypeVar("F", bound=type[Fault])
FAULT_KINDS: dict[str, type[Fault]] = {}


def fault_kind(cls: F) -> F:
    """Register a fault class under its ``kind``: the text and JSON forms read kinds from
    ``FAULT_KINDS``, and every kind table of the layers above is derived from it."""
    if not cls.kind or cls.kind in FAULT_KINDS:
        raise InvalidArgument(f"kind={cls.kind!r} must be a new, non-empty fault kind name")
    FAULT_KINDS[cls.kind] = cls
    return cls
