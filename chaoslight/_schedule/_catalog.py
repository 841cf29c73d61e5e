"""The catalogue of injection sites: names, one-line descriptions and capabilities.

Pure data, importable without torch, so a schedule can be validated anywhere. The
patches that implement each site live in ``chaoslight._sites``; a test checks that
every name here has an implementation and that the hook list matches Lightning's.
"""

from __future__ import annotations

from dataclasses import dataclass

# Capabilities a site may have; fault kinds that need one are refused elsewhere.
SYNC = "sync"  # the wrapped call synchronises ranks or devices: DropSync may skip it
REDUCTION = "reduction"  # the wrapped call sums across ranks: ReorderReduction applies
RESULT = "result"  # the wrapped call returns tensors: Corrupt may poison them
BATCHES = "batches"  # the wrapped call reads the next batch: a data fault repeats or drops it
LOAD = "load"  # the wrapped call reads a checkpoint: a load fault hands it a damaged file


@dataclass(frozen=True)
class SiteInfo:
    name: str
    description: str
    capabilities: frozenset[str] = frozenset()


# Hooks Lightning dispatches to callbacks and/or the LightningModule, one site each.
LIGHTNING_HOOKS: tuple[str, ...] = (
    "setup",
    "teardown",
    "on_fit_start",
    "on_fit_end",
    "on_sanity_check_start",
    "on_sanity_check_end",
    "on_train_start",
    "on_train_end",
    "on_validation_start",
    "on_validation_end",
    "on_test_start",
    "on_test_end",
    "on_predict_start",
    "on_predict_end",
    "on_train_epoch_start",
    "on_train_epoch_end",
    "on_validation_epoch_start",
    "on_validation_epoch_end",
    "on_test_epoch_start",
    "on_test_epoch_end",
    "on_predict_epoch_start",
    "on_predict_epoch_end",
    "on_train_batch_start",
    "on_train_batch_end",
    "on_validation_batch_start",
    "on_validation_batch_end",
    "on_test_batch_start",
    "on_test_batch_end",
    "on_predict_batch_start",
    "on_predict_batch_end",
    "on_before_backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "on_before_zero_grad",
    "on_save_checkpoint",
    "on_load_checkpoint",
    "on_exception",
    "on_validation_model_eval",
    "on_validation_model_train",
    "on_validation_model_zero_grad",
    "on_test_model_eval",
    "on_test_model_train",
    "on_predict_model_eval",
    "configure_model",
)

# Lightning's strategy calls the step methods and backward through one dispatcher.
LIGHTNING_STEPS: dict[str, str] = {
    "training_step": "the LightningModule's training_step, as the strategy calls it",
    "validation_step": "the LightningModule's validation_step, as the strategy calls it",
    "test_step": "the LightningModule's test_step, as the strategy calls it",
    "predict_step": "the LightningModule's predict_step, as the strategy calls it",
}

COLLECTIVES: dict[str, tuple[str, frozenset[str]]] = {
    "all_reduce": ("torch.distributed.all_reduce", frozenset({SYNC, REDUCTION, RESULT})),
    "reduce": ("torch.distributed.reduce", frozenset({SYNC, REDUCTION, RESULT})),
    "all_gather": ("torch.distributed.all_gather", frozenset({SYNC, RESULT})),
    "all_gather_into_tensor": (
        "torch.distributed.all_gather_into_tensor",
        frozenset({SYNC, RESULT}),
    ),
    "all_gather_object": ("torch.distributed.all_gather_object", frozenset({SYNC})),
    "broadcast": (
        "torch.distributed.broadcast (also as broadcast_object_list calls it)",
        frozenset({SYNC, RESULT}),
    ),
    "broadcast_object_list": ("torch.distributed.broadcast_object_list", frozenset({SYNC})),
    "barrier": ("torch.distributed.barrier", frozenset({SYNC})),
    "reduce_scatter": ("torch.distributed.reduce_scatter", frozenset({SYNC, REDUCTION, RESULT})),
    "reduce_scatter_tensor": (
        "torch.distributed.reduce_scatter_tensor",
        frozenset({SYNC, REDUCTION, RESULT}),
    ),
}


