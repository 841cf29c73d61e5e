"""New shapes of correct 2-rank Lightning programs, for hunting false alarms.

Every program ``examples/shapes/<name>.py`` is a small, self-contained, correct and
deterministic Lightning program (no shared helper module) that defines ``train()``: it
builds its Trainer with ``devices`` from ``WORLD_SIZE`` and calls ``fit`` (some also
``validate``, ``test``, ``predict`` or a second fit). ``SHAPES`` lists them; see README.md
for what each exercises, ``benchmarks/shapes.py`` fuzzes them with default arguments and
``tests/test_shapes.py`` runs each once with no fault.

Importing this package needs neither torch nor Lightning.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent

SHAPES = [
    "datamodule_setup",
    "log_dict_metrics",
    "test_predict_after_fit",
    "accumulate_clip",
    "step_lr",
    "plateau_lr",
    "gan_manual",
    "early_stopping",
    "checkpoint_topk",
    "all_gather_epoch_end",
    "torchmetrics_accuracy",
    "batchnorm_dropout",
    "bf16_mixed",
    "limit_batches",
    "max_steps_onecycle",
    "callback_batch_state",
    "frozen_backbone",
    "embedding_classifier",
    "save_checkpoint_end",
    "explicit_sampler",
    "iterable_rank_shard",
    "rank_zero_report",
    "multi_val_loaders",
    "resume_from_checkpoint",
    "resume_devices_once",
    "ema_callback",
    "csv_logger",
    "validate_then_fit",
    "log_rank_zero_only",
    "user_collectives",
    "swa_callback",
    "categorical_tabular",
    "dict_batches",
    "sparse_embedding",
    "weighted_sampler",
    "iterable_categorical",
    "bucket_batch_sampler",
    "combined_loaders",
    "caught_bad_record",
    "caught_side_write",
]

# Correct programs that chaoslight currently reports with no fault injected: the name,
# and why. A fix in chaoslight empties this; tests/test_shapes.py marks these expected to
# fail, strictly. (Emptied so far: resume_from_checkpoint, fixed by e5548ba;
# categorical_tabular and dict_batches, fixed by 579b862.)
KNOWN_FALSE_ALARMS: dict[str, str] = {}


def target(name: str, function: str = "train") -> str:
    """The World/CLI target of a shape, by absolute path: ``.../step_lr.py:train``."""
    return f"{HERE / name}.py:{function}"
