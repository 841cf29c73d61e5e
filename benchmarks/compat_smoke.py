"""The smoke steps of ``benchmarks/compat.py``, run inside a venv with one Lightning.

    python benchmarks/compat_smoke.py FLAVOUR     # pytorch_lightning or lightning.pytorch

Runs every step of ``STEPS`` in order against the Lightning flavour given and prints one
JSON line for the release, then one per step (``{"step", "ok", "detail", "seconds"}``); a
failed step is reported and the next one runs. Exit status 1 when a step failed. The
World targets below (``target_*``) are what its ranks run; they build their Trainer in the
flavour named by ``COMPAT_LIGHTNING_FLAVOUR``, which this sets.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

THIS = Path(__file__).resolve()
# Not CHAOSLIGHT_*: the World keeps chaoslight's own variables from its ranks.
FLAVOUR_VARIABLE = "COMPAT_LIGHTNING_FLAVOUR"
WORLD_TIMEOUT_S = 30.0
EXIT_FAILED = 1


def _pl() -> Any:
    return importlib.import_module(os.environ.get(FLAVOUR_VARIABLE, "lightning.pytorch"))


@functools.cache
def _model_class() -> type:
    import torch

    class Tiny(_pl().LightningModule):  # type: ignore[misc]
        """One linear layer with every step, and the hooks Lightning calls only when overridden."""

        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.layer = torch.nn.Linear(4, 1)
            self.first_step: int | None = None

        def forward(self, x: Any) -> Any:
            return self.layer(x)

        def _loss(self, batch: Any) -> Any:
            x, y = batch
            return torch.nn.functional.mse_loss(self(x), y)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            if self.first_step is None:
                self.first_step = int(self.trainer.global_step)
            return self._loss(batch)

        def validation_step(self, batch: Any, batch_idx: int) -> Any:
            return self._loss(batch)

        def test_step(self, batch: Any, batch_idx: int) -> Any:
            return self._loss(batch)

        def predict_step(self, batch: Any, batch_idx: int) -> Any:
            return self(batch[0])

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def configure_model(self) -> None:
            pass

        def on_validation_model_train(self) -> None:
            self.trainer.model.train()

        def on_test_model_train(self) -> None:
            self.trainer.model.train()

    return Tiny


def _loader() -> Any:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    generator = torch.Generator().manual_seed(0)
    x, y = torch.randn(32, 4, generator=generator), torch.randn(32, 1, generator=generator)
    return DataLoader(TensorDataset(x, y), batch_size=4)


def _trainer(**options: Any) -> Any:
    ddp = "WORLD_SIZE" in os.environ
    settings: dict[str, Any] = {
        "accelerator": "cpu",
        "devices": int(os.environ["WORLD_SIZE"]) if ddp else 1,
        "strategy": "ddp" if ddp else "auto",
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "num_sanity_val_steps": 0,
        "limit_val_batches": 0,
        "default_root_dir": os.getcwd(),
    }
    return _pl().Trainer(**(settings | options))


class Planned(Exception):
    """Raised on purpose, on every rank, so Lightning runs its on_exception hooks."""


def target_sites() -> None:
    """Fit with validation, save, resume, test, predict, then a fit that raises."""
    model = _model_class()()
    trainer = _trainer(
        max_steps=2, val_check_interval=1, limit_val_batches=1, num_sanity_val_steps=1
    )
    trainer.fit(model, _loader(), _loader())
    trainer.save_checkpoint("smoke.ckpt")
    resumed = _trainer(max_steps=3)
    resumed.fit(model, _loader(), ckpt_path="smoke.ckpt")
    resumed.test(model, _loader())
    resumed.predict(model, _loader())

    class Boom(_pl().Callback):  # type: ignore[misc]
        def on_train_start(self, trainer: Any, module: Any) -> None:
            raise Planned("raised on purpose")

    with contextlib.suppress(Planned):  # last: Lightning tears the fit down after it
        _trainer(max_steps=1, callbacks=[Boom()]).fit(model, _loader())


def target_plain() -> None:
    """A correct 4-step DDP fit."""
    _trainer(max_steps=4).fit(_model_class()(), _loader())


def target_checkpointed() -> None:
    """A correct program that checkpoints every epoch (Lightning's default ModelCheckpoint)."""
    trainer = _trainer(max_steps=-1, max_epochs=3, enable_checkpointing=True)
    trainer.fit(_model_class()(), _loader())


class Smoke:
    """What the steps share: the flavour under test and one lazily started 2-rank World."""

    def __init__(self, flavour: str) -> None:
        self.flavour = flavour
        self._world: Any = None

    def world(self) -> Any:
        if self._world is None:
            import chaoslight

            self._world = chaoslight.World(size=2, preload=(self.flavour,), spares=0)
        return self._world

    def run(self, target: str, schedule: Any = None, **options: Any) -> Any:
        options.setdefault("timeout", WORLD_TIMEOUT_S)
        return self.world().run(f"{THIS}:{target}", schedule, **options)

    def close(self) -> None:
        if self._world is not None:
            self._world.close()


def _fabric_class() -> Any:
    """Fabric of the flavour's own package (``lightning.fabric`` beside ``lightning``,
    ``lightning_fabric`` beside ``pytorch_lightning``)."""
    flavour = os.environ.get(FLAVOUR_VARIABLE, "lightning.pytorch")
    package = "lightning.fabric" if flavour.startswith("lightning.") else "lightning_fabric"
    return importlib.import_module(package).Fabric


def target_fabric() -> float:
    """A correct 2-rank Fabric loop: 4 optimizer steps, a reduced loss, a checkpoint."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    fabric = _fabric_class()(accelerator="cpu", devices=2, strategy="ddp")
    fabric.launch()
    torch.manual_seed(0)
    module = torch.nn.Linear(8, 1)
    model, optimizer = fabric.setup(module, torch.optim.SGD(module.parameters(), lr=0.05))
    data = TensorDataset(torch.randn(16, 8), torch.randn(16, 1))
    loss = torch.zeros(())
    for x, y in fabric.setup_dataloaders(DataLoader(data, batch_size=2)):
        loss = torch.nn.functional.mse_loss(model(x), y)
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    fabric.save("state.ckpt", {"model": model, "optimizer": optimizer})
    return float(fabric.all_reduce(loss.detach(), reduce_op="mean"))


def _expect(condition: bool, reason: str) -> None:
    if not condition:
        raise AssertionError(reason)


def step_sites(smoke: Smoke) -> None:
    """Every Lightning and DDP site of ``chaoslight.sites()`` fires in a 2-rank fit."""
    import chaoslight

    wanted = sorted(s for s in chaoslight.sites() if s.startswith(("lightning.", "dist.grad")))
    schedule = chaoslight.Schedule([chaoslight.Delay(0, site=s, times=1) for s in wanted])
    outcome = smoke.run("target_sites", schedule)
    _expect(outcome.passed, f"the fit did not pass: {outcome.summary()}")
    fired = {(e.site, e.rank) for e in outcome.events if e.kind == "fired"}
    silent = [s for s in wanted if {(s, 0), (s, 1)} - fired]
    _expect(not silent, f"{len(silent)} of {len(wanted)} sites never fired: {', '.join(silent)}")


def step_restore(smoke: Smoke) -> None:
    """Inside inject() every patch point is wrapped; after it, every original is back."""
    import chaoslight
    from chaoslight import _sites

    def attributes() -> dict[tuple[int, str], Any]:
        return {
            (id(owner), point.attribute): vars(owner).get(point.attribute, _sites.MISSING)
            for point in _sites.PATCH_POINTS
            for owner in point.owners()
        }

    before = attributes()
    never = 10**9
    faults: list[Any] = [chaoslight.Delay(0, site=s, step=never) for s in chaoslight.sites()]
    # A deferred OOM also arms the sync points (Tensor.item, ...), which name no site.
    faults.append(chaoslight.OOM(site="torch.save", deferred=True, step=never))
    schedule = chaoslight.Schedule(faults)
    with chaoslight.inject(schedule):
        inside = attributes()
        _trainer(max_steps=2).fit(_model_class()(), _loader())
    after = attributes()
    unwrapped = [key for key in before if inside[key] is before[key]]
    _expect(not unwrapped, f"{len(unwrapped)} patch points were not wrapped inside inject()")
    left = [key for key in before if after.get(key) is not before[key]]
    _expect(not left, f"{len(left)} patched attributes were not restored after inject()")


def step_world(smoke: Smoke) -> None:
    """A World runs a correct fit (default checks pass) and judges an OOM on rank 1."""
    import chaoslight
    from chaoslight._search._failure import DEFAULT_CHECKS

    plain = smoke.run("target_plain", checks=list(DEFAULT_CHECKS))
    _expect(plain.passed, f"a correct fit did not pass: {plain.summary()}")
    oom = chaoslight.Schedule([chaoslight.OOM(site="lightning.forward", rank=1, step=1)])
    verdict = chaoslight.judge(smoke.run("target_plain", oom))
    _expect(verdict.fired != (), "the OOM never fired")
    _expect(not verdict.failed, f"the oracle judged a correct program a failure: {verdict.reason}")


def step_fabric(smoke: Smoke) -> str:
    """A Fabric loop runs clean under the default checks, its steps are its optimizer
    steps (an OOM at ``fabric.forward`` step 2 fires there), and the oracle passes it."""
    import chaoslight
    from chaoslight._search._failure import DEFAULT_CHECKS

    plain = smoke.run("target_fabric", checks=list(DEFAULT_CHECKS))
    _expect(plain.passed, f"a correct Fabric loop did not pass: {plain.summary()}")
    oom = chaoslight.Schedule([chaoslight.OOM(site="fabric.forward", rank=1, step=2)])
    outcome = smoke.run("target_fabric", oom)
    fired = [(e.site, e.rank, e.step) for e in outcome.events if e.kind == "fired"]
    _expect(fired == [("fabric.forward", 1, 2)], f"the OOM fired at {fired}")
    verdict = chaoslight.judge(outcome)
    _expect(not verdict.failed, f"the oracle judged a correct loop a failure: {verdict.reason}")
    return "clean; an OOM at fabric.forward step 2 fired there, not the program's fault"


def step_resume(smoke: Smoke) -> None:
    """``inject(resume_from=...)`` makes a fit resume, and ResumeEquivalence passes in a World."""
    import chaoslight
    from chaoslight.checks import ResumeEquivalence

    with tempfile.TemporaryDirectory() as scratch:
        checkpoint = os.path.join(scratch, "two.ckpt")
        first = _trainer(max_steps=2)
        first.fit(_model_class()(), _loader())
        first.save_checkpoint(checkpoint)
        model = _model_class()()
        with chaoslight.inject(resume_from=checkpoint):
            _trainer(max_steps=4).fit(model, _loader())
    _expect(model.first_step == 2, f"the fit started at step {model.first_step}, not 2")
    outcome = smoke.run("target_checkpointed", checks=[ResumeEquivalence()])
    _expect(outcome.passed, f"crash and restart: {outcome.summary()}")


def step_crash(smoke: Smoke) -> None:
    """``Crash(signal=9)`` kills rank 1; the World says crashed and the oracle passes it."""
    import chaoslight

    crash = chaoslight.Crash(site="lightning.training_step", rank=1, step=1, signal=9)
    outcome = smoke.run("target_plain", chaoslight.Schedule([crash]))
    _expect(outcome.status == "crashed", f"status {outcome.status}, not crashed")
    verdict = chaoslight.judge(outcome)
    _expect(not verdict.failed, f"the oracle judged a correct program a failure: {verdict.reason}")


PREEMPT_TIMEOUT_S = 5.0  # Lightning's own handling may hang: do not wait 30 s for it


def target_long() -> None:
    """A correct 12-step DDP fit: long enough for a SIGTERM to land mid-training."""
    _trainer(max_steps=12).fit(_model_class()(), _loader())


def step_preempt(smoke: Smoke) -> str:
    """SIGTERM to rank 1 of a plain fit: Lightning's own handling stops both ranks, or the
    oracle names the known issue of this release (any other finding fails the step)."""
    import chaoslight

    fault = chaoslight.Preempt(site="lightning.training_step", rank=1, step=3)
    schedule = chaoslight.Schedule([fault])
    outcome = smoke.run("target_long", schedule, timeout=PREEMPT_TIMEOUT_S)
    delivered = [e for e in outcome.events if e.detail.startswith("SIGTERM delivered")]
    _expect(bool(delivered), "the SIGTERM was never delivered")
    _expect("handled by lightning" in delivered[0].detail, delivered[0].detail)
    verdict = chaoslight.judge(outcome)
    if not verdict.failed:
        return "ok: stopped together"
    _expect(verdict.known is not None, f"not a known issue: {verdict.reason[:160]}")
    return f"ok: known issue {verdict.known.issue.key}"


AGREED = THIS.parent.parent / "examples" / "catalogue" / "preemption.py"


def step_fuzz(smoke: Smoke) -> str:
    """`chaoslight fuzz` of preemptions: a plain fit ends clean with this release's known
    issue set apart; the flag-and-MAX-reduce agreement passes with ``strict=True``."""
    import chaoslight

    options = {"faults": ["preempt"], "max_examples": 2, "replays": 0, "seed": 0}
    options |= {"timeout": PREEMPT_TIMEOUT_S, "world": smoke.world()}
    result, _ = chaoslight.fuzz(f"{THIS}:target_long", **options)
    _expect(result.status == "clean", f"plain fit: {result.status}: {result.verdict}")
    _expect(bool(result.known), "no known issue reported for a plain fit")
    agreed, _ = chaoslight.fuzz(f"{AGREED}:train_fixed", strict=True, **options)
    _expect(agreed.status == "clean", f"the agreement, strict: {agreed.verdict}")
    return f"ok: {result.known[0].issue.key} apart; agreement clean with strict"


# Issue 21's production faults, each fired on rank 1 of a correct program: what the oracle
# says of each on this release (a correct program passes, recovers or fails cleanly).
KIND_SMOKES = (
    ("freeze", "target_plain", "freeze@lightning.training_step rank=1 step=1 seconds=0.5"),
    ("pg_abort", "target_plain", "pg_abort@dist.gradient_allreduce rank=1 step=1"),
    ("crash", "target_plain", "crash@lightning.training_step rank=1 step=1 signal=11"),
    ("preempt", "target_long", "preempt@lightning.training_step rank=1 step=2 group=true"),
    ("flip", "target_plain", "flip@lightning.optimizer_step rank=1 step=1"),
    ("repeat_batch", "target_plain", "repeat_batch@lightning.next_batch rank=1 step=1"),
    ("bad_checkpoint", "target_sites", "bad_checkpoint@lightning.load_checkpoint rank=1"),
)


# What the oracle's rule says of a run it passed, in a table cell.
SAID = {
    "BENIGN": "passed",
    "RECOVERED": "recovered",
    "FAILED_CLEANLY": "failed cleanly",
    "HANG": "ended, nothing hung",
    "STALLED": "waited as allowed",
}


def step_kinds(smoke: Smoke) -> str:
    """Each production fault of issue 21 (a freeze, an aborted process group, a segfault,
    a SIGTERM to the process group, a bit flip, a repeated batch, a truncated checkpoint)
    fires on rank 1 of a correct program, and the oracle does not fail the program (a
    SIGTERM Lightning's handler took may be this release's known issue)."""
    import chaoslight

    said = []
    for name, target, text in KIND_SMOKES:
        schedule = chaoslight.Schedule.parse(text)
        outcome = smoke.run(target, schedule, timeout=PREEMPT_TIMEOUT_S * 2)
        fired = [e for e in outcome.events if e.kind == "fired" and e.rank == 1]
        _expect(bool(fired), f"{name}: never fired ({outcome.summary()})")
        verdict = chaoslight.judge(outcome)
        if verdict.failed and verdict.known is None:
            raise AssertionError(f"{name}: a correct program judged failed: {verdict.reason}")
        said.append(f"{name} {'known issue' if verdict.failed else SAID.get(verdict.rule.name)}")
    return "ok: " + ", ".join(said)


# The smoke steps, in order: one more is one more entry (a name and a function of a Smoke).
STEPS: list[tuple[str, Callable[[Smoke], str | None]]] = [
    ("restore", step_restore),
    ("sites", step_sites),
    ("world", step_world),
    ("fabric", step_fabric),
    ("resume", step_resume),
    ("crash", step_crash),
    ("preempt", step_preempt),
    ("fuzz", step_fuzz),
    ("kinds", step_kinds),
]


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0] if lines else ""


def main(flavour: str) -> int:
    """Run every step in this interpreter; one JSON line per step on stdout."""
    os.environ[FLAVOUR_VARIABLE] = flavour
    import torch

    module = importlib.import_module(flavour)
    header = {"flavour": flavour, "version": module.__version__, "torch": torch.__version__}
    print(json.dumps(header), flush=True)
    smoke = Smoke(flavour)
    failed = False
    try:
        for name, step in STEPS:
            start = time.monotonic()
            try:
                note = step(smoke) or ""  # what an ok step has to say, e.g. which issue
                detail = ""
            except Exception as exc:  # a failed step is a table cell, not the end of the run
                note, detail = "", f"{type(exc).__name__}: {_first_line(str(exc))}"
            failed = failed or bool(detail)
            line = {"step": name, "ok": not detail, "detail": detail, "note": note}
            print(json.dumps(line | {"seconds": round(time.monotonic() - start, 1)}), flush=True)
    finally:
        smoke.close()
    return EXIT_FAILED if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]) if len(sys.argv) == 2 else "usage: compat_smoke.py FLAVOUR")
