"""What chaoslight does on a real CUDA GPU: one command, under five minutes on one GPU.

    python benchmarks/gpu_check.py          # on a machine with a CUDA GPU
    python benchmarks/gpu_check.py --cpu    # the same harness on CPU: the CUDA-only checks
                                            # skip, the rest run (a dry run of the script)
    python benchmarks/gpu_check.py --only 3,5   # some of the checks, by number

Without a CUDA device (and without ``--cpu``) it says so in one line and exits 0: nothing
is checked. Otherwise it prints a Markdown table, headed by the card, torch, Lightning and
the commit, for ``docs/explanation/cpu-vs-gpu.md``; exit 1 if a check failed.

The checks, each in this one process unless it says otherwise:

1. ``oom@lightning.forward`` is caught by the program's ``except
   torch.cuda.OutOfMemoryError`` and that batch is skipped; training goes on.
2. ``deferred=true`` surfaces at the program's ``torch.cuda.synchronize()``.
3. ``allocate nbytes=1GiB hold_steps=2`` raises ``torch.cuda.memory_allocated()`` by 1 GiB
   for exactly two steps.
4. A budget 20 MiB above what is held: the backward's gradients (on CUDA made on
   autograd's device thread) go over it. On CUDA the OOM is the caching allocator's own
   (its per-process limit is the budget), named with the budget's rank and step, and no
   dispatch mode watched the ops; on CPU it is the simulated OOM of chaoslight's CPU
   allocator (or, where it cannot be built, of the dispatch mode).
5. The simulated OOM's numbers are the card's (``torch.cuda.mem_get_info``), in the shape of
   a real OOM's message, which is provoked beside it.
6. ``World(size=1)`` on a one-GPU Lightning target: baseline and default fuzz clean.
7. ``World(size=2)`` on a plain-torch DDP target whose ranks share ``cuda:0`` over gloo:
   baseline and default fuzz clean.
8. ``chaoslight run -- torchrun --nproc-per-node 1`` on an NCCL job fires a delay at its
   all-reduce and a raise at its ``torch.save``.
9. Overhead when nothing fires, on a Lightning fit on the device (``benchmarks/overhead.py``'s
   MLP): plain, ``inject(Schedule())``, every site armed, a memory budget nothing comes
   near (``budget limit_bytes=100GiB``); medians of 3 interleaved rounds.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# Only the benchmarks beside it: chaoslight is the installed one (a lent GPU machine runs a
# wheel built here; the checkout's own folder would shadow it and lack chaoslight.strategies).
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402

import chaoslight  # noqa: E402

DEVICE_VARIABLE = "GPU_CHECK_DEVICE"  # what the World's ranks train on (cuda or cpu)
COMMIT_VARIABLE = "GPU_CHECK_COMMIT"  # the commit, where the copy run has no .git
HERE = f"{Path(__file__).resolve()}"
MiB, GiB = 2**20, 2**30
Result = tuple[str, str]  # ("ok" | "FAILED" | "skipped" | "measured", what was seen)


def device() -> str:
    return os.environ.get(DEVICE_VARIABLE, "cuda" if torch.cuda.is_available() else "cpu")


def cuda() -> bool:
    return device() == "cuda"


# -- the programs ------------------------------------------------------------------------


def lightning_module_class() -> Any:
    import lightning.pytorch as pl

    class Net(pl.LightningModule):
        """A small regression model; what each check needs of the program is a flag."""

        def __init__(self, width: int = 64, catch_oom: bool = False, sync: bool = False):
            super().__init__()
            self.layer = torch.nn.Linear(width, width, bias=False)
            self.head = torch.nn.Linear(width, width, bias=False)
            self.catch_oom, self.sync = catch_oom, sync
            self.skipped: list[int] = []
            self.memory: dict[int, int] = {}

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(torch.relu(self.layer(x)))

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, y = batch
            step = self.trainer.global_step
            try:
                loss = torch.nn.functional.mse_loss(self(x), y)
                if self.sync:  # where CUDA reports an asynchronous error
                    torch.cuda.synchronize() if cuda() else loss.item()
            except torch.cuda.OutOfMemoryError:
                if not self.catch_oom:
                    raise
                self.skipped.append(step)
                return None  # skip this batch
            if cuda():
                self.memory[step] = torch.cuda.memory_allocated()
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    return Net


def fit(model: Any, steps: int = 6) -> Any:
    from overhead import bare_trainer

    width = model.layer.in_features
    x = torch.randn(4 * (steps + 2), width, generator=torch.Generator().manual_seed(0))
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x), batch_size=4)
    trainer = bare_trainer(steps, device())
    trainer.fit(model, data)
    return trainer


def lightning_fit() -> None:
    """The World target of check 6: a one-GPU Lightning fit."""
    fit(lightning_module_class()(), steps=4)


def plain_ddp() -> None:
    """The World target of check 7: plain torch DDP, every rank on device 0, over gloo."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    where = torch.device(device(), 0) if cuda() else torch.device("cpu")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    ddp = DistributedDataParallel(model.to(where), device_ids=[0] if cuda() else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    data = torch.Generator().manual_seed(dist.get_rank())
    for _ in range(4):
        x = torch.randn(16, 32, generator=data).to(where)
        loss = torch.nn.functional.mse_loss(ddp(x), x[:, :1])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    dist.barrier()


