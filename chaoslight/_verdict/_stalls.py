"""What a freeze allows, and what its verdict says (``docs/explanation/oracle.md``).

A frozen rank (a fault whose kind ``stalls``: a freeze) makes no progress while alive.
A freeze its rank came back from (it ran again: reached a later site, or ended by
itself) was a pause, and is judged as a delay of the same length would be
(``Fault.ridden_out``): it excuses nothing a straggler would not. A freeze still in force
when the run ended (for good, or longer than the run lasted) is judged here. What every
correct program does meanwhile: its peers go on until they wait for it in
torch.distributed (a collective, DDP's gradient all-reduce, the store), where the process
group's timeout would end them; a World reports them hung a second after they block
(``_world._wavefront``), and they are consequences. A peer may also end by that wait: a
transport or timeout error, or its own deadline's timeout. A peer hung anywhere else,
its watchdog's timeout past with no site reached (polling a flag file the frozen rank
was to write, a queue read with no timeout), is still waiting when the run is stopped:
the finding. So is a peer that failed with an error of its own that no wait raised (it
read what the frozen rank had not written): a delay there fails it too. The frozen rank
itself is the cause, never a finding: it is named *frozen*, apart from the ranks that
hang because of it.
"""

from __future__ import annotations

import re
from typing import Any

from chaoslight._report import FAILED, HUNG, Outcome, RankResult
from chaoslight._runtime import budget_of
from chaoslight._runtime._frames import in_op_dispatch
from chaoslight._schedule import Fault, Severity
from chaoslight._sites._async_work import in_async_wait
from chaoslight._world._wavefront import waits_boundedly

NO_DEADLINE_CAUSE = (
    "a wait for another rank outside torch.distributed with no deadline (a file or flag "
    "polled in a loop, a queue or event waited on without a timeout): when that rank "
    "stops, the job waits forever instead of failing; wait in a collective (a barrier, a "
    "broadcast of the value), or give the wait a deadline that raises"
)
UNWAITED_CAUSE = (
    "a rank that uses what another rank produces (a file, a flag, a value) without "
    "waiting for it: a slow rank (a paused host, a straggler) makes it fail; wait in a "
    "collective first (a barrier after the write), or poll with a deadline"
)
# What an error says when a wait ended it: a transport error is ``distributed``; these are
# the words of a deadline that ran out (gloo's, a store's, a DataLoader's, the program's).
_TIMED_OUT = re.compile(r"time[d ]?\s?out|deadline", re.I)


# Stack frames of code that waits in torch.distributed even where no site saw it: DDP's
# own collectives (``_pre_forward`` syncing buffers, ``_sync_module_states``) call c10d
# directly, and the wavefront reports only the collectives that go through a site; an
# asynchronous collective's ``work.wait()`` is C++ under chaoslight's marking wrapper
# (``in_async_wait``).
DISTRIBUTED_FRAMES = (
    "torch/distributed/",
    "torch/nn/parallel/",
    "lightning/pytorch/strategies/",
    "pytorch_lightning/strategies/",
    "lightning/fabric/utilities/distributed",
)


def inside_distributed(stacks: str) -> bool:
    """Whether a hung rank's main thread waits in torch.distributed or DDP code (its
    innermost frame is there): a wait the process group's timeout bounds. Other threads
    (a store's, chaoslight's watchdog) do not count."""
    blocks = [block for block in stacks.replace("\\", "/").split("\n\n") if "File " in block]
    main = [block for block in blocks if "_world/_worker.py" in block] or blocks
    for block in main:
        files = [
            named.group(1)
            for line in block.splitlines()
            if (named := re.match(r'\s*File "([^"]+)"', line)) is not None
        ]
        # Innermost first; an op's dispatch frames (a functional collective's wait) skipped.
        innermost = next((f for f in files if not in_op_dispatch(f)), None)
        if innermost is not None and (
            any(part in innermost for part in DISTRIBUTED_FRAMES) or in_async_wait(innermost)
        ):
            return True
    return False


def frozen_ranks(fired: list[tuple[int, Fault]]) -> dict[int, Fault]:
    """Each rank a stalling fault (a freeze) fired on, with the first that did."""
    frozen: dict[int, Fault] = {}
    for rank, fault in fired:
        if fault.stalls:
            frozen.setdefault(rank, fault)
    return frozen


def stall_finding(outcome: Outcome, fired: list[tuple[int, Fault]]) -> str | None:
    """The finding of a run where a rank was frozen, or None when every rank ended or
    waits as a correct program's do: a peer hung with no deadline is the finding, named
    after the frozen rank that caused it; so is a peer that failed with an error of its
    own no wait raised (``unwaited``)."""
    frozen = frozen_ranks(fired)
    if not frozen:
        return None
    causes = "; ".join(
        f"rank {rank} was frozen by the injected {fault} (the cause)"
        for rank, fault in sorted(frozen.items())
    )
    stuck = [
        result
        for result in outcome.ranks
        if result.status == HUNG
        and result.rank not in frozen
        and not waits_boundedly(result.evidence or "")
        and not inside_distributed(result.stacks or "")
    ]
    if stuck:
        bound = f"{outcome.timeout:g} s" if outcome.timeout else "the timeout"
        waits = "; ".join(
            f"consequence: {result.evidence or f'rank {result.rank} hung'}, still waiting "
            f"outside torch.distributed when the run was stopped ({bound} with no site "
            "reached)"
            for result in stuck
        )
        return f"{causes}; {waits}. Usual cause: {NO_DEADLINE_CAUSE}"
    budget = budget_of(outcome.schedule)
    unwaited = [r for r in outcome.ranks if r.rank not in frozen and _own_error(r, fired, budget)]
    if unwaited:
        first = unwaited[0]
        return (
            f"{causes}; rank {first.rank} failed meanwhile with an error no wait raised: "
            f"{first.exception}. Usual cause: {UNWAITED_CAUSE}"
        )
    return None


def _own_error(result: RankResult, fired: list[tuple[int, Fault]], budget: Any) -> bool:
    """The rank failed with an error of its own: not a transport or timeout error (what a
    wait for the frozen rank ends with), nor one of its own injected faults. A benign fault
    (a small allocation under no budget) explains no error, whatever its words match."""
    exc = result.exception
    if result.status != FAILED or exc is None or exc.distributed:
        return False
    text = f"{exc.traceback}\n{exc}"
    if _TIMED_OUT.search(f"{exc.type} {exc.message}"):
        return False
    own = [
        fault
        for rank, fault in fired
        if rank == result.rank and not fault.stalls and fault.fault_class(budget) != Severity.BENIGN
    ]
    return not any(fault.surfaced_in(text) or fault.raises_nothing for fault in own)
