"""Fit, test, then predict with a ``BasePredictionWriter``, as Lightning's docs on
prediction in distributed settings show it ("each rank writes its own file").

Shape: after ``fit`` and ``test`` (``test_step`` logs a synced metric), ``predict`` runs
with ``return_predictions=False`` and a ``CustomWriter(write_interval="epoch")`` whose
``write_on_epoch_end`` saves this rank's ``predictions_<rank>.pt`` and
``batch_indices_<rank>.pt`` (the docs' code); then every rank waits at
``trainer.strategy.barrier()`` and rank 0 reads every rank's files and puts the
predictions back in data set order by their indices into ``predictions.pt``.

Why it is correct: Lightning's ``DistributedSampler`` for predict does not shuffle and
each sample's index comes with its prediction, so rank 0 can order them; the barrier
after ``predict`` makes every rank's files complete before rank 0 reads them (without it
rank 0 could read a file rank 1 is still writing); 48 samples split evenly, no padding.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from _upstream_common import pl, quiet_trainer
from torch.utils.data import DataLoader, TensorDataset

try:
    from lightning.pytorch.callbacks import BasePredictionWriter
except ImportError:  # the standalone package
    from pytorch_lightning.callbacks import BasePredictionWriter  # type: ignore[no-redef]

OUTPUT_DIR = "predictions"


class CustomWriter(BasePredictionWriter):
    def __init__(self, output_dir: str, write_interval: str) -> None:
        super().__init__(write_interval)
        self.output_dir = output_dir

    def write_on_epoch_end(
        self, trainer: Any, pl_module: Any, predictions: Any, batch_indices: Any
    ) -> None:
        os.makedirs(self.output_dir, exist_ok=True)
        rank = trainer.global_rank
        torch.save(predictions, os.path.join(self.output_dir, f"predictions_{rank}.pt"))
        torch.save(batch_indices, os.path.join(self.output_dir, f"batch_indices_{rank}.pt"))


def linear(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    return TensorDataset(x, x @ torch.tensor([[0.5], [1.0], [-1.0], [2.0]]))


class Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self(x), y)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("test_mse", torch.nn.functional.mse_loss(self(x), y), sync_dist=True)

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
        x, _ = batch
        return self(x)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def merge(world: int, samples: int) -> torch.Tensor:
    """Rank 0: every rank's predictions, in data set order. With one predict loader the
    predictions are a list of batch outputs and the indices a list per loader."""
    merged = torch.full((samples, 1), float("nan"))
    for rank in range(world):
        predictions = torch.load(os.path.join(OUTPUT_DIR, f"predictions_{rank}.pt"))
        if predictions and isinstance(predictions[0], list):  # one list per loader
            predictions = predictions[0]
        indices = torch.load(os.path.join(OUTPUT_DIR, f"batch_indices_{rank}.pt"))[0]
        for batch, batch_indices in zip(predictions, indices, strict=True):
            merged[torch.tensor(batch_indices)] = batch
    assert not merged.isnan().any(), "a sample was predicted by no rank"
    return merged


def train() -> None:
    """Fit, test, predict through the writer; rank 0 merges the ranks' files."""
    pl.seed_everything(0, verbose=False)
    writer = CustomWriter(output_dir=OUTPUT_DIR, write_interval="epoch")
    trainer = quiet_trainer(max_epochs=2, callbacks=[writer], enable_checkpointing=False)
    model = Model()
    trainer.fit(model, DataLoader(linear(64, 0), batch_size=8, shuffle=True))
    trainer.test(model, DataLoader(linear(32, 1), batch_size=8), verbose=False)
    predict_set = linear(48, 2)
    trainer.predict(model, DataLoader(predict_set, batch_size=8), return_predictions=False)
    trainer.strategy.barrier()
    if trainer.is_global_zero:
        merged = merge(trainer.world_size, len(predict_set))
        torch.save(merged, os.path.join(OUTPUT_DIR, "predictions.pt"))


if __name__ == "__main__":
    train()