NCCL_JOB = """\
import os, sys, torch, torch.distributed as dist
dist.init_process_group("{backend}")
tensor = torch.ones(4, device="{device}")
dist.all_reduce(tensor)
try:
    torch.save(tensor, os.path.join(sys.argv[1], "t.pt"))
except OSError as exc:
    print("the job caught", type(exc).__name__)
dist.destroy_process_group()
"""


# -- the checks --------------------------------------------------------------------------


def oom_caught() -> Result:
    model = lightning_module_class()(catch_oom=True)
    with chaoslight.inject("oom@lightning.forward step=1") as run:
        trainer = fit(model)
    fired = [e.site for e in run.fired()]
    ok = model.skipped == [1] and trainer.global_step == 6 and fired == ["lightning.forward"]
    seen = f"caught at step {model.skipped}, {trainer.global_step} steps trained"
    return ("ok" if ok else "FAILED", seen)


def deferred_oom() -> Result:
    model = lightning_module_class()(catch_oom=True, sync=True)
    with chaoslight.inject("oom@lightning.forward step=2 deferred=true") as run:
        fit(model)
    where = "torch.cuda.synchronize()" if cuda() else "loss.item() (CPU)"
    ok = model.skipped == [2] and len(run.fired()) == 1
    return ("ok" if ok else "FAILED", f"raised at {where} of step {model.skipped}")


def allocate_holds() -> Result:
    if not cuda():
        return ("skipped", "no CUDA device: torch.cuda.memory_allocated() is 0")
    model = lightning_module_class()()
    with chaoslight.inject(
        "allocate@lightning.on_train_batch_start step=2 nbytes=1GiB hold_steps=2"
    ):
        fit(model)
    base = model.memory[1]
    extra = {step: round((used - base) / MiB) for step, used in model.memory.items()}
    held = [step for step, mib in extra.items() if abs(mib - 1024) < 64]
    ok = held == [2, 3] and all(abs(extra[s]) < 64 for s in extra if s not in held)
    return ("ok" if ok else "FAILED", f"MiB above step 1, by step: {extra}")


def budget_backward() -> Result:
    # Two 16 MiB weights, on the device before the budget begins: their grads pass 20 MiB.
    # On a card the budget is the caching allocator's limit (what the process reserves,
    # the weights included): the limit is what is reserved now plus 20 MiB. On CPU it is
    # the count of what the training thread allocated after it began: 20 MiB.
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    model = lightning_module_class()(width=2048).to(device())
    if cuda():
        # What a card's first matrix product reserves once (cuBLAS's workspace, 32 MiB on
        # Hopper) is real memory an allocator budget counts: made before the budget begins,
        # the 20 MiB above it are left to the backward's gradients.
        x = torch.ones(4, model.layer.in_features, device=device())
        model(x).sum().backward()
        model.zero_grad(set_to_none=True)
        del x
        torch.cuda.empty_cache()
    threads: set[str] = set()
    modes: list[int] = []
    for weight in model.parameters():
        weight.register_hook(lambda grad: threads.add(threading.current_thread().name))
    model.register_forward_hook(lambda *a: modes.append(len(_get_current_dispatch_mode_stack())))
    main = threading.current_thread().name
    limit = 20 * MiB + (torch.cuda.memory_reserved() if cuda() else 0)
    budget = chaoslight.Schedule(memory_budget=chaoslight.MemoryBudget(limit))
    try:
        with chaoslight.inject(budget):
            fit(model, steps=2)
    except torch.OutOfMemoryError as exc:
        text = "".join(traceback.format_exception(exc))
        ok = "MemoryBudget on rank" in str(exc) and "backward" in text
        where = "autograd's device thread" if threads - {main} else "the main thread"
        how = "the allocator's limit" if cuda() else "the CPU budget"
        if cuda():  # no op went through Python: the allocator counted
            ok = ok and modes != [] and max(modes) == 0 and "simulated by" not in str(exc)
        seen = f"OOM in the backward by {how}, grads on {where}; modes in forward: {set(modes)}"
        if not ok:
            seen += f"; {str(exc).splitlines()[0][:160]!r}"
        return ("ok" if ok else "FAILED", seen)
    return ("FAILED", "no OOM: the budget did not see the backward's gradients")


