"""Correct Lightning programs adapted from Lightning's own examples and docs (2.x).

Every program ``examples/upstream/<name>.py`` defines ``train()``: a real program shape as
users write it from Lightning's ``examples/pytorch/`` or its documentation (the
autoencoder, the GAN, the transformer LM, the DataModule classifier, the callbacks, the
resume from ``ckpt_path="last"``, worker processes, an iterable data set, a prediction
writer, stateful callbacks, torchmetrics), on synthetic data made in-process, on CPU,
DDP over ``WORLD_SIZE`` ranks. Each is correct: ``chaoslight fuzz`` with default
arguments must find nothing on it; any finding is a false alarm
(``benchmarks/false_alarms_budget.py`` measures that). ``UPSTREAM`` lists them with
where each was adapted from; see README.md.

Importing this package needs neither torch nor Lightning.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPOSITORY = "Lightning-AI/pytorch-lightning"


@dataclass(frozen=True)
class Program:
    """One upstream program: its module, what it was adapted from, the shape in a line."""

    name: str
    adapted_from: str  # a file of Lightning's repository, or a page of its docs
    shape: str
    function: str = "train"
    world_size: int = 2

    @property
    def path(self) -> Path:
        return HERE / f"{self.name}.py"

    def target(self) -> str:
        """The World/CLI target, by absolute path: ``.../autoencoder.py:train``."""
        return f"{self.path}:{self.function}"


UPSTREAM: tuple[Program, ...] = (
    Program(
        "autoencoder",
        "examples/pytorch/basics/autoencoder.py",
        "DataModule built in __init__, rank-zero-only image sampler callback, "
        'fit then test and predict with ckpt_path="best"',
    ),
    Program(
        "gan",
        "examples/pytorch/domain_templates/generative_adversarial_net.py",
        "manual optimization, generator then discriminator between toggle_optimizer calls, "
        "BatchNorm1d(eps=0.8), training_step(batch) with no batch_idx",
    ),
    Program(
        "transformer_lm",
        "examples/pytorch/basics/transformer.py",
        "Lightning's demo Transformer, nll_loss on next tokens, unseeded random_split after "
        "seed_everything, gradient_clip_val=0.25, test after fit",
    ),
    Program(
        "image_classifier",
        "examples/pytorch/basics/backbone_image_classifier.py",
        "backbone passed in (save_hyperparameters(ignore=...)), DataModule prepare_data "
        'writing the data set once and setup(stage) loading it, validate, test "best"',
    ),
    Program(
        "callbacks_monitor",
        "docs: callbacks (ModelCheckpoint, EarlyStopping, LearningRateMonitor)",
        "torchmetrics objects logged, sync_dist loss, top-2 checkpoints on accuracy, early "
        "stop on loss, LR monitor with a CSVLogger, load_from_checkpoint(best)",
    ),
    Program(
        "accumulate_warmup",
        "docs: accumulate_grad_batches; configure_optimizers scheduler dict",
        "accumulate 4 over 7 batches, norm clipping, AdamW with two groups, LambdaLR warm-up "
        'per step ("interval": "step")',
    ),
    Program(
        "val_every_n_steps",
        "docs: val_check_interval (int, check_val_every_n_epoch=None)",
        "validation every 3 steps across epochs under max_steps, best synced val loss kept",
    ),
    Program(
        "resume_last",
        "docs: checkpointing, resume training state",
        'fit(ckpt_path="last") on every start, save_last with top-2 on a synced loss, '
        "StepLR, dropout",
    ),
    Program(
        "worker_loader",
        "docs: speed up data loading (num_workers)",
        "map-style set decoded in 2 persistent worker processes, augmentation seeded by "
        "seed_everything(workers=True)",
    ),
    Program(
        "sharded_stream",
        "docs: IterableDataset (the program shards it)",
        "IterableDataset over pre-sharded files written in prepare_data, epoch-seeded "
        'shuffle via set_epoch, resume from ckpt_path="last"',
    ),
    Program(
        "prediction_writer",
        "docs: deploy / predict with BasePredictionWriter in DDP",
        "fit, test, predict with a per-rank writer, barrier, rank 0 merges by batch indices",
    ),
    Program(
        "counter_callbacks",
        "docs: callbacks, save callback state (state_key)",
        "two instances of one stateful Counter callback, a rate rule reading it, "
        'on_save/on_load_checkpoint, resume from ckpt_path="last"',
    ),
    Program(
        "bug_report_model",
        "examples/pytorch/bug_report/bug_report_model.py",
        "the BoringModel template: unseeded RandomDataset, sum loss, dict return, "
        "Lightning's default logger and checkpoint",
    ),
    Program(
        "metrics_collection",
        "docs: torchmetrics in Lightning",
        "sync_dist on_step+on_epoch loss, a metric object logged, a MetricCollection "
        "computed by hand at epoch end driving a plateau rule",
    ),
)

BY_NAME = {program.name: program for program in UPSTREAM}


def target(name: str, function: str = "train") -> str:
    """The World/CLI target of a program, by absolute path."""
    return f"{HERE / name}.py:{function}"
