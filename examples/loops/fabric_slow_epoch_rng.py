"""A Fabric loop whose rank 0 draws from the global RNG when an epoch was slow.

The model trains with LayerDrop: each residual block is skipped with probability 0.3,
decided per batch by ``torch.rand`` from the global RNG. ``fabric.seed_everything(0)``
seeds every rank alike, so every rank drops the same blocks (DDP with
``find_unused_parameters=True`` averages the gradients of the blocks every rank ran).

The bug (``train_buggy``): after an epoch slower than ``SLOW_S``, rank 0 prints a random
training sample, picked with ``torch.randint`` from the *global* RNG. On a quiet machine no
epoch is that slow. When one is (a straggler, a slow disk, a busy node), rank 0's random
stream moves one draw ahead of its peers' for the rest of the run: the ranks disagree on
which blocks to drop, a block dropped on rank 0 and run on rank 1 gets half its gradient,
and nothing fails: the run silently trains another model than the same seed on a quiet
machine. The Trainer twin is ``examples/bugs/slow_epoch_rng.py``.

Found by ``learned-invariants`` under a straggler of ``SLOW_S`` or more in an epoch (on
either rank: rank 0 waits for a slow peer in the gradient all-reduce), e.g.
``delay@torch.backward rank=1 step=2 seconds=2.0``: the torch RNG state, equal across
ranks at every step of two fault-free runs, differs from the next epoch on.

The fix (``train_fixed``): the sample is drawn from a ``torch.Generator`` of its own.
"""

from __future__ import annotations

import time

import torch
from _loop_common import BATCH, dataset, fabric
from torch.utils.data import DataLoader

SLOW_S = 1.0  # an epoch slower than this is worth a look (a quiet one takes ~0.05 s)
EPOCHS = 3


class LayerDrop(torch.nn.Module):
    """Residual blocks, each dropped per batch with probability ``drop`` while training."""

    def __init__(self, drop: float = 0.3) -> None:
        super().__init__()
        self.drop = drop
        self.inp = torch.nn.Linear(8, 16)
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(16, 16) for _ in range(3))
        self.out = torch.nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.inp(x))
        for block in self.blocks:
            # The same seed on every rank: every rank draws the same decision.
            if self.training and float(torch.rand(())) < self.drop:
                continue
            h = h + torch.relu(block(h))
        return self.out(h)


def _train(own_generator: bool) -> float:
    from lightning.fabric.strategies import DDPStrategy

    runner = fabric(DDPStrategy(find_unused_parameters=True))
    runner.seed_everything(0, verbose=False)
    module = LayerDrop()
    net, optimizer = runner.setup(module, torch.optim.SGD(module.parameters(), lr=0.05))
    data = dataset()
    loader = runner.setup_dataloaders(DataLoader(data, batch_size=BATCH, shuffle=True))
    generator = torch.Generator().manual_seed(0) if own_generator else None
    loss = torch.zeros(())
    for epoch in range(EPOCHS):
        started = time.monotonic()
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(net(x), y)
            runner.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        if runner.global_rank == 0 and time.monotonic() - started >= SLOW_S:
            # Bug when generator is None: a draw from the global RNG, on rank 0 only.
            index = int(torch.randint(len(data), (), generator=generator))
            print(f"slow epoch {epoch}: sample {index} = {data[index]}")
    return float(runner.all_reduce(loss.detach(), reduce_op="mean"))


def train_buggy() -> float:
    """Bug: the slow-epoch sample is drawn from the global RNG, on rank 0 only."""
    return _train(own_generator=False)


def train_fixed() -> float:
    """Fixed: the sample is drawn from a generator of its own."""
    return _train(own_generator=True)
