"""Targets for the multi-rank fault and check tests: tiny DDP programs, some with a bug.

Loaded by World workers as ``tests/ddp_targets.py:<name>`` (``helpers`` is importable
because a path target's folder goes on ``sys.path``). Each returns something the test
compares across ranks: parameter bits, reduced values.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist
from helpers import pl, tiny_loader, tiny_model_class, tiny_trainer
from torch.utils.data import DataLoader, TensorDataset

MAX_STEPS = 4


def _world() -> int:
    return int(os.environ["WORLD_SIZE"])


def _fit(model: Any = None, loader: Any = None, max_steps: int = MAX_STEPS, **options: Any) -> Any:
    model = tiny_model_class()() if model is None else model
    trainer = tiny_trainer(max_steps=max_steps, devices=_world(), strategy="ddp", **options)
    trainer.fit(model, tiny_loader() if loader is None else loader)
    return model


def _bits(tensor: torch.Tensor) -> list[int]:
    return tensor.detach().reshape(-1).float().view(torch.int32).tolist()


def param_bits() -> list[int]:
    """Fit; return the final parameters' float32 bit patterns."""
    return _bits(_fit().flat_params())


def reduce_random() -> list[int]:
    """All-reduce a rank-dependent random tensor; return the result's bits."""
    generator = torch.Generator().manual_seed(1000 + dist.get_rank())
    tensor = torch.randn(4096, generator=generator)
    dist.all_reduce(tensor)
    return _bits(tensor)


def logged_losses() -> list[float]:
    """Fit with ``self.log(sync_dist=True)``; return the logged (reduced) loss."""
    model = _fit(tiny_model_class()(log_sync=True))
    return [float(model.trainer.callback_metrics["loss"])]


class RankZeroEdit(tiny_model_class()):  # type: ignore[misc]
    """Bug: a 'weight decay' applied by hand on rank 0 only, after the optimizer step."""

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.trainer.global_rank == 0 and batch_idx == 1:
            with torch.no_grad():
                self.layer.weight.mul_(0.99)


def rank_zero_edit() -> None:
    """Replicas drift: rank 0 edits its weights outside the optimizer."""
    _fit(RankZeroEdit())


def plain() -> None:
    """A correct tiny DDP fit (the corrected twin of several buggy targets)."""
    _fit()


def no_distributed_sampler() -> None:
    """Bug: the sampler is not distributed, so every rank trains on the same samples."""
    _fit(use_distributed_sampler=False)


def repeated_rows() -> None:
    """Correct: eight distinct rows, each four times, sharded by Lightning's sampler."""
    x = torch.arange(8.0).repeat(4).reshape(32, 1).expand(32, 4).contiguous()
    _fit(loader=DataLoader(TensorDataset(x, x[:, :1]), batch_size=4, shuffle=True))


def fixed_rank_sampler() -> None:
    """Bug: a DistributedSampler built by hand with rank=0 on every rank."""
    from torch.utils.data.distributed import DistributedSampler

    data = tiny_loader().dataset
    sampler = DistributedSampler(data, num_replicas=_world(), rank=0)
    _fit(loader=DataLoader(data, batch_size=4, sampler=sampler), use_distributed_sampler=False)


def backbone_finetuning() -> None:
    """Lightning's BackboneFinetuning unfreezes a backbone DDP was built without (#20340):
    its gradients are never all-reduced and the replicas part."""

    class WithBackbone(tiny_model_class()):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.backbone = torch.nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.layer(self.backbone(x))

        def configure_optimizers(self) -> Any:
            trainable = [p for p in self.parameters() if p.requires_grad]
            return torch.optim.SGD(trainable, lr=0.1)

    finetuning = pl().callbacks.BackboneFinetuning(unfreeze_backbone_at_epoch=1)
    _fit(WithBackbone(), max_steps=8, callbacks=[finetuning])


def nan_loss_on_rank_1() -> None:
    """Bug: rank 1 takes the log of zero at step 2."""

    class LogZero(tiny_model_class()):  # type: ignore[misc]
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            loss = super().training_step(batch, batch_idx)
            if self.trainer.global_rank == 1 and batch_idx == 2:
                loss = loss * torch.log(torch.zeros(()))
            return loss

    _fit(LogZero())


