"""The per-step summaries behind the checks: what they detect, and that nothing outlives a fit.

Speed is measured in ``benchmarks/checks_overhead.py``, never here.
"""

from __future__ import annotations

import json
import math
import types
from typing import Any

import pytest
import torch
from helpers import fit, tiny_model

import chaoslight
from chaoslight import Event, Schedule
from chaoslight._checks import _invariants
from chaoslight._checks._finite import all_finite
from chaoslight._checks._invariants import BLOCK_CPU, checksums, summaries
from chaoslight._runtime._evidence import OBSERVATION
from chaoslight._runtime._inject import active
from chaoslight.checks import DisjointShards, Evidence, FiniteGrads, FiniteLoss, ReplicasInSync

# One tensor per path: a single small block, an odd size, and one spanning blocks whose
# last block is short.
SIZES = (1000, 4097, 2 * BLOCK_CPU + 12345)


def _tensor(size: int, seed: int) -> torch.Tensor:
    return torch.randn(size, generator=torch.Generator().manual_seed(seed))


def _one_ulp(tensor: torch.Tensor, index: int, up: bool = True) -> torch.Tensor:
    changed = tensor.clone()
    towards = torch.tensor(math.inf if up else -math.inf)
    changed[index] = torch.nextafter(changed[index], towards)
    assert changed[index] != tensor[index]
    return changed


def _positions(size: int, seed: int) -> list[int]:
    """The ends, each block boundary and 40 random positions of a tensor of ``size``."""
    edges = {0, 1, size - 1} | {b + d for b in range(BLOCK_CPU, size, BLOCK_CPU) for d in (-1, 0)}
    chosen = torch.randint(0, size, (40,), generator=torch.Generator().manual_seed(seed))
    return sorted(edges | set(chosen.tolist()))


@pytest.mark.parametrize("size", SIZES)
def test_one_ulp_change_anywhere_moves_the_float_sums_and_the_bits(size: int) -> None:
    """A one-ulp change of one float32 element changes the float64 sums and the bit sum."""
    tensor = _tensor(size, seed=size)
    (before,) = summaries([tensor], bits=True)
    for n, index in enumerate(_positions(size, seed=size + 1)):
        (after,) = summaries([_one_ulp(tensor, index, up=n % 2 == 0)], bits=True)
        assert after[:2] != before[:2], f"float sums missed element {index}"
        assert after[2] != before[2], f"bit sum missed element {index}"


def test_every_element_of_a_small_tensor_is_covered() -> None:
    """In a 1000-element tensor, a one-ulp change of each element in turn moves the sums."""
    tensor = _tensor(1000, seed=7)
    (before,) = summaries([tensor], bits=True)
    for index in range(tensor.numel()):
        (after,) = summaries([_one_ulp(tensor, index)], bits=True)
        assert after[:2] != before[:2] and after[2] != before[2], index


def test_the_bit_sum_catches_what_float_sums_round_away() -> None:
    """An element 2**40 times smaller than its neighbours: the bit sum still sees its last ulp."""
    tensor = _tensor(4096, seed=3)
    tensor[100] = 1e-12
    (before,) = summaries([tensor], bits=True)
    (after,) = summaries([_one_ulp(tensor, 100)], bits=True)
    assert after[2] != before[2]


@pytest.mark.parametrize("size", SIZES)
def test_swapping_two_different_elements_moves_the_weighted_sum(size: int) -> None:
    """Swapping two different elements (adjacent, in one block, across blocks) is caught."""
    tensor = _tensor(size, seed=size + 2)
    (before,) = checksums(types.SimpleNamespace(named_parameters=lambda: [("w", tensor)]))[1]
    chosen = torch.randint(0, size, (30, 2), generator=torch.Generator().manual_seed(size))
    pairs = [(0, 1), (size - 2, size - 1), *[tuple(p) for p in chosen.tolist()]]
    for first, second in pairs:
        if tensor[first] == tensor[second]:
            continue
        swapped = tensor.clone()
        swapped[first], swapped[second] = tensor[second], tensor[first]
        (after,) = summaries([swapped])
        assert after != before, f"swap of {first} and {second} missed"


