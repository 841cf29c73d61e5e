"""Targets for the World tests of loops that no Trainer runs (``test_loop_steps.py``):
2-rank programs written on plain PyTorch DDP and on Lightning Fabric."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

STEPS = 4


def _data() -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(STEPS * 4, 8, generator=generator), torch.randn(STEPS * 4, 1))


def plain_caught_oom() -> float:
    """A plain DDP loop that skips its step on the rank whose backward runs out of memory:
    the rank that skips never joins that step's gradient all-reduce (the bug). The process
    group is the World's (``dist`` is up when the target runs)."""
    assert dist.is_initialized()
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = _data()
    loader = DataLoader(data, batch_size=2, sampler=DistributedSampler(data, shuffle=False))
    for x, y in loader:
        try:
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
        except torch.cuda.OutOfMemoryError:
            opt.zero_grad()
            continue
        opt.step()
        opt.zero_grad()
    # No collective after the loop: the rank that skipped returns, its peer waits in the
    # last step's gradient all-reduce (with one, the two would meet mismatched collectives).
    return float(loss.detach())


def fabric_train() -> float:
    """A correct Fabric DDP loop with a checkpoint each step and a reduced loss."""
    from lightning.fabric import Fabric

    fabric = Fabric(accelerator="cpu", devices=2, strategy="ddp")
    fabric.launch()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    model, opt = fabric.setup(model, opt)
    loader = fabric.setup_dataloaders(DataLoader(_data(), batch_size=2))
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        fabric.backward(loss)
        opt.step()
        opt.zero_grad()
        fabric.save("state.ckpt", {"model": model, "optimizer": opt})
    return float(fabric.all_reduce(loss.detach(), reduce_op="mean"))


