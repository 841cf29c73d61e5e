"""What a freeze allows, and what its verdict says (``docs/explanation/oracle.md``).

A frozen rank (a fault whose kind ``stalls``: a freeze) makes no progress while alive.
What every correct program does meanwhile: its peers go on until they wait for it in
torch.distributed (a collective, DDP's gradient all-reduce, the store), where the process
group's timeout would end them; a World reports them hung a second after they block
(``_world._wavefront``), and they are consequences. A peer hung anywhere else, its
watchdog's timeout past with no site reached (polling a flag file the frozen rank was to
write, a queue read with no timeout), waits with no deadline: a job that never ends, and
the finding. The frozen rank itself is the cause, never a finding: it is named *frozen*,
apart from the ranks that hang because of it.
"""

from __future__ import annotations

from typing import Any

from chaoslight._report import HUNG
from chaoslight._schedule import Fault
from chaoslight._world._wavefront import waits_boundedly

NO_DEADLINE_CAUSE = (
    "a wait for another rank outside torch.distributed with no deadline (a file or flag "
    "polled in a loop, a queue or event waited on without a timeout): when that rank "
    "stops, the job waits forever instead of failing; wait in a collective (a barrier, a "
    "broadcast of the value), or give the wait a deadline that raises"
)


# Stack frames of code that waits in torch.distributed even where no site saw it: DDP's
# own collectives (``_pre_forward`` syncing buffers, ``_sync_module_states``) call c10d
# directly, and the wavefront reports only the collectives that go through a site.
DISTRIBUTED_FRAMES = (
    "torch/distributed/",
    "torch/nn/parallel/",
    "lightning/pytorch/strategies/",
    "pytorch_lightning/strategies/",
    "lightning/fabric/utilities/distributed",
)


def _inside_distributed(stacks: str) -> bool:
    """Whether a hung rank's main thread waits in torch.distributed or DDP code (its
    innermost frame is there): a wait the process group's timeout bounds, never judged as
    one with no deadline. Other threads (a store's, chaoslight's watchdog) do not count."""
    blocks = [block for block in stacks.replace("\\", "/").split("\n\n") if "File " in block]
    main = [block for block in blocks if "_world/_worker.py" in block] or blocks
    for block in main:
        frames = [line for line in block.splitlines() if line.strip().startswith("File ")]
        if frames and any(part in frames[0] for part in DISTRIBUTED_FRAMES):
            return True
    return False


def frozen_ranks(fired: list[tuple[int, Fault]]) -> dict[int, Fault]:
    """Each rank a stalling fault (a freeze) fired on, with the first that did."""
    frozen: dict[int, Fault] = {}
    for rank, fault in fired:
        if fault.stalls:
            frozen.setdefault(rank, fault)
    return frozen


def stall_finding(outcome: Any, fired: list[tuple[int, Fault]]) -> str | None:
    """The finding of a run where a rank was frozen, or None when every rank ended or
    waits as a correct program's do: a peer hung with no deadline is the finding, named
    after the frozen rank that caused it."""
    frozen = frozen_ranks(fired)
    stuck = [
        result
        for result in outcome.ranks
        if result.status == HUNG
        and result.rank not in frozen
        and not waits_boundedly(result.evidence or "")
        and not _inside_distributed(result.stacks or "")
    ]
    if not frozen or not stuck:
        return None
    causes = "; ".join(
        f"rank {rank} was frozen by the injected {fault} (the cause)"
        for rank, fault in sorted(frozen.items())
    )
    waits = "; ".join(
        f"consequence: {result.evidence or f'rank {result.rank} hung'}, "
        "waiting with no deadline outside torch.distributed"
        for result in stuck
    )
    return f"{causes}; {waits}. Usual cause: {NO_DEADLINE_CAUSE}"