NUMBERS = re.compile(
    r"Tried to allocate ([\d.]+ \w+)\. GPU (\d+) has a total capacity of ([\d.]+ \w+) of "
    r"which ([\d.]+ \w+) is free"
)
UNITS = {"bytes": 1, "KiB": 2**10, "MiB": MiB, "GiB": GiB, "TiB": 2**40}


def stated(message: str) -> tuple[float, float, float]:
    """(request, total, free) in bytes, as a CUDA OOM message states them."""
    found = NUMBERS.search(message)
    if found is None:
        raise AssertionError(f"not a CUDA OOM message: {message[:120]}")
    sizes = [found[1], found[3], found[4]]
    request, total, free = (float(s.split()[0]) * UNITS[s.split()[1]] for s in sizes)
    return request, total, free


def oom_message() -> Result:
    if cuda():
        torch.ones(1, device="cuda")  # the program uses CUDA
    simulated = "no OOM"
    with chaoslight.inject("oom@torch.save nbytes=2GiB"):
        try:
            torch.save({"w": torch.ones(4)}, io.BytesIO())
        except torch.OutOfMemoryError as exc:
            simulated = str(exc)
    request, total, free = stated(simulated)
    if not cuda():
        ok = free < request <= 2 * GiB and free <= total
        seen = f"CPU: {request / GiB:.2f} GiB asked, {free / GiB:.2f} GiB free of {total / GiB:.2f}"
        return ("ok" if ok else "FAILED", seen)
    real_free, real_total = torch.cuda.mem_get_info()
    try:
        torch.empty(2**44, dtype=torch.uint8, device="cuda")
        return ("FAILED", "16 TiB allocated: no real OOM to compare with")
    except torch.OutOfMemoryError as exc:
        real = stated(str(exc))
    ok = abs(total - real_total) < 0.01 * real_total and abs(free - real_free) < 0.05 * real_total
    ok = ok and abs(real[1] - total) < 0.01 * total
    seen = (
        f"simulated: {request / GiB:.2f} GiB asked, {total / GiB:.2f} GiB total, "
        f"{free / GiB:.2f} GiB free; real: {real[0] / GiB:.2f} GiB asked, "
        f"{real[1] / GiB:.2f} GiB total, {real[2] / GiB:.2f} GiB free"
    )
    return ("ok" if ok else "FAILED", seen)


def world_fuzz(target: str, size: int) -> Result:
    result, failure = chaoslight.fuzz(
        f"{HERE}:{target}", world_size=size, max_examples=15, max_time=75, seed=0
    )
    seen = f"{result.status}: {result.examples} examples in {result.wall_s:.0f} s"
    if failure is not None:
        seen += f"; {failure.schedule.to_text()!r}: {failure.reason[:160]}"
    return ("ok" if result.status == "clean" else "FAILED", seen)