def skips_then_asserts() -> None:
    """Bug (one process): the forward's OOM is caught and the batch skipped; at the end the
    program asserts that no batch was skipped, so the OOM's cause is lost."""

    class Skipper(tiny_model_class()):  # type: ignore[misc]
        skipped = 0

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, y = batch
            try:
                out = self(x)
            except torch.OutOfMemoryError:
                self.skipped += 1
                return None
            return torch.nn.functional.mse_loss(out, y)

        def on_train_end(self) -> None:
            assert self.skipped == 0, f"{self.skipped} batches were skipped"

    tiny_trainer(max_steps=MAX_STEPS).fit(Skipper(), tiny_loader())


def swallowed_oom() -> None:
    """Bug: the forward's OOM is caught and replaced by a zero loss on that rank, which
    finishes; rank 0 audits the skips at the end and fails, told nothing of the cause."""

    class Swallow(tiny_model_class()):  # type: ignore[misc]
        skipped = 0

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, y = batch
            try:
                out = self(x)
            except torch.OutOfMemoryError:
                self.skipped += 1
                return sum(p.sum() for p in self.parameters()) * 0.0  # keeps DDP in step
            return torch.nn.functional.mse_loss(out, y)

        def on_train_end(self) -> None:
            counts: list[Any] = [None] * self.trainer.world_size
            dist.all_gather_object(counts, self.skipped)
            if self.trainer.global_rank == 0 and any(counts):
                raise AssertionError(f"batches were skipped: {counts}")

    _fit(Swallow())


def unseeded() -> None:
    """Bug: the model's initial weights come from an unseeded generator."""

    class Unseeded(tiny_model_class()):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            with torch.no_grad():
                self.layer.weight.copy_(
                    torch.randn(
                        self.layer.weight.shape,
                        generator=torch.Generator().manual_seed(
                            int.from_bytes(os.urandom(4), "little")
                        ),
                    )
                )

    pl().seed_everything(0, verbose=False)
    _fit(Unseeded())


def seeded() -> None:
    """The corrected twin of ``unseeded``."""
    pl().seed_everything(0, verbose=False)
    _fit()


def mlp_for_overhead(steps: int = 60) -> None:
    """A small MLP fit of ``steps`` steps, for the checks-overhead benchmark."""
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(
        torch.randn(64 * 32, 64, generator=generator),
        torch.randint(0, 10, (64 * 32,), generator=generator),
    )

    class MLP(pl().LightningModule):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(
                torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)
            )

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    trainer = tiny_trainer(max_steps=steps, devices=_world(), strategy="ddp")
    trainer.fit(MLP(), DataLoader(data, batch_size=64))


class EpochLr(pl().Callback):  # type: ignore[misc, name-defined]
    """Bug: decays the learning rate from a counter that is not in the checkpoint."""

    def __init__(self) -> None:
        self.epochs_seen = 0

    def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
        self.epochs_seen += 1
        for group in trainer.optimizers[0].param_groups:
            group["lr"] = 0.1 / self.epochs_seen


def _checkpointed(callbacks: list[Any]) -> None:
    """Three epochs, a checkpoint at every epoch end (Lightning's default ModelCheckpoint)."""
    model = tiny_model_class()()
    trainer = tiny_trainer(
        max_steps=-1,
        max_epochs=3,
        devices=_world(),
        strategy="ddp",
        enable_checkpointing=True,
        callbacks=callbacks,
    )
    trainer.fit(model, tiny_loader())


def checkpointed() -> None:
    """A correct program: everything that shapes training is in the checkpoint."""
    _checkpointed([])


def checkpointed_with_lost_state() -> None:
    """The bug: EpochLr's counter restarts at 0 after a restart."""
    _checkpointed([EpochLr()])


def checkpointed_every_step() -> None:
    """A correct program that checkpoints after every step (so a restart resumes mid-epoch)."""
    every_step = pl().callbacks.ModelCheckpoint(
        dirpath="checkpoints", every_n_train_steps=1, save_last=True
    )
    _checkpointed([every_step])