# Lightning Fabric's calls, one site each, in both namespaces (``lightning.fabric`` and the
# standalone ``lightning_fabric``): what a program written on Fabric calls in its own loop.
FABRIC_CALLS: dict[str, tuple[str, frozenset[str]]] = {
    "launch": ("Fabric.launch: where the ranks start", frozenset()),
    "setup": ("Fabric.setup: wrapping the model (DDP, FSDP) and its optimizers", frozenset()),
    "setup_dataloaders": (
        "Fabric.setup_dataloaders: where Fabric puts its distributed sampler",
        frozenset(),
    ),
    "forward": (
        "calling the model Fabric wrapped (model(x) in the loop): where a program's "
        "try/except around the forward pass catches",
        frozenset({RESULT}),
    ),
    "backward": ("Fabric.backward of the loss (DDP's gradient all-reduce runs in it)", frozenset()),
    "optimizer_step": ("the step of an optimizer Fabric wrapped", frozenset()),
    "save": (
        "Fabric.save: every rank calls it, rank 0 writes (a collective under DDP)",
        frozenset(),
    ),
    "load": ("Fabric.load of a checkpoint to resume", frozenset({LOAD})),
    "barrier": ("Fabric.barrier", frozenset({SYNC})),
    "all_reduce": ("Fabric.all_reduce", frozenset({SYNC, RESULT})),
    "all_gather": ("Fabric.all_gather", frozenset({SYNC, RESULT})),
    "broadcast": ("Fabric.broadcast (of any picklable object)", frozenset({SYNC})),
}

# Plain PyTorch's training calls. In a Trainer program Lightning's own sites stand for them
# (``lightning.backward``, ``lightning.optimizer_step``, ``lightning.next_batch``), so a
# search draws these only in a loop no Trainer runs (``LOOP_SITES``).
TORCH_LOOP_CALLS: dict[str, tuple[str, frozenset[str]]] = {
    "torch.backward": (
        "torch.autograd.backward (loss.backward(), and Fabric's backward under it)",
        frozenset(),
    ),
    "torch.optimizer_step": (
        "the step of any torch.optim optimizer (before it changes the parameters)",
        frozenset(),
    ),
    "torch.next_batch": (
        "a DataLoader iterator's next batch (any DataLoader, Fabric's included)",
        frozenset({RESULT, BATCHES}),
    ),
}
LOOP_SITES = frozenset(TORCH_LOOP_CALLS)


def _build() -> dict[str, SiteInfo]:
    sites: list[SiteInfo] = []
    for step, text in LIGHTNING_STEPS.items():
        sites.append(SiteInfo(f"lightning.{step}", text, frozenset({RESULT})))
    sites += [
        SiteInfo(
            "lightning.forward",
            "calling a LightningModule (self(x) inside training_step): where a user's "
            "try/except around the forward pass catches",
            frozenset({RESULT}),
        ),
        SiteInfo(
            "lightning.backward",
            "the strategy's backward of the loss (automatic optimization, and manual_backward)",
        ),
        SiteInfo("lightning.optimizer_step", "the LightningModule's optimizer_step hook"),
        SiteInfo("lightning.save_checkpoint", "the strategy writing a checkpoint"),
        SiteInfo(
            "lightning.load_checkpoint",
            "the strategy reading a checkpoint to resume",
            frozenset({LOAD}),
        ),
        SiteInfo(
            "lightning.next_batch",
            "fetching the next batch from the dataloader (train, validation, test, predict)",
            frozenset({RESULT, BATCHES}),
        ),
    ]
    for hook in LIGHTNING_HOOKS:
        sites.append(
            SiteInfo(
                f"lightning.{hook}", f"the {hook} hook, around the callbacks' and module's code"
            )
        )
    for name, (text, caps) in COLLECTIVES.items():
        sites.append(SiteInfo(f"dist.{name}", text, caps))
    sites += [
        SiteInfo(
            "dist.gradient_allreduce",
            "DDP's gradient-bucket all-reduce (a communication hook registered during fit)",
            frozenset({SYNC, REDUCTION}),
        ),
        SiteInfo(
            "cuda.synchronize", "torch.cuda.synchronize (a no-op call on CPU)", frozenset({SYNC})
        ),
        SiteInfo(
            "torch.save",
            "torch.save: a Raise or Crash here leaves a half-written file, put back when "
            "the run ends",
        ),
        SiteInfo("torch.load", "torch.load", frozenset({RESULT, LOAD})),
    ]
    sites += [SiteInfo(name, text, caps) for name, (text, caps) in TORCH_LOOP_CALLS.items()]
    sites += [SiteInfo(f"fabric.{name}", text, caps) for name, (text, caps) in FABRIC_CALLS.items()]
    return {site.name: site for site in sites}


SITES: dict[str, SiteInfo] = _build()
