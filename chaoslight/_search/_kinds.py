"""The fault kinds a search draws: all of them, by default, in-process, by mode."""

from __future__ import annotations

from collections.abc import Iterable

from chaoslight._schedule import InvalidArgument, suggest

# Simplest first: one_of shrinks towards earlier branches.
KINDS = (
    "delay",
    "raise",
    "oom",
    "drop_sync",
    "crash",
    "preempt",
    "allocate",
    "reorder",
    "corrupt",
)
# What a correct program can meet in production, so what the default search draws: the
# oracle (docs/explanation/oracle.md) knows what a correct program may do under each. A dropped
# collective on one rank and a corrupted result are not drawn unless asked for: no
# correct program survives them (they test that a job fails fast instead of hanging).
DEFAULT_KINDS = ("delay", "raise", "oom", "crash", "preempt", "allocate", "reorder")
# A crash, or a SIGTERM the program does not handle, would kill this process.
IN_PROCESS_KINDS = ("delay", "raise", "oom", "allocate")
KILLING_KINDS = ("crash", "preempt")
BENIGN_KINDS = ("delay", "reorder", "allocate")  # kept for the deprecated ``mode`` filter
HARD_KINDS = ("raise", "oom", "drop_sync", "crash")
MODES = {"survive": BENIGN_KINDS, "fail-cleanly": HARD_KINDS}


def _resolve_kinds(
    faults: Iterable[str] | None, mode: str | None, in_process: bool = False
) -> tuple[str, ...]:
    if mode is not None and mode not in MODES:
        raise InvalidArgument(
            f"mode={mode!r} must be 'survive' or 'fail-cleanly'" + suggest(str(mode), MODES)
        )
    if isinstance(faults, str):
        raise InvalidArgument(f"faults={faults!r} must be a list of fault kinds, e.g. ['oom']")
    default = IN_PROCESS_KINDS if in_process else DEFAULT_KINDS
    kinds = tuple(default if faults is None else faults)
    killing = next((k for k in kinds if k in KILLING_KINDS), None)
    if in_process and killing is not None:
        raise InvalidArgument(
            f"faults: {killing!r} would kill this process (the pytest session with it): "
            f"search {killing} faults on a chaoslight.World"
        )
    for kind in kinds:
        if kind not in KINDS:
            raise InvalidArgument(
                f"faults: {kind!r} is not a fault kind{suggest(str(kind), KINDS)}"
            )
    if not kinds:
        raise InvalidArgument("faults=() must name at least one fault kind")
    if mode is not None:
        allowed = MODES[mode]
        if not set(kinds) & set(allowed):
            draws = ", ".join(allowed)
            raise InvalidArgument(
                f"faults={list(kinds)!r} has no kind that mode={mode!r} draws ({draws})"
            )
        kinds = tuple(k for k in (kinds if faults is not None else KINDS) if k in allowed)
        if in_process:
            kinds = tuple(k for k in kinds if k not in KILLING_KINDS)
    return tuple(k for k in KINDS if k in kinds)  # simplest first, whatever order given