def _ddp_loop(step_on: object, hook: bool = False) -> float:
    """A plain DDP loop; ``step_on(rank, iteration)`` says whether this rank steps its
    optimizer at that iteration (every rank does the backward, so no collective waits).
    With ``hook``, a communication hook of the program's own that averages nothing (local
    SGD) and a parameter average every second step: replicas apart in between, by design."""
    assert dist.is_initialized()
    torch.manual_seed(dist.get_rank())  # DDP broadcasts rank 0's weights: equal anyway
    model = DistributedDataParallel(torch.nn.Linear(8, 1))
    if hook:

        def local(state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
            future: torch.futures.Future[torch.Tensor] = torch.futures.Future()
            future.set_result(bucket.buffer())
            return future

        # DDP checks the annotations as objects; this file's are strings (PEP 563).
        local.__annotations__ = {
            "state": object,
            "bucket": dist.GradBucket,
            "return": torch.futures.Future[torch.Tensor],
        }
        model.register_comm_hook(None, local)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = _data()
    loader = DataLoader(data, batch_size=2, sampler=DistributedSampler(data, shuffle=False))
    loss = torch.zeros(())
    for iteration, (x, y) in enumerate(loader):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        if step_on(dist.get_rank(), iteration):  # type: ignore[operator]
            opt.step()
        opt.zero_grad()
        if hook and iteration % 2:
            with torch.no_grad():
                for parameter in model.parameters():
                    dist.all_reduce(parameter)
                    parameter /= dist.get_world_size()
    return float(loss.detach())


def plain_ddp_loop() -> float:
    """A correct plain DDP loop: every rank steps every iteration."""
    return _ddp_loop(lambda rank, iteration: True)


def plain_skips_a_step_on_one_rank() -> float:
    """Rank 1 skips its optimizer step at iteration 1 (a rank-local condition around
    ``opt.step()``): its replica parts from rank 0's there, silently."""
    return _ddp_loop(lambda rank, iteration: not (rank == 1 and iteration == 1))


def plain_local_sgd() -> float:
    """A correct local-SGD loop: no gradient averaging (its own comm hook), parameters
    averaged every second step."""
    return _ddp_loop(lambda rank, iteration: True, hook=True)


def _resumable(dropout: float, keep_optimizer: bool, sampler: str = "distributed") -> float:
    """A plain DDP loop over two epochs that rank 0 checkpoints every second step
    (atomically, behind a barrier) and a restarted job resumes from, skipping the batches
    it trained before. ``keep_optimizer=False`` is the bug: Adam's state is not saved."""
    import os

    from torch.utils.data import RandomSampler

    assert dist.is_initialized()
    torch.manual_seed(0)
    layers = [torch.nn.Linear(8, 16), torch.nn.Dropout(dropout), torch.nn.Linear(16, 1)]
    model = DistributedDataParallel(torch.nn.Sequential(*layers))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    data = _data()
    picks = DistributedSampler(data, seed=0) if sampler == "distributed" else RandomSampler(data)
    loader = DataLoader(data, batch_size=2, sampler=picks)
    per_epoch = len(loader)
    done, path = 0, "resume.pt"
    if os.path.exists(path):
        state = torch.load(path)
        model.module.load_state_dict(state["model"])
        if "optimizer" in state:
            opt.load_state_dict(state["optimizer"])
        done = int(state["step"])
    loss = torch.zeros(())
    for epoch in range(done // per_epoch, 2):
        if isinstance(picks, DistributedSampler):
            picks.set_epoch(epoch)
        for index, (x, y) in enumerate(loader):
            step = epoch * per_epoch + index
            if step < done:
                continue
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            if step % 2 == 1:
                if dist.get_rank() == 0:
                    state = {"model": model.module.state_dict(), "step": step + 1}
                    if keep_optimizer:
                        state["optimizer"] = opt.state_dict()
                    torch.save(state, path + ".tmp")
                    os.replace(path + ".tmp", path)
                dist.barrier()
    return float(loss.detach())


def resumable_adam() -> float:
    """Correct: the checkpoint holds the model, the optimizer and the step."""
    return _resumable(0.0, keep_optimizer=True)


def resumable_adam_forgets_its_state() -> float:
    """The bug: the resumed job's Adam starts over (moments and step count at 0)."""
    return _resumable(0.0, keep_optimizer=False)


def resumable_dropout() -> float:
    """Correct, with dropout: a resumed run draws other masks than an uninterrupted one
    (no checkpoint holds the random state), so its weights end elsewhere."""
    return _resumable(0.5, keep_optimizer=True)


def resumable_random_order() -> float:
    """Correct, over a RandomSampler whose order the random state decides: a job resumed
    in the second epoch reads it in another order than an uninterrupted one (its iterator
    draws another seed), so it trains on other samples and ends with other weights."""
    return _resumable(0.0, keep_optimizer=True, sampler="random")


def _epochs(set_epoch: bool, seed_per_rank: bool = False) -> float:
    """A plain DDP loop over three epochs of a DistributedSampler(shuffle=True); with
    ``set_epoch`` it calls ``sampler.set_epoch(epoch)`` before each, as torch asks."""
    assert dist.is_initialized()
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = _data()
    seed = dist.get_rank() if seed_per_rank else 0
    sampler = DistributedSampler(data, shuffle=True, seed=seed)
    loader = DataLoader(data, batch_size=2, sampler=sampler)
    eval_loader = DataLoader(data, batch_size=4)  # no backward follows: not a training pass
    loss = torch.zeros(())
    for epoch in range(3):
        if set_epoch:
            sampler.set_epoch(epoch)
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
        with torch.no_grad():
            loss = sum(torch.nn.functional.mse_loss(model(x), y) for x, y in eval_loader)
    return float(loss)


def plain_sets_epoch() -> float:
    """Correct: a new shuffle each epoch."""
    return _epochs(set_epoch=True)


def plain_forgets_set_epoch() -> float:
    """The bug: every epoch reads the first epoch's order."""
    return _epochs(set_epoch=False)


def plain_seed_per_rank() -> float:
    """The bug: each rank's sampler permutes with its own seed, so the ranks' shares
    overlap and some samples are drawn by no rank."""
    return _epochs(set_epoch=True, seed_per_rank=True)


def fabric_epochs() -> float:
    """Correct: a Fabric loop over three epochs of a shuffled loader that never calls
    ``set_epoch`` itself: Fabric's loader sets the epoch each time it is iterated."""
    from lightning.fabric import Fabric

    fabric = Fabric(accelerator="cpu", devices=2, strategy="ddp")
    fabric.launch()
    torch.manual_seed(0)
    module = torch.nn.Linear(8, 1)
    model, opt = fabric.setup(module, torch.optim.SGD(module.parameters(), lr=0.05))
    loader = fabric.setup_dataloaders(DataLoader(_data(), batch_size=2, shuffle=True))
    loss = torch.zeros(())
    for _ in range(3):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            fabric.backward(loss)
            opt.step()
            opt.zero_grad()
    return float(loss.detach())


def plain_retries_an_epoch() -> float:
    """Correct: an epoch that raises (every rank alike) is trained again from its start,
    in the same order; the retried pass is the loop's own doing, not a lost shuffle."""
    assert dist.is_initialized()
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = _data()
    sampler = DistributedSampler(data, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=2, sampler=sampler)
    loss = torch.zeros(())
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for _attempt in range(2):
            try:
                for x, y in loader:
                    loss = torch.nn.functional.mse_loss(model(x), y)
                    loss.backward()
                    opt.step()
                    opt.zero_grad()
                break
            except RuntimeError:
                opt.zero_grad()  # every rank raised at the same step: train the epoch again
    return float(loss.detach())


def _batchnorm_loop(broadcast: bool, average_at_end: bool) -> float:
    """A plain DDP loop over a BatchNorm model, each rank on its own shard (so its running
    statistics are its own until something syncs them)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 1))
    model = DistributedDataParallel(net, broadcast_buffers=broadcast)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = _data()
    loader = DataLoader(data, batch_size=2, sampler=DistributedSampler(data, shuffle=False))
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
    if average_at_end:  # timm's distribute_bn: the statistics averaged over the ranks
        for buffer in net[1].running_mean, net[1].running_var:
            dist.all_reduce(buffer)
            buffer /= dist.get_world_size()
    return float(loss.detach())


def plain_batchnorm_broadcast() -> float:
    return _batchnorm_loop(broadcast=True, average_at_end=False)


def plain_batchnorm_unsynced() -> float:
    """broadcast_buffers=False and nothing averages them: each rank keeps its own."""
    return _batchnorm_loop(broadcast=False, average_at_end=False)


def plain_batchnorm_averaged() -> float:
    return _batchnorm_loop(broadcast=False, average_at_end=True)
