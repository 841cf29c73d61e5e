"""Buggy 2-rank Lightning programs, each with its corrected twin, that chaoslight was not
tuned on: a measure of what the default ``chaoslight fuzz`` finds on unseen programs.

Every module defines ``train_buggy()`` (a realistic multi-GPU bug) and ``train_fixed()``
(the corrected program); its docstring says the bug, how it shows in production and the
fix. ``README.md`` has the measured results; ``benchmarks/bugs.py`` re-measures them.

    from examples.bugs import BUGS
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent

BUGS: tuple[str, ...] = (
    "rank0_save_checkpoint",
    "setup_stats_file",
    "local_should_stop",
    "uneven_file_shards",
    "uneven_all_gather",
    "rank_zero_scheduler",
    "unsynced_batchnorm",
    "constant_loss_on_error",
    "on_exception_collective",
    "unsynced_checkpoint_monitor",
    "gan_skip_step",
    "conditional_sync_log",
    "accumulation_no_sync",
    "polled_file_fallback",
    "preempt_returns_zero",
    "emergency_save_workers",
    "sampler_loses_shuffle",
    "slow_epoch_rng",
    "frozen_peer_poll",
    "swallowed_abort",
    "nan_debug_dump",
    "dedup_skip_step",
    "resume_fresh_on_error",
    "caught_value_error_skip",
)
