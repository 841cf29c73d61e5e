"""Correct: a plain DDP loop with two optimizers per batch, marking its steps itself.

A generator-and-critic shape: each batch steps the critic's optimizer, then the
generator's. chaoslight would count two steps per batch (it counts optimizer steps), so
the loop calls ``chaoslight.mark_step()`` at the end of each batch: one step per batch.
The call does nothing when no schedule is active.
"""

from __future__ import annotations

import torch
from _loop_common import model, sharded_loader
from torch.nn.parallel import DistributedDataParallel

import chaoslight


def train() -> float:
    critic = DistributedDataParallel(model())
    generator = DistributedDataParallel(torch.nn.Linear(8, 8))
    critic_opt = torch.optim.SGD(critic.parameters(), lr=0.01)
    generator_opt = torch.optim.SGD(generator.parameters(), lr=0.01)
    loss = torch.zeros(())
    for x, y in sharded_loader():
        critic_loss = torch.nn.functional.mse_loss(critic(generator(x).detach()), y)
        critic_loss.backward()
        critic_opt.step()
        critic_opt.zero_grad()
        loss = critic(generator(x)).mean()
        loss.backward()
        generator_opt.step()
        generator_opt.zero_grad()
        critic_opt.zero_grad()  # the generator's backward reached the critic too
        chaoslight.mark_step()
    return float(loss.detach())
