"""A correct program: what "my training is robust" looks like, and passes a long search.

Every pattern the catalogue's buggy programs get wrong, done right in one small job:

- data: a map-style dataset behind Lightning's own ``DistributedSampler`` (disjoint
  shards, equal batch counts), shuffled by a seeded sampler (``unsharded_sampler``);
- randomness: an augmentation drawn from torch's RNG, which ``seed_everything`` seeds
  (``unseeded_augmentation``);
- decisions: the validation loss is logged with ``sync_dist=True``, so the plateau
  scheduler takes the same branch on every rank (``rank_numerics``);
- the model is edited only by the optimizer; gradient clipping is Lightning's, applied to
  the all-reduced gradients on every rank (``one_rank_edit``);
- a side file: rank 0 writes it atomically (``os.replace``), every rank meets at a
  barrier before anyone reads it (``shared_file``, ``async_epoch_end``);
- checkpoints: ``ModelCheckpoint(save_last=True)``, which Lightning writes from rank 0;
- errors: nothing is caught that cannot be handled on one rank: an OOM, a full disk or
  a crash ends the rank it hits, and its peers are released (``swallowed_exception``);
- numerics in float32 (``bf16_numerics``); no reference to a step's temporaries outlives
  the step (``temporary_lifetime``); no asynchronous work is read before it is waited for
  (``unsynchronised_async``).

The oracle (``docs/explanation/oracle.md``) accepts from it exactly what a correct
program may do: pass under no fault and under benign faults (delays, a reduction
reordered on every rank), and under a hard fault (OOM, raised error, crash, allocation)
fail cleanly (the faulted rank ends by its own error) or recover with every check
holding. A long default search finds nothing:

    chaoslight fuzz examples/catalogue/robust.py:train_fixed --max-examples 300

(``--max-examples 300``: "long" is the point here; with no flag the search stops at 100
examples. ``benchmarks/catalogue.py`` records what such a search covered.)
"""

from __future__ import annotations

import json
from typing import Any

import torch
from _catalogue_common import Regressor, dataset, pl, seeded, write_atomically
from torch.utils.data import DataLoader, default_collate

SUMMARY = "summary.json"


def jitter(samples: list[Any]) -> Any:
    """Collate, then add noise drawn from torch's seeded RNG (same in every run)."""
    x, y = default_collate(samples)
    return x + 0.05 * torch.randn(x.shape), y


class RobustRegressor(Regressor):
    def __init__(self) -> None:
        super().__init__(lr=0.1)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self(x), y), sync_dist=True)

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.lr)
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=0)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": plateau, "monitor": "val_loss"},
        }


class EpochSummary(pl.Callback):
    """Rank 0 records the synced validation loss; every rank reads it back next epoch."""

    def __init__(self) -> None:
        self.seen: list[float] = []

    def on_validation_epoch_end(self, trainer: Any, module: Any) -> None:
        if trainer.sanity_checking:
            return
        if trainer.is_global_zero:
            state = {
                "epoch": trainer.current_epoch,
                "val_loss": float(trainer.callback_metrics["val_loss"]),
            }
            write_atomically(SUMMARY, json.dumps(state))
        trainer.strategy.barrier("summary written")

    def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
        if trainer.current_epoch == 0:
            return
        with open(SUMMARY) as handle:
            state = json.load(handle)
        if state["epoch"] != trainer.current_epoch - 1:
            raise RuntimeError(f"{SUMMARY} is from epoch {state['epoch']}: stale")
        self.seen.append(state["val_loss"])


def train_fixed() -> list[float]:
    """The robust program: returns the validation losses every rank read back."""
    summary = EpochSummary()
    checkpoints = pl.callbacks.ModelCheckpoint(
        dirpath="checkpoints", monitor="val_loss", save_last=True
    )
    fit = seeded(
        max_epochs=3,
        callbacks=[summary, checkpoints],
        enable_checkpointing=True,
        gradient_clip_val=1.0,
    )
    train = DataLoader(dataset(32), batch_size=4, shuffle=True, collate_fn=jitter)
    fit.fit(RobustRegressor(), train, DataLoader(dataset(16, seed=1), batch_size=4))
    return summary.seen
