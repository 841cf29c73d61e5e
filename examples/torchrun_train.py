"""A plain Lightning DDP script, unchanged by chaoslight, for ``chaoslight run``.

    chaoslight run --schedule examples/schedules/straggler.txt -- \\
        torchrun --nproc-per-node 2 examples/torchrun_train.py

torchrun starts the ranks; ``chaoslight run`` arms the schedule in each of them. The
script prints each rank's final loss.
"""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning.pytorch as pl
except ImportError:
    import pytorch_lightning as pl  # type: ignore[no-redef]


class Regressor(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> object:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("loss", loss, sync_dist=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main() -> None:
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    trainer = pl.Trainer(
        max_steps=4,
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Regressor(), DataLoader(data, batch_size=8))
    print(f"rank {trainer.global_rank}: loss {float(trainer.callback_metrics['loss']):.4f}")
    # Lightning leaves the process group up; tear it down before exit, or gloo's threads
    # may still be running when the interpreter ends (an abort, now and then). Both ranks
    # reach the end first: a rank that tears its group down while its peer still talks
    # to it can abort in gloo ("terminate called without an active exception").
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