def torchrun_job() -> Result:
    backend = "nccl" if cuda() else "gloo"
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as scratch:
        job, schedule = Path(scratch) / "job.py", Path(scratch) / "schedule.txt"
        job.write_text(NCCL_JOB.format(backend=backend, device=device()))
        schedule.write_text(
            "delay@dist.all_reduce seconds=0.2\nraise@torch.save exception=OSError args=[28]\n"
        )
        launch = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        launch += ["--nproc-per-node", "1"]
        chaos = [sys.executable, "-m", "chaoslight._cli", "run", "--schedule", str(schedule)]
        done = subprocess.run(
            [*chaos, "--timeout", "120", "--", *launch, str(job), scratch],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
    fired = re.findall(r"fired\s+(\w+)@", done.stderr)
    ok = done.returncode == 0 and sorted(fired) == ["delay", "raise"] and "caught" in done.stdout
    seen = f"{backend}, exit {done.returncode}, fired: {', '.join(fired) or 'nothing'}"
    return ("ok" if ok else "FAILED", seen if ok else seen + f"; {done.stderr[-300:]!r}")


def overhead() -> Result:
    from overhead import every_site_armed, loader, time_fit

    steps, data, armed = 300, loader(300, 64), every_site_armed()
    far = chaoslight.Schedule(memory_budget=chaoslight.MemoryBudget(100 * GiB))
    ways: dict[str, Callable[[], Any]] = {
        "plain": contextlib.nullcontext,
        "inject(Schedule())": lambda: chaoslight.inject(chaoslight.Schedule()),
        "every site armed": lambda: chaoslight.inject(armed),
        "budget 100 GiB": lambda: chaoslight.inject(far),
    }
    for context in ways.values():
        time_fit(50, data, context, accelerator=device())  # warm-up
    times: dict[str, list[float]] = {name: [] for name in ways}
    names = list(ways)
    for round_ in range(3):
        for name in names[round_:] + names[:round_]:
            times[name].append(time_fit(steps, data, ways[name], accelerator=device())[0])
    plain = statistics.median(times["plain"])
    ratios = ", ".join(
        f"{name} x{statistics.median(times[name]) / plain:.3f}" for name in names[1:]
    )
    return ("measured", f"{steps} steps: plain {plain:.2f} s; {ratios}")


CHECKS: list[tuple[str, Callable[[], Result]]] = [
    ("1 `oom@lightning.forward` caught by `except torch.cuda.OutOfMemoryError`", oom_caught),
    ("2 `deferred=true` surfaces at the sync point", deferred_oom),
    ("3 `allocate nbytes=1GiB hold_steps=2` on the device", allocate_holds),
    ("4 a budget 20 MiB above what is held sees the backward", budget_backward),
    ("5 the simulated OOM's numbers are the card's", oom_message),
    ("6 `World(size=1)`, Lightning on one GPU: fuzz", lambda: world_fuzz("lightning_fit", 1)),
    (
        "7 `World(size=2)`, plain DDP on device 0 over gloo: fuzz",
        lambda: world_fuzz("plain_ddp", 2),
    ),
    ("8 `chaoslight run -- torchrun` (NCCL): delay and raise fire", torchrun_job),
    ("9 overhead, nothing firing (inject / every site armed / budget vs plain)", overhead),
]


def header() -> str:
    import lightning

    card = (
        f"{torch.cuda.get_device_name(0)}, "
        f"{torch.cuda.get_device_properties(0).total_memory / GiB:.1f} GiB"
        if cuda()
        else "no GPU (--cpu: the harness on CPU)"
    )
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip() or os.environ.get(COMMIT_VARIABLE, "")
    return (
        f"{card}; torch {torch.__version__}, Lightning {lightning.__version__}, "
        f"Python {sys.version.split()[0]}, chaoslight {commit or 'unknown commit'}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="run the harness on CPU")
    parser.add_argument("--only", default="", metavar="N,M", help="these checks (default: all)")
    args = parser.parse_args()
    numbers = {int(n) for n in args.only.split(",") if n.strip()} or set(range(1, 10))
    if not args.cpu and not torch.cuda.is_available():
        print("gpu_check: no CUDA device here: nothing checked (--cpu runs the harness on CPU)")
        return 0
    os.environ[DEVICE_VARIABLE] = "cpu" if args.cpu else "cuda"
    # Away from the checkout: its chaoslight/ folder, first on the path of every `python -m`
    # the checks start (the World's fork servers, `chaoslight run`), would shadow the
    # installed package where the checkout is not installed (a wheel on a lent GPU machine).
    os.chdir(tempfile.gettempdir())
    warnings.filterwarnings("ignore")
    with contextlib.suppress(ImportError):  # both flavours' loggers exist once imported
        import lightning.pytorch  # noqa: F401
        import pytorch_lightning  # noqa: F401
    for name in list(logging.root.manager.loggerDict):
        if name.startswith(("lightning", "pytorch_lightning")):
            logging.getLogger(name).setLevel(logging.ERROR)  # no per-fit banners
    began = time.perf_counter()
    print(header() + "\n\n| check | result | seen |\n|---|---|---|")
    failed = False
    for name, check in [(name, check) for name, check in CHECKS if int(name[0]) in numbers]:
        start = time.perf_counter()
        try:
            status, seen = check()
        except Exception as exc:  # one check's failure is a row, not the end of the run
            status, seen = "FAILED", f"{type(exc).__name__}: {str(exc)[:200]}"
        failed |= status == "FAILED"
        seen = seen.replace("|", "/").replace("\n", " ")
        print(f"| {name} | {status} | {seen} ({time.perf_counter() - start:.0f} s) |", flush=True)
    print(f"\n{time.perf_counter() - began:.0f} s in all")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
