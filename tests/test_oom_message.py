"""The simulated OOM tells the truth about its device: a request that fails asks for more
than is free; on CUDA it gives the card's own numbers, under a budget the budget's."""

from __future__ import annotations

import io
import re
from typing import Any

import pytest
import torch

import chaoslight
from chaoslight import MemoryBudget, Schedule

UNITS = {"bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
NUMBERS = re.compile(
    r"Tried to allocate (?P<request>[\d.]+ \w+)\. GPU (?P<gpu>\d+) has a total capacity of "
    r"(?P<total>[\d.]+ \w+) of which (?P<free>[\d.]+ \w+) is free\. Of the allocated memory "
    r"(?P<allocated>[\d.]+ \w+) is allocated by PyTorch"
)


def numbers(message: str) -> dict[str, float]:
    """The byte counts a CUDA OOM message states (GPU: its index)."""
    found = NUMBERS.search(message)
    assert found is not None, message
    sizes = {k: v for k, v in found.groupdict().items() if k != "gpu"}
    parsed = {k: float(v.split()[0]) * UNITS[v.split()[1]] for k, v in sizes.items()}
    return {**parsed, "gpu": float(found["gpu"])}


def oom_at_save(schedule: Schedule) -> str:
    with chaoslight.inject(schedule), pytest.raises(torch.OutOfMemoryError) as caught:
        torch.save({"w": torch.ones(4)}, io.BytesIO())
    return str(caught.value)


@pytest.mark.parametrize("nbytes", ["1", "1000", "3MiB", "1GiB", "5TiB"])
def test_an_oom_fault_on_cpu_asks_for_more_than_its_device_has_free(nbytes: str) -> None:
    """oom@torch.save nbytes=N on a CPU run: the device it names has less free memory than
    N, and no more free than its total (the message could be true)."""
    said = numbers(oom_at_save(Schedule.parse(f"oom@torch.save nbytes={nbytes}")))
    assert said["free"] < said["request"], said
    assert said["allocated"] + said["free"] <= said["total"], said


def test_a_budget_oom_gives_the_budgets_numbers() -> None:
    """Under budget limit_bytes=4MiB with 3 MiB held, a 2 MiB request: 4 MiB total, 1 MiB
    free, 3 MiB allocated."""
    schedule = Schedule(
        [chaoslight.Allocate(site="torch.save", nbytes=3 * 2**20, hold_steps=None)],
        memory_budget=MemoryBudget(4 * 2**20),
    )
    with chaoslight.inject(schedule), pytest.raises(torch.OutOfMemoryError) as caught:
        torch.save({"w": torch.ones(4)}, io.BytesIO())
        torch.ones(2**19)  # 2 MiB of float32
    said = numbers(str(caught.value))
    assert (said["total"], said["free"], said["allocated"]) == (4 * 2**20, 2**20, 3 * 2**20)
    assert said["free"] < said["request"] == 2 * 2**20


class FakeCuda:
    """torch.cuda as a process with CUDA in use on a 139.8 GiB card reports it."""

    TOTAL, FREE = int(139.8 * 2**30), int(138.99 * 2**30)

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        values: dict[str, Any] = {
            "is_initialized": lambda: True,
            "current_device": lambda: 3,
            "mem_get_info": lambda device=None: (self.FREE, self.TOTAL),
            "memory_allocated": lambda device=None: 81 * 2**20,
            "memory_reserved": lambda device=None: 100 * 2**20,
        }
        for name, value in values.items():
            monkeypatch.setattr(torch.cuda, name, value)


def test_an_oom_fault_on_cuda_gives_the_cards_own_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a process that uses CUDA, the simulated OOM names the current device and its total
    and free memory (torch.cuda.mem_get_info), and what PyTorch holds of it."""
    FakeCuda(monkeypatch)
    message = oom_at_save(Schedule.parse("oom@torch.save nbytes=2GiB"))
    said = numbers(message)
    assert said["gpu"] == 3 and said["request"] == 2 * 2**30
    assert said["total"] == pytest.approx(FakeCuda.TOTAL, rel=1e-3)
    assert said["free"] == pytest.approx(FakeCuda.FREE, rel=1e-3)
    assert said["allocated"] == 81 * 2**20
    assert "and 19.00 MiB is reserved by PyTorch but unallocated" in message
