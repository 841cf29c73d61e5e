"""Stateful custom callbacks, as Lightning's docs on callbacks write them ("save callback
state": ``state_dict``, ``load_state_dict`` and ``state_key``).

Shape: the docs' ``Counter(what="epochs"|"batches", verbose=...)`` callback, used twice in
one Trainer, each instance told apart in the checkpoint by its ``state_key`` (built from
its ``what``); a third callback reads the batch counter to lower the learning rate after
10 batches (a user's hand-written schedule that must survive a restart); the module's
``on_save_checkpoint``/``on_load_checkpoint`` keep the best training loss seen (as a
synced epoch mean, ``sync_dist=True``) in the checkpoint; ``ModelCheckpoint(save_last=
True)`` and ``fit(ckpt_path="last")``.

Why it is correct: every counter counts on every rank the same batches and epochs; both
instances' states are saved under different keys and restored from the same file on
every rank, so a resumed job continues the counts (and the rate cut) where the
checkpoint left them; the best loss is the synced one, the same on every rank.
"""

from __future__ import annotations

from typing import Any

import torch
from _upstream_common import pl, quiet_trainer
from torch.utils.data import DataLoader, TensorDataset

try:
    from lightning.pytorch.callbacks import ModelCheckpoint
except ImportError:  # the standalone package
    from pytorch_lightning.callbacks import ModelCheckpoint  # type: ignore[no-redef]


class Counter(pl.Callback):
    def __init__(self, what: str = "epochs", verbose: bool = True) -> None:
        self.what = what
        self.verbose = verbose
        self.state = {"epochs": 0, "batches": 0}

    @property
    def state_key(self) -> str:
        # note: we do not include `verbose` here on purpose
        return f"Counter[what={self.what}]"

    def on_train_epoch_end(self, *args: Any, **kwargs: Any) -> None:
        if self.what == "epochs":
            self.state["epochs"] += 1

    def on_train_batch_end(self, *args: Any, **kwargs: Any) -> None:
        if self.what == "batches":
            self.state["batches"] += 1

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.state.update(state_dict)

    def state_dict(self) -> dict[str, Any]:
        return self.state.copy()


class RateCut(pl.Callback):
    """Halves the learning rate once the batch counter passes ``after``."""

    def __init__(self, counter: Counter, after: int = 10) -> None:
        self.counter, self.after = counter, after

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
        rate = 0.05 if self.counter.state["batches"] < self.after else 0.025
        for group in trainer.optimizers[0].param_groups:
            group["lr"] = rate


class Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.best_train_loss = float("inf")

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss, on_step=False, on_epoch=True, sync_dist=True)
        return loss

    def on_train_epoch_end(self) -> None:
        epoch_loss = float(self.trainer.callback_metrics["train_loss"])
        self.best_train_loss = min(self.best_train_loss, epoch_loss)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["best_train_loss"] = self.best_train_loss

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.best_train_loss = checkpoint["best_train_loss"]

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def data(n: int = 64) -> TensorDataset:
    generator = torch.Generator().manual_seed(8)
    x = torch.randn(n, 4, generator=generator)
    return TensorDataset(x, x.sum(dim=1, keepdim=True) - 1.0)


def train() -> dict[str, int]:
    """Four epochs with both counters, resuming from ``last.ckpt`` if there is one."""
    pl.seed_everything(0, verbose=False)
    epochs, batches = Counter(what="epochs", verbose=True), Counter(what="batches", verbose=False)
    callbacks = [epochs, batches, RateCut(batches), ModelCheckpoint(save_last=True)]
    trainer = quiet_trainer(max_epochs=4, callbacks=callbacks)
    trainer.fit(Model(), DataLoader(data(), batch_size=8, shuffle=True), ckpt_path="last")
    assert epochs.state["epochs"] == 4 and batches.state["batches"] == trainer.global_step
    return {"epochs": epochs.state["epochs"], "batches": batches.state["batches"]}


if __name__ == "__main__":
    train()