class _SkipOnOom(tiny_model_class()):  # type: ignore[misc]
    """Catches the forward's OOM; ``coordinated`` decides how the ranks recover from it."""

    coordinated = True

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        failed = 0
        try:
            loss = torch.nn.functional.mse_loss(self(x), y)
        except torch.OutOfMemoryError:
            failed = 1
            if not self.coordinated:  # the bug: shrink this rank's weights alone
                with torch.no_grad():
                    for parameter in self.parameters():
                        parameter.mul_(0.5)
        if self.coordinated:
            flag = torch.tensor(float(failed))
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # every rank agrees to skip
            failed = int(flag.item())
        if failed:
            return sum(p.sum() for p in self.parameters()) * 0.0  # the same on every rank
        return loss


def coordinated_skip() -> None:
    """Correct: an OOM on any rank makes every rank skip that batch, so replicas stay equal."""
    _fit(_SkipOnOom())


def lopsided_recovery() -> None:
    """Bug: the rank that runs out of memory halves its own weights and goes on alone."""
    model = _SkipOnOom()
    model.coordinated = False
    _fit(model)


def missing_file_on_rank_1() -> None:
    """Bug: rank 1 reads a file only rank 0 would have written, mid-training."""

    class Reader(tiny_model_class()):  # type: ignore[misc]
        def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
            if self.trainer.global_rank == 1 and batch_idx == 1:
                with open("stats-from-rank-0.json") as handle:
                    handle.read()

    _fit(Reader())


def two_fits(diverge_in_second: bool = False) -> None:
    """Correct: two fits of the same length in one process, each with its own epoch 0 and
    steps from 0, the second reseeded; with ``diverge_in_second`` rank 1 edits a weight
    alone during the second fit (a bug only that fit shows)."""
    world = _world()
    pl().seed_everything(0, verbose=False)
    model = tiny_model_class()()
    tiny_trainer(max_steps=MAX_STEPS, devices=world, strategy="ddp").fit(model, tiny_loader())

    class Second(pl().Callback):  # type: ignore[misc, name-defined]
        def on_train_batch_end(self, trainer: Any, module: Any, *args: Any) -> None:
            if diverge_in_second and trainer.global_rank == 1 and trainer.global_step == 2:
                with torch.no_grad():
                    next(module.parameters()).add_(1.0)

    pl().seed_everything(1, verbose=False)
    second = tiny_trainer(max_steps=MAX_STEPS, devices=world, strategy="ddp", callbacks=[Second()])
    shuffled = DataLoader(tiny_loader().dataset, batch_size=4, shuffle=True)  # other shards
    second.fit(model, shuffled)


def two_fits_diverging() -> None:
    """Bug: rank 1 edits a weight alone in the second of two fits."""
    two_fits(diverge_in_second=True)


def validation_shard_per_rank() -> None:
    """A validation set each rank loads for itself (its own shard: rank 1's is shorter),
    then handed to Lightning, which shards it again: the ranks' DistributedSamplers index
    data sets of different lengths, and no rank validates some samples."""

    class Validated(tiny_model_class()):  # type: ignore[misc]
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            x, y = batch
            self.log("val_loss", torch.nn.functional.mse_loss(self(x), y), sync_dist=True)

    rank = int(os.environ.get("RANK", "0"))
    shard = tiny_loader(batches=4 - rank, seed=10 + rank)
    trainer = tiny_trainer(
        max_steps=MAX_STEPS,
        devices=_world(),
        strategy="ddp",
        limit_val_batches=1.0,
        val_check_interval=2,
    )
    trainer.fit(Validated(), tiny_loader(), shard)


def batch_sampler_outside_hooks() -> None:
    """A loader built before ``fit`` as torch documents a batch sampler, handed to
    ``trainer.fit``: Lightning rebuilds it under DDP with no batch size at all (its first
    batch fails in collation: Lightning#21122)."""
    from torch.utils.data import BatchSampler, RandomSampler

    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(32, 4, generator=generator), torch.randn(32, 1))
    loader = DataLoader(data, batch_sampler=BatchSampler(RandomSampler(data), 4, drop_last=False))
    _fit(loader=loader)