@pytest.mark.parametrize("size", SIZES)
def test_block_sums_add_up_to_the_whole_tensor_sums(size: int) -> None:
    """The blockwise sums equal a float64 sum and position-weighted dot over the whole tensor."""
    tensor = _tensor(size, seed=11)
    (total, weighted) = summaries([tensor])[0]
    flat = tensor.double()
    weights = torch.arange(1, size + 1, dtype=torch.float64)
    assert total == pytest.approx(flat.sum().item(), rel=1e-12, abs=1e-9)
    assert weighted == pytest.approx(torch.dot(flat, weights).item(), rel=1e-12)


@pytest.mark.parametrize("size", SIZES)
def test_summaries_do_not_depend_on_where_the_tensor_lives(size: int) -> None:
    """The same values at an unaligned offset, non-contiguous, or as float64 sum identically."""
    tensor = _tensor(size, seed=5)
    padded = torch.cat([torch.zeros(1), tensor])[1:]  # storage offset 4 bytes: unaligned
    strided = torch.stack([tensor, tensor], dim=1)[:, 0]  # a non-contiguous view
    expected = summaries([tensor], bits=True)[0]
    assert summaries([padded, strided, tensor.double()], bits=True) == [expected] * 3


def test_empty_complex_and_integer_tensors_are_summarised() -> None:
    """An empty tensor sums to zeros; complex and integer tensors get real sums too."""
    empty, ints = torch.zeros(0), torch.arange(5)
    complex_ = torch.tensor([1 + 2j, 3 - 1j])
    got = summaries([empty, ints, complex_], bits=True)
    assert got[0] == [0.0, 0.0, 0]
    assert got[1][:2] == [10.0, 40.0]
    assert got[2][:2] == [5.0, 1 * 1 + 2 * 2 + 3 * 3 - 1 * 4]


def _replica_events(facts_by_rank: dict[int, dict[str, Any]]) -> Evidence:
    events = [
        Event(OBSERVATION, "replicas-in-sync", rank, 3, 0.0, 0.0, detail=json.dumps(facts))
        for rank, facts in facts_by_rank.items()
    ]
    return Evidence(events)


def _replica_facts(tensor: torch.Tensor) -> dict[str, Any]:
    return {"names": ["w"], "sums": summaries([tensor], bits=True), "sizes": [tensor.numel()]}


def test_replicas_in_sync_compares_the_bits() -> None:
    """One differing ulp between ranks fails ReplicasInSync; identical NaN weights do not."""
    tensor = _tensor(4096, seed=9)
    same = _replica_events({0: _replica_facts(tensor), 1: _replica_facts(tensor.clone())})
    assert ReplicasInSync().judge(same) == []
    nudged = _replica_events({0: _replica_facts(tensor), 1: _replica_facts(_one_ulp(tensor, 77))})
    (violation,) = ReplicasInSync().judge(nudged)
    assert violation.rank == 1 and violation.step == 3 and "'w'" in violation.message
    poisoned = tensor.clone()
    poisoned[5] = math.nan
    nans = _replica_events({0: _replica_facts(poisoned), 1: _replica_facts(poisoned.clone())})
    assert ReplicasInSync().judge(nans) == []  # NaN sums, equal bits: in sync
    apart = _replica_events({0: _replica_facts(poisoned), 1: _replica_facts(_one_ulp(poisoned, 9))})
    assert len(ReplicasInSync().judge(apart)) == 1


def test_replicas_apart_are_explained_by_optimizer_steps_or_learning_rates() -> None:
    """When replicas part, a rank that took fewer optimizer steps, or ran another learning
    rate, is named as the cause; without either, the usual suspects are."""
    tensor, apart = _tensor(64, seed=3), _one_ulp(_tensor(64, seed=3), 7)

    def judged(mine: dict[str, Any], theirs: dict[str, Any]) -> str:
        evidence = _replica_events(
            {0: {**_replica_facts(tensor), **mine}, 1: {**_replica_facts(apart), **theirs}}
        )
        (violation,) = ReplicasInSync().judge(evidence)
        return violation.cause

    skipped = judged({"optimizer_steps": 4, "lrs": [0.1]}, {"optimizer_steps": 3, "lrs": [0.1]})
    assert "different numbers of optimizer steps (by step 3: rank 0 4, rank 1 3)" in skipped
    rates = judged({"optimizer_steps": 4, "lrs": [0.1]}, {"optimizer_steps": 4, "lrs": [0.05]})
    assert "learning rates differ (by step 3: rank 0 [0.1], rank 1 [0.05])" in rates
    plain = judged({"optimizer_steps": 4, "lrs": [0.1]}, {"optimizer_steps": 4, "lrs": [0.1]})
    assert plain == ReplicasInSync.cause


