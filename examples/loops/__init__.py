"""Training loops that no Trainer runs: Lightning Fabric and plain PyTorch DDP programs.

Each ``examples/loops/<name>.py`` is a small 2-rank program (CPU, gloo, the process group
already up). A program with a bug defines ``train_buggy`` and its corrected twin
``train_fixed``; a correct program of another shape defines ``train``. ``LOOPS`` lists
them with the schedule that reveals each bug (empty: it shows with no fault); the
schedules use the loop's steps (its optimizer steps: ``docs/explanation/injection.md``).
A ``silent`` bug fails no rank under its schedule: ``check`` finds it (a resume that
loses state: ``restart-equivalence`` compares the restarted job with an uninterrupted one
step by step; a shuffle that never moves: ``data-order``; a random state apart under a
straggler: ``learned-invariants``). Importing this package needs
neither torch nor Lightning. See README.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Loop:
    name: str
    bug: str  # "" for a correct program of another shape (target ``train``)
    reveals: str = ""  # the schedule that shows the bug (text form); "" shows it with none
    silent: bool = False  # under ``reveals`` every rank returns: a check's finding, no crash
    check: str = "restart-equivalence"  # the check that finds a silent bug

    def target(self, function: str) -> str:
        return f"{HERE / (self.name + '.py')}:{function}"

    @property
    def correct(self) -> tuple[str, ...]:
        return ("train_fixed",) if self.bug else ("train",)


LOOPS: tuple[Loop, ...] = (
    Loop(
        "plain_caught_oom",
        "an OOM caught around the backward skips the step on one rank",
        "oom@torch.backward rank=0 step=1",
    ),
    Loop(
        "plain_rank0_save_race",
        "rank 0 writes a file every rank reads, with no barrier between",
        "delay@torch.save rank=0 seconds=1.0",
    ),
    Loop(
        "plain_inplace_checkpoint",
        "the checkpoint is written in place: a crash mid-write loses it for the restart",
        "restarts 1\ncrash@torch.save rank=0 step=3",
    ),
    Loop(
        "fabric_caught_oom",
        "an OOM caught around the forward skips the batch on one rank",
        "oom@fabric.forward rank=1 step=0",
    ),
    Loop("fabric_rank0_save", "fabric.save (collective) called on rank 0 only"),
    Loop(
        "fabric_sigterm_save",
        "a SIGTERM handler's emergency save on the rank it reached, alone",
        "preempt@torch.backward rank=1 step=2",
    ),
    Loop(
        "fabric_spike_reduce",
        "the loss is all-reduced only when the rank's own loss spikes",
        "flip@fabric.forward rank=0 step=2",
    ),
    Loop(
        "fabric_error_report",
        "an error handler all-reduces a crash report's loss on rank 0 only",
        "raise@fabric.backward rank=0 step=2 exception=RuntimeError",
    ),
    Loop(
        "fabric_resume_scheduler",
        "the resumable checkpoint forgets the LR scheduler",
        "restarts 1\ncrash@torch.optimizer_step rank=0 step=7",
        silent=True,
    ),
    Loop(
        "plain_resume_sampler_epoch",
        "a resumed epoch is read in epoch 0's order (set_epoch only at epoch ends)",
        "restarts 1\ncrash@torch.optimizer_step rank=0 step=13",
        silent=True,
    ),
    Loop(
        "plain_sigterm_barrier",
        "a SIGTERM handler saves and waits in dist.barrier on the rank it reached",
        "preempt@torch.backward rank=1 step=2",
    ),
    Loop(
        "plain_error_flush",
        "an error handler reduces the pending metrics on rank 0 only",
        "oom@torch.backward rank=0 step=2",
    ),
    Loop(
        "plain_no_set_epoch",
        "the loop never calls sampler.set_epoch: every epoch reads the first one's order",
        silent=True,
        check="data-order",
    ),
    Loop(
        "plain_fsdp_rank0_save",
        "under FSDP (fully_shard) rank 0 alone gathers the full state dict for a checkpoint",
    ),
    Loop(
        "fabric_slow_epoch_rng",
        "rank 0 draws from the global RNG after a slow epoch: the ranks' LayerDrop apart",
        "delay@torch.backward rank=1 step=2 seconds=2.0",
        silent=True,
        check="learned-invariants",
    ),
    Loop(
        "plain_skip_nonfinite",
        "a batch whose loss is not finite is skipped on the rank that saw it, alone",
        "flip@torch.next_batch rank=0 step=1",
    ),
    Loop("fabric_ok_accumulate", ""),
    Loop("fabric_ok_model_parallel", ""),
    Loop("fabric_ok_clip_log", ""),
    Loop("plain_ok_amp_eval", ""),
    Loop("fabric_ok_validation", ""),
    Loop("fabric_ok_all_gather", ""),
    Loop("fabric_ok_iterable", ""),
    Loop("plain_ok_two_optimizers", ""),
    Loop("plain_ok_epochs_resume", ""),
    Loop("plain_ok_no_sync", ""),
    Loop("plain_ok_iterable_validation", ""),
)
