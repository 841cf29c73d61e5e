"""A plain FSDP loop (torch's ``fully_shard``) whose checkpoint is gathered on rank 0 alone.

The bug (``train_buggy``): every few steps rank 0 saves a full checkpoint: ``if rank ==
0: torch.save(get_model_state_dict(model, full_state_dict=True), path)``. Under FSDP each
rank holds a shard of every parameter; gathering the full state dict is a collective
(an all-gather per parameter) that every rank must join. Rank 0 enters it alone while its
peer goes on to the next step, whose forward all-gathers the parameters: the collectives
pair up wrongly, and the job hangs (or, where the sizes clash, fails) at the first save.
The same code was correct under DDP, where every rank holds the whole model.

In production (NCCL): a hang at the first checkpoint, until the collective timeout.
Shown with no fault: the first save is at step 3.

The fix (``train_fixed``): every rank calls ``get_model_state_dict`` (rank 0 receives the
full state, the others an empty dict, with ``cpu_offload``), and rank 0 alone writes it.

FSDP2 runs on CPU with gloo under torch 2.13; its parameters are DTensors, which
chaoslight's checks that read parameters compare shard by shard.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from _loop_common import model, sharded_loader
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

SAVE_EVERY = 4  # optimizer steps between checkpoints
FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)


def _train(everyone: bool) -> float:
    from torch.distributed.fsdp import fully_shard

    net = model()
    for layer in net:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(net)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    loss = torch.zeros(())
    for step, (x, y) in enumerate(sharded_loader()):
        loss = torch.nn.functional.mse_loss(net(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step % SAVE_EVERY == SAVE_EVERY - 1:
            if everyone:
                state = get_model_state_dict(net, options=FULL)  # every rank gathers
                if dist.get_rank() == 0:
                    torch.save(state, "full.pt")
            elif dist.get_rank() == 0:  # the bug: a collective on one rank
                torch.save(get_model_state_dict(net, options=FULL), "full.pt")
    return float(loss.detach())


def train_buggy() -> float:
    return _train(everyone=False)


def train_fixed() -> float:
    return _train(everyone=True)
