"""A memory budget on a CUDA device is the caching allocator's own limit (issue 31, item 2).

There is no GPU here: torch.cuda's memory-limit calls are replaced by a recorder with a
card's numbers, which is what CI can run of this path (``benchmarks/gpu_check.py`` runs it
on a card). What is asserted is what a user would see: the limit set on the rank's device
and put back, the CPU's counting gone, and an allocator OOM that names the budget, the rank,
the step and the program's line.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

import chaoslight
from chaoslight import MemoryBudget, Schedule
from chaoslight._runtime import _cpu_budget
from chaoslight._runtime._inject import active

GiB = 2**30
BUDGET = Schedule(memory_budget=MemoryBudget(20 * GiB))


class FakeCuda:
    """The memory-limit calls of torch.cuda, for two 80 GiB cards."""

    def __init__(self) -> None:
        self.fraction = {0: 1.0, 1: 1.0}
        self.calls: list[tuple[float, int]] = []
        self.initialized = True

    def is_initialized(self) -> bool:
        return self.initialized

    def get_device_properties(self, index: int) -> Any:
        return SimpleNamespace(total_memory=80 * GiB)

    def get_per_process_memory_fraction(self, index: int) -> float:
        return self.fraction[index]

    def set_per_process_memory_fraction(self, fraction: float, index: int) -> None:
        self.calls.append((fraction, index))
        self.fraction[index] = fraction

    def current_device(self) -> int:
        return 0


@pytest.fixture
def cuda(monkeypatch: pytest.MonkeyPatch) -> FakeCuda:
    fake = FakeCuda()
    for name in (
        "get_device_properties",
        "get_per_process_memory_fraction",
        "set_per_process_memory_fraction",
        "current_device",
        "is_initialized",
    ):
        monkeypatch.setattr(torch.cuda, name, getattr(fake, name))
    return fake


class Trainer:
    """What the engine reads of a Trainer: its callbacks and its strategy's root device."""

    def __init__(self, device: str) -> None:
        self.callbacks: list[Any] = []
        self.strategy = SimpleNamespace(root_device=torch.device(device))
        self.progress = SimpleNamespace(ready=0)  # batches begun: the step the engine reads
        self.fit_loop = SimpleNamespace(
            epoch_loop=SimpleNamespace(batch_progress=SimpleNamespace(total=self.progress))
        )


def counting_on_the_cpu() -> bool:
    """Whether the CPU's way of counting a budget is on: its allocator, or a dispatch mode."""
    allocator = _cpu_budget.counter()
    in_front = allocator is not None and allocator.installed()
    return in_front or bool(_get_current_dispatch_mode_stack())


def engine() -> Any:
    injection = active()
    assert injection is not None and injection.engine is not None
    return injection.engine


def test_a_trainer_on_a_cuda_device_hands_the_budget_to_the_allocator(cuda: FakeCuda) -> None:
    trainer = Trainer("cuda:1")
    with chaoslight.inject(BUDGET):
        assert counting_on_the_cpu()  # the CPU's way, until a device
        engine().saw_trainer(trainer)
        assert cuda.calls == [(0.25, 1)]  # 20 GiB of the 80 GiB card the rank trains on
        assert not counting_on_the_cpu()  # the card's allocator alone counts now
        assert engine().ledger.reserve(40 * GiB) is None  # the allocator refuses, not us
    assert cuda.fraction == {0: 1.0, 1: 1.0}  # what the process had, back


def test_before_cuda_is_initialised_the_limit_waits_for_the_step_to_move(
    cuda: FakeCuda,
) -> None:
    """A parent that forks its ranks (ddp_fork) sees the Trainer before any rank touched
    CUDA: asking the card then would initialise CUDA in it. The limit is set once CUDA is
    up and the step moves."""
    from chaoslight._sites._core import Behaviour

    cuda.initialized = False
    trainer = Trainer("cuda:1")
    with chaoslight.inject(BUDGET):
        engine().saw_trainer(trainer)
        assert cuda.calls == [] and counting_on_the_cpu()
        cuda.initialized = True  # the strategy moved the model to the card
        trainer.progress.ready = 1  # the first batch began
        assert engine().call("dist.barrier", lambda: 7, None, (), {}, Behaviour()) == 7
        assert cuda.calls == [(0.25, 1)] and not counting_on_the_cpu()
    assert cuda.fraction[1] == 1.0


def test_on_the_cpu_the_cpus_counting_keeps_the_budget(cuda: FakeCuda) -> None:
    trainer = Trainer("cpu")
    with chaoslight.inject(BUDGET):
        engine().saw_trainer(trainer)
        assert counting_on_the_cpu()
        assert engine().ledger.reserve(40 * GiB) == (0, 20 * GiB)
    assert cuda.calls == []


def test_without_a_budget_the_allocator_is_left_alone(cuda: FakeCuda) -> None:
    trainer = Trainer("cuda:0")
    with chaoslight.inject(Schedule()):
        engine().saw_trainer(trainer)
    assert cuda.calls == []


def test_a_loop_says_its_device_at_its_first_optimizer_step(cuda: FakeCuda) -> None:
    """No Trainer: the first optimizer step's parameters say where the loop trains."""
    on_card = SimpleNamespace(device=torch.device("cuda", 0))
    optimizer = SimpleNamespace(param_groups=[{"params": [on_card]}])
    with chaoslight.inject(BUDGET):
        engine().step_ended(optimizer)
        engine().step_ended(optimizer)
        assert cuda.calls == [(0.25, 0)]
    assert cuda.calls == [(0.25, 0), (1.0, 0)]


def allocate_too_much() -> None:
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB.")


def test_an_allocator_oom_leaving_inject_names_the_budget_rank_step_and_line(
    cuda: FakeCuda,
) -> None:
    trainer = Trainer("cuda:1")
    with pytest.raises(torch.OutOfMemoryError) as caught, chaoslight.inject(BUDGET):
        engine().saw_trainer(trainer)
        allocate_too_much()
    message = str(caught.value)
    assert message.startswith("CUDA out of memory. Tried to allocate 2.00 GiB. [MemoryBudget")
    assert "MemoryBudget on rank 0, before the first training step" in message
    assert f"{Path(__file__)}:" in message and "in allocate_too_much" in message
    assert "limit on GPU 1 is the budget's 20.00 GiB of its 80.00 GiB" in message


def test_an_oom_the_program_raised_from_is_named_in_the_chain(cuda: FakeCuda) -> None:
    trainer = Trainer("cuda:0")
    with pytest.raises(RuntimeError) as caught, chaoslight.inject(BUDGET):
        engine().saw_trainer(trainer)
        try:
            allocate_too_much()
        except torch.OutOfMemoryError as oom:
            raise RuntimeError("training failed") from oom
    assert str(caught.value) == "training failed"
    assert "MemoryBudget on rank 0" in str(caught.value.__cause__)


def test_an_oom_without_the_allocators_limit_is_left_as_it_was(cuda: FakeCuda) -> None:
    trainer = Trainer("cpu")
    with pytest.raises(torch.OutOfMemoryError) as caught, chaoslight.inject(BUDGET):
        engine().saw_trainer(trainer)
        allocate_too_much()
    assert str(caught.value) == "CUDA out of memory. Tried to allocate 2.00 GiB."
