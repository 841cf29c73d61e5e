"""The fault kinds a search draws, derived from each kind's traits (``_schedule/_kind.py``).

``KINDS``, ``DEFAULT_KINDS``, ``IN_PROCESS_KINDS`` and ``KILLING_KINDS`` are the built-in
kinds' names, as the CLI's help and the docs list them; ``resolve_kinds`` reads the
registry itself, so a kind registered later is searched like the built-in ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from chaoslight._schedule import FAULT_KINDS, Fault, InvalidArgument, suggest


def kind_names(keep: Callable[[type[Fault]], bool] = lambda cls: True) -> tuple[str, ...]:
    """The registered kinds that ``keep`` accepts, simplest first: ``one_of`` shrinks
    towards earlier branches, so a failure is reported with the simplest kind."""
    ordered = sorted(FAULT_KINDS.values(), key=lambda cls: cls.simplicity)
    return tuple(cls.kind for cls in ordered if keep(cls))


def drawn_in_process(cls: type[Fault]) -> bool:
    """Drawn by default in one process: neither ends it nor needs peers to mean anything."""
    return cls.drawn_by_default and not cls.kills_process and not cls.needs_peers


KINDS = kind_names()
# What a correct program can meet in production, so what the default search draws: the
# oracle (docs/explanation/oracle.md) knows what a correct program may do under each. A dropped
# collective on one rank and a corrupted result are not drawn unless asked for: no
# correct program survives them (they test that a job fails fast instead of hanging).
DEFAULT_KINDS = kind_names(lambda cls: cls.drawn_by_default)
IN_PROCESS_KINDS = kind_names(drawn_in_process)
KILLING_KINDS = kind_names(lambda cls: cls.kills_process)


def resolve_kinds(faults: Iterable[str] | None, in_process: bool = False) -> tuple[str, ...]:
    """The kinds ``faults`` names (None: the default search's), simplest first; a kind
    that would kill this process is refused ``in_process``."""
    if isinstance(faults, str):
        raise InvalidArgument(f"faults={faults!r} must be a list of fault kinds, e.g. ['oom']")
    default = kind_names(drawn_in_process if in_process else lambda cls: cls.drawn_by_default)
    kinds = tuple(default if faults is None else faults)
    killing = next((k for k in kinds if _kills(k)), None)
    if in_process and killing is not None:
        raise InvalidArgument(
            f"faults: {killing!r} would kill this process (the pytest session with it): "
            f"search {killing} faults on a chaoslight.World"
        )
    known = kind_names()
    for kind in kinds:
        if kind not in known:
            raise InvalidArgument(
                f"faults: {kind!r} is not a fault kind{suggest(str(kind), known)}"
            )
    if not kinds:
        raise InvalidArgument("faults=() must name at least one fault kind")
    return tuple(k for k in known if k in kinds)  # simplest first, whatever order given


def _kills(kind: object) -> bool:
    cls = FAULT_KINDS.get(kind) if isinstance(kind, str) else None
    return cls is not None and cls.kills_process
