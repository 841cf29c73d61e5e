"""The catalogue: the failure modes users meet in multi-rank Lightning training, each as a
small runnable program with the bug (``train_buggy``) and its fixed twin (``train_fixed``).

Every module's docstring says the failure mode, how it shows in production, what exposes
it and why, the one command that runs it, and, where a CPU cannot show it, what can.
``CATALOGUE`` is the machine-readable table (README.md prints it); ``tests/test_catalogue.py``
runs it and ``benchmarks/catalogue.py`` measures what the default search needs per entry.

    from examples.catalogue import CATALOGUE
    for entry in CATALOGUE:
        print(entry.command())

Importing this package needs neither torch nor Lightning.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
RELATIVE = "examples/catalogue"

# How the default search reports a bug (``chaoslight._search._campaign``'s statuses).
NO_FAULT_NEEDED = "fails-without-faults"  # the fault-free baseline run already fails
FOUND = "failed"  # a minimal failing schedule


@dataclass(frozen=True)
class Entry:
    """One failure mode: its program, how it is found, and what the finding says.

    ``finding``: the status ``chaoslight fuzz`` ends with on the buggy twin, or ``None``
    when the default search cannot find it (it needs ``schedule_file``: a memory budget,
    which the search never draws). ``causes``: for each of ``buggy``, words the verdict's
    reason contains. ``checks``: checks beyond the default ones, for both twins
    (``--check NAME``). ``flags``: other options the one-line command needs.
    ``witness``: a minimal failing schedule the default search found (its text form, one
    fault a line), which the buggy twin fails and the fixed twin passes in one run.
    ``long_search``: the default search needs more examples than the test suite spends
    on a search (``benchmarks/catalogue.py`` measures it; the suite replays ``witness``).
    """

    name: str
    description: str
    finding: str | None
    causes: tuple[tuple[str, ...], ...]
    checks: tuple[str, ...] = ()
    schedule_file: str | None = None
    buggy: tuple[str, ...] = ("train_buggy",)
    fixed: str = "train_fixed"
    world_size: int = 2
    timeout: float = 20.0  # the default; a hang is reported when a rank waits this long
    flags: tuple[str, ...] = ()
    witness: str | None = None
    long_search: bool = False

    @property
    def path(self) -> Path:
        return HERE / f"{self.name}.py"

    @property
    def main(self) -> str:
        """The function the command runs: the (first) buggy one, else the fixed one."""
        return self.buggy[0] if self.buggy else self.fixed

    def target(self, function: str | None = None) -> str:
        """The World/fuzz target, by absolute path: ``.../shared_file.py:train_buggy``."""
        return f"{self.path}:{function or self.main}"

    def cause(self, function: str) -> tuple[str, ...]:
        """The words the verdict on ``function`` (one of ``buggy``) names."""
        return self.causes[self.buggy.index(function)]

    @property
    def searchable(self) -> bool:
        """The default search (with ``checks``) finds the buggy twin."""
        return self.finding is not None

    def command(self, function: str | None = None) -> str:
        """What a user types from the repository root to see the bug."""
        target = f"{RELATIVE}/{self.name}.py:{function or self.main}"
        if self.schedule_file is not None:
            return f"chaoslight replay {RELATIVE}/{self.schedule_file} {target}"
        flags = "".join(f" --check {name}" for name in self.checks) + "".join(
            f" {flag}" for flag in self.flags
        )
        return f"chaoslight fuzz {target}{flags}"


CATALOGUE: tuple[Entry, ...] = (
    Entry(
        "shared_file",
        "every rank writes one shared file in place, no barrier: a straggler splits the ranks",
        FOUND,
        (("replicas-in-sync",),),
    ),
    Entry(
        "rank0_memory",
        "rank 0 keeps a 2 MiB frame per step: under a memory budget it alone runs out",
        None,
        (("out of memory", "rank 0"),),
        schedule_file="rank0_memory.txt",
    ),
    Entry(
        "rank_numerics",
        "a plateau scheduler decides on each rank's own (unsynced) validation loss",
        NO_FAULT_NEEDED,
        (("replicas-in-sync",),),
    ),
    Entry(
        "one_rank_edit",
        "a max-norm rescale of a weight inside the rank-0 logging block",
        NO_FAULT_NEEDED,
        (("replicas-in-sync",),),
    ),
    Entry(
        "unsharded_sampler",
        "a bucketing batch sampler that every rank runs in full",
        NO_FAULT_NEEDED,
        (("disjoint-shards",),),
    ),
    Entry(
        "swallowed_exception",
        "except RuntimeError: return None in training_step (manual: a hang; automatic: "
        "Lightning's error hides the cause)",
        FOUND,
        (("manual_backward", "dist.broadcast"), ("swallowed the injected oom", "Skipping")),
        buggy=("train_buggy", "train_buggy_automatic"),
        timeout=5.0,
    ),
    Entry(
        "unseeded_augmentation",
        "np.random.default_rng() in a collate function: same seed, different runs",
        NO_FAULT_NEEDED,
        (("deterministic",),),
        checks=("deterministic",),
    ),
    Entry(
        "bf16_numerics",
        "a one-pass variance under bf16-mixed cancels to a negative number: NaN loss",
        NO_FAULT_NEEDED,
        (("finite-loss", "nan"),),
    ),
    Entry(
        "temporary_lifetime",
        "a step's large temporary kept alive until the next debug print",
        None,
        (("rank 0 raised", "rank 1 raised", "out of memory"),),
        schedule_file="temporary_lifetime.txt",
    ),
    Entry(
        "async_epoch_end",
        "an export thread started at epoch end, not waited for before the barrier",
        FOUND,
        (("teacher.pt",),),
    ),
    Entry(
        "unsynchronised_async",
        "an async all-reduce read before wait() (the CPU analogue of a non_blocking copy)",
        NO_FAULT_NEEDED,
        (("replicas-in-sync",),),
    ),
    Entry(
        "preemption",
        "SIGTERM to one rank (one node) or skewed: Lightning's own handling does not stop "
        "the ranks together (its known issue); the fixed twin agrees by a MAX all-reduce",
        FOUND,
        (("SIGTERM", "handled by lightning"),),
        timeout=5.0,  # Lightning's hang is seen at the wavefront; nothing waits this long
        flags=("--strict",),
    ),
    # Issue 21's production fault kinds: each entry is found by one of them.
    Entry(
        "rank0_prepared_stats",
        "rank 0 writes a shared file in setup; the other ranks poll for it with no deadline",
        FOUND,
        (("frozen", "no deadline"),),
        timeout=5.0,  # rank 1 polls outside every site: its wait is seen at the timeout
    ),
    Entry(
        "stale_lock_file",
        "a lock that is a file's existence, left behind by a rank killed while holding it: "
        "the restarted job waits forever",
        FOUND,
        (("run 2 of 2", "file_exists_lock"),),
        timeout=5.0,  # the restarted rank 0 polls outside every site: seen at the timeout
        witness="restarts 1\ncrash@torch.save rank=0 step=3 signal=11",  # a native death
    ),
    Entry(
        "retried_collective",
        "an all-reduce in a retry loop that falls back to the rank's own value: an aborted "
        "process group's error is swallowed, and the rank dies later of a transport error",
        FOUND,
        (("swallowed the injected pg_abort",),),
        witness="pg_abort@dist.all_reduce rank=0 step=0",
    ),
    Entry(
        "skipped_records",
        "a sharded stream that skips the records it cannot decode (except EOFError): one "
        "rank's epoch comes up a batch short",
        FOUND,
        (("caught the injected", "EOFError"),),
    ),
    Entry(
        "newest_loadable_checkpoint",
        "a restarted job resumes from the newest checkpoint *this rank* can load: a read "
        "that fails on one rank during recovery sends it to an older one",
        FOUND,
        (("run 2 of 2", "caught the injected", "run=2"),),
        witness="restarts 1\ncrash@lightning.training_step rank=0 step=4\n"
        "bad_checkpoint@torch.load rank=1 run=2",
    ),
    Entry(
        "nonfinite_skip",
        "manual optimization skips the batch whose loss is not finite, on that rank's own "
        "loss: a flipped bit (silent data corruption) on one rank hangs the job",
        FOUND,
        (("flip@",),),
        timeout=5.0,  # the hang is two ranks in mismatched collectives: seen in 5 s
        witness="flip@lightning.training_step rank=0 step=0",
        long_search=True,
    ),
    Entry(
        "preemption_workers",
        "preemption handled by an agreed stop, but the DataLoader workers die of the "
        "scheduler's SIGTERM to the process group before it (KempnerForge#177)",
        FOUND,
        (("SIGTERM reached ranks", "DataLoader worker"),),
        witness="preempt@lightning.training_step step=0 group=true",
    ),
)

ROBUST = Entry(
    "robust",
    "a correct program: every pattern above done right; a long default search finds nothing",
    None,
    (),
    buggy=(),
    flags=("--max-examples", "300"),
)

BY_NAME = {entry.name: entry for entry in (*CATALOGUE, ROBUST)}