def test_a_differing_buffer_is_called_a_buffer() -> None:
    """With buffers compared, the report says which kind of tensor parted."""
    weight, stats = _tensor(8, seed=1), _tensor(8, seed=2)

    def facts(buffer: torch.Tensor) -> dict[str, Any]:
        sums = summaries([weight, buffer], bits=True)
        return {"names": ["w", "running_mean"], "sums": sums, "sizes": [8, 8], "parameters": 1}

    evidence = _replica_events({0: facts(stats), 1: facts(_one_ulp(stats, 3))})
    (violation,) = ReplicasInSync(buffers=True).judge(evidence)
    assert violation.message.startswith("buffer 'running_mean' differs between rank 0 and rank 1")


def test_finite_grads_confirms_an_overflowing_norm_before_reporting() -> None:
    """Huge finite gradients overflow the fused norm but are not reported; a NaN one is."""
    huge = torch.full((64,), 1e30)
    assert not all_finite([huge])  # the fused norm overflowed: only a hint
    module = torch.nn.Linear(8, 8)
    module.weight.grad = huge.reshape(8, 8)
    module.bias.grad = torch.zeros(8)
    observer = FiniteGrads().observer()
    trainer = types.SimpleNamespace()
    with chaoslight.inject(Schedule()) as run:
        observer.on_before_optimizer_step(trainer, module, None)
        module.bias.grad[3] = math.nan
        observer.on_before_optimizer_step(trainer, module, None)
    (event,) = [e for e in run.events if e.kind == OBSERVATION]
    assert json.loads(event.detail) == {"parameter": "bias"}


def _held_tensors(root: Any) -> list[torch.Tensor]:
    """Tensors reachable from ``root`` through containers, attributes and closures."""
    found, seen, stack = [], set(), [root]
    while stack:
        item = stack.pop()
        if id(item) in seen or isinstance(item, (str, bytes, int, float, type(None))):
            continue
        seen.add(id(item))
        if isinstance(item, torch.Tensor):
            found.append(item)
        elif isinstance(item, dict):
            stack += list(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack += list(item)
        elif isinstance(item, types.FunctionType):
            stack += [cell.cell_contents for cell in item.__closure__ or ()]
        elif isinstance(item, types.ModuleType) and item is root:  # its globals, not imports
            stack += [v for v in vars(item).values() if not isinstance(v, types.ModuleType)]
        elif isinstance(item, type) and item.__module__ == "chaoslight._checks._base":
            stack += [v for v in vars(item).values() if isinstance(v, types.FunctionType)]
        elif type(item).__module__.startswith("chaoslight"):
            stack += [type(item), *vars(item).values()]
    return found


@pytest.mark.usefixtures("lightning_in_process")
def test_no_chaoslight_held_tensor_outlives_the_fit() -> None:
    """The checks' caches are used during a fit and empty after it; the module keeps none."""
    checks = [ReplicasInSync(), DisjointShards(), FiniteGrads(), FiniteLoss()]
    held_during: list[int] = []

    def during(model: Any, step: int) -> None:
        injection = active()
        assert injection is not None and injection.engine is not None
        held_during.append(len(_held_tensors(injection.engine.callbacks)))

    injection = chaoslight.inject(Schedule(), checks=checks)
    with injection:
        fit(tiny_model(step_hook=during), max_steps=3)
    assert injection.engine is not None
    assert held_during[-1] > 0  # DisjointShards' multipliers, kept for the fit
    assert _held_tensors(injection.engine.callbacks) == []
    assert _held_tensors(_invariants) == []
    assert _held_tensors(checks) == []
