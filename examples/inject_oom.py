"""The main job on a shipped example: inject faults into a real ``trainer.fit`` and report.

A tiny regression model trains for 8 steps on CPU. The schedule makes the forward pass
run out of memory at step 2 (the model's own ``except torch.OutOfMemoryError`` handler
skips the batch, as real training code does), stalls a callback at step 4, and poisons
the loss with NaN at step 6. The run's report shows exactly what fired where.

    python examples/inject_oom.py
"""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset

import chaoslight

try:
    import lightning.pytorch as pl
except ImportError:  # the unified package is optional; pytorch_lightning is the same code
    import pytorch_lightning as pl  # type: ignore[no-redef]

SCHEDULE = """
oom@lightning.forward step=2 nbytes=2GiB
delay@lightning.on_train_batch_end step=4 seconds=0.2
corrupt@lightning.training_step step=6
"""


class Regressor(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)
        self.skipped: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> object:
        x, y = batch
        try:
            prediction = self(x)
        except torch.OutOfMemoryError:
            self.skipped.append(self.trainer.global_step)  # skip the batch, as OOM handlers do
            return None
        return torch.nn.functional.mse_loss(prediction, y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main() -> None:
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    model = Regressor()
    trainer = pl.Trainer(
        max_steps=8,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    schedule = chaoslight.Schedule.parse(SCHEDULE)
    with chaoslight.inject(schedule) as run:
        trainer.fit(model, DataLoader(data, batch_size=8))
    print(run.report())
    print(f"batches skipped by the model's OOM handler: {model.skipped}")
    print(f"weights finite after the NaN loss: {bool(torch.isfinite(model.layer.weight).all())}")


if __name__ == "__main__":
    main()
