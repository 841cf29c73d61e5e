"""What the loop corpus's programs share: the data, the model, the ranks.

Every program runs under a process group that is already up (a chaoslight World, or
``torchrun`` with the program's own ``init_process_group``), on CPU with gloo, two ranks.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

STEPS = 8  # batches per rank and epoch
BATCH = 4


def dataset(n: int = STEPS * BATCH * 2) -> TensorDataset:
    """A fixed regression set: the same on every rank and in every run."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(n, 8, generator=generator)
    return TensorDataset(x, x.sum(1, keepdim=True))


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))


def sharded_loader(epoch: int = 0, data: TensorDataset | None = None) -> DataLoader:
    """A plain loop's loader: each rank reads its shard, reshuffled per epoch."""
    data = data or dataset()
    sampler: DistributedSampler[int] = DistributedSampler(data, shuffle=True, seed=0)
    sampler.set_epoch(epoch)
    return DataLoader(data, batch_size=BATCH, sampler=sampler)


def fabric(strategy: Any = "ddp", **options: Any) -> Any:
    """A launched 2-rank Fabric on CPU (the World's process group is its own)."""
    from lightning.fabric import Fabric

    runner = Fabric(accelerator="cpu", devices=dist.get_world_size(), strategy=strategy, **options)
    runner.launch()
    return runner
