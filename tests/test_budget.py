"""Allocate and MemoryBudget: simulated device memory that runs out on a CPU machine.

The budget sees every storage the user's code makes, not only factory calls:
``torch.cat``, ``a @ b``, ``.repeat``, ``new_zeros``, ``torch.tensor``, the backward's
gradients. Each in-process test runs twice: counted by chaoslight's CPU allocator (the
default, ``_cpu_budget``) and by the dispatch mode (where no allocator can be built).
"""

from __future__ import annotations

import io
import multiprocessing
import os
import re
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import fit, tiny_loader, tiny_model, tiny_trainer
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack
from torch.utils.data import DataLoader, Dataset

import chaoslight
from chaoslight import Allocate, MemoryBudget, Schedule
from chaoslight._runtime import _cpu_budget
from chaoslight._runtime._cpu_budget import ALLOCATOR, OPS

# Ranks are read from $RANK and friends: none set, unless a test sets one.
pytestmark = pytest.mark.usefixtures("rank_env", "lightning_in_process", "counted_by")

MiB = 2**20
OOM_PREFIX = "CUDA out of memory. Tried to allocate"


@pytest.fixture(params=[ALLOCATOR, OPS])
def counted_by(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """How this test's budget is counted: the CPU allocator, or the dispatch mode."""
    if request.param == OPS:
        monkeypatch.setattr(_cpu_budget, "counter", lambda: None)
    elif _cpu_budget.counter() is None:
        pytest.fail(f"chaoslight's CPU allocator does not load: {_cpu_budget.how_counted()[1]}")
    return str(request.param)


def allocating(nbytes: int) -> tuple[Any, dict[int, str]]:
    """A step_hook that makes a ``nbytes`` torch.randn each step; and its per-step outcome."""
    outcome: dict[int, str] = {}

    def hook(model: Any, step: int) -> None:
        try:
            block = torch.randn(nbytes // 4)
        except torch.OutOfMemoryError as exc:
            outcome[step] = str(exc)
        else:
            outcome[step] = "ok"
            del block

    return hook, outcome


def test_allocate_holds_memory_for_hold_steps_then_releases_it() -> None:
    """Allocate(hold_steps=2) at step 1 fills the budget during steps 1-2, and frees it at 3."""
    hook, outcome = allocating(2 * MiB)
    fault = Allocate(site="lightning.training_step", step=1, nbytes=3 * MiB, hold_steps=2)
    schedule = Schedule([fault], memory_budget=MemoryBudget(4 * MiB))
    with chaoslight.inject(schedule) as run:
        fit(tiny_model(step_hook=hook), max_steps=5)
    assert [step for step, text in outcome.items() if text != "ok"] == [1, 2]
    assert outcome[1].startswith(f"{OOM_PREFIX} 2.00 MiB. GPU 0 has a total capacity of 4.00 MiB")
    assert [(e.kind, e.step) for e in run.events] == [("fired", 1), ("released", 3)]
    assert run.events[1].fault == str(fault)
    assert run.events[1].detail == f"{3 * MiB} bytes"


def test_allocate_without_a_budget_fires_and_releases() -> None:
    """Without a budget an Allocate still fires and is released hold_steps later."""
    fault = Allocate(site="lightning.training_step", step=0, nbytes=MiB, hold_steps=3)
    with chaoslight.inject(fault) as run:
        fit(max_steps=5)
    assert [(e.kind, e.step) for e in run.events] == [("fired", 0), ("released", 3)]


def test_allocate_held_until_the_end_is_released_on_exit() -> None:
    """hold_steps=None keeps the memory until the inject block ends, with no release event."""
    hook, outcome = allocating(2 * MiB)
    fault = Allocate(site="lightning.training_step", step=1, nbytes=3 * MiB, hold_steps=None)
    with chaoslight.inject(Schedule([fault], memory_budget=MemoryBudget(4 * MiB))) as run:
        fit(tiny_model(step_hook=hook), max_steps=4)
    assert [s for s, text in outcome.items() if text != "ok"] == [1, 2, 3]
    assert [e.kind for e in run.events] == ["fired"]
    with chaoslight.inject(Schedule(memory_budget=MemoryBudget(4 * MiB))):
        torch.empty(3 * MiB // 4)  # a new injection starts from an empty budget


@pytest.mark.parametrize(
    ("holds", "released"),
    [((2, 2), [(2, 0), (3, 1)]), ((3, 1), [(2, 1), (3, 0)])],
    ids=["first-allocated-released-first", "last-allocated-released-first"],
)
def test_two_equal_holds_are_released_in_either_order(
    holds: tuple[int, int], released: list[tuple[int, int]]
) -> None:
    """Two Allocate holds of one size (at steps 0 and 1) are released in either order."""
    hook, outcome = allocating(5 * MiB // 2)
    first, second = (
        Allocate(site="lightning.training_step", step=step, nbytes=MiB, hold_steps=hold)
        for step, hold in zip((0, 1), holds, strict=True)
    )
    schedule = Schedule([first, second], memory_budget=MemoryBudget(4 * MiB))
    with chaoslight.inject(schedule) as run:
        fit(tiny_model(step_hook=hook), max_steps=5)
    faults = [str(first), str(second)]
    assert [(e.step, faults.index(e.fault)) for e in run.events if e.kind == "released"] == released
    # 2.5 MiB fits beside one 1 MiB hold, not beside two: only step 1 held both.
    assert [step for step, text in outcome.items() if text != "ok"] == [1]


def test_allocate_over_the_budget_raises_the_simulated_oom() -> None:
    """An Allocate bigger than what is left of the budget raises torch.OutOfMemoryError."""
    fault = Allocate(site="lightning.training_step", step=1, nbytes=9 * MiB)
    model = tiny_model()
    with (
        chaoslight.inject(Schedule([fault], memory_budget=MemoryBudget(8 * MiB))) as run,
        pytest.raises(torch.OutOfMemoryError) as caught,
    ):
        fit(model, max_steps=4)
    assert str(caught.value).startswith(f"{OOM_PREFIX} 9.00 MiB. GPU 0 has a total capacity")
    assert [(e.kind, e.site, e.step) for e in run.events] == [
        ("fired", "lightning.training_step", 1)
    ]
    assert [step for step, _ in model.batches] == [0]


@pytest.mark.parametrize(("rank", "runs_out"), [("0", False), ("1", True), ("2", False)])
def test_budget_oom_only_on_the_rank_holding_memory(
    rank_env: pytest.MonkeyPatch, rank: str, runs_out: bool
) -> None:
    """With rank 1 holding 6 of 8 MiB, a user's 4 MiB torch.randn runs out on rank 1 only."""
    rank_env.setenv("RANK", rank)
    hook, outcome = allocating(4 * MiB)
    fault = Allocate(
        site="lightning.training_step", rank=1, step=0, nbytes=6 * MiB, hold_steps=None
    )
    with chaoslight.inject(Schedule([fault], memory_budget=MemoryBudget(8 * MiB))) as run:
        fit(tiny_model(step_hook=hook), max_steps=2)
    assert [e.rank for e in run.fired()] == ([1] if runs_out else [])
    assert [text.startswith(OOM_PREFIX) for text in outcome.values()] == [runs_out, runs_out]
    assert all(f" GPU {rank} " in text for text in outcome.values() if text != "ok")


def test_freed_tensors_give_their_bytes_back() -> None:
    """Under a budget, deleting a tensor frees its bytes: the next allocation then succeeds."""
    with chaoslight.inject(Schedule(memory_budget=MemoryBudget(8 * MiB))):
        first = torch.randn(6 * MiB // 4)
        with pytest.raises(torch.OutOfMemoryError, match=f"^{OOM_PREFIX} 4.00 MiB"):
            torch.zeros(MiB, dtype=torch.float32)
        with pytest.raises(torch.OutOfMemoryError):
            torch.ones_like(first)
        del first
        second = torch.zeros(MiB)
        third = torch.full((MiB // 4,), 1.0)
        assert second.numel() == MiB and third.numel() == MiB // 4


def test_small_tensors_are_not_counted() -> None:
    """Tensors below min_tracked_bytes never count against the budget."""
    budget = MemoryBudget(limit_bytes=MiB, min_tracked_bytes=MiB // 2)
    with chaoslight.inject(Schedule(memory_budget=budget)):
        kept = [torch.empty(MiB // 16) for _ in range(64)]  # 64 x 256 KiB, none tracked
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(MiB // 2)  # 2 MiB: tracked, over the 1 MiB limit
    assert len(kept) == 64


def test_budget_does_not_outlive_the_injection() -> None:
    """After the inject block, allocations of any size are plain torch again."""
    with chaoslight.inject(Schedule(memory_budget=MemoryBudget(MiB))):
        torch.save(1, io.BytesIO())
    big = torch.empty(4 * MiB)
    assert big.numel() == 4 * MiB


# -- every storage, not only factory calls ----------------------------------------------

FLOATS_PER_MiB = MiB // 4
HOW = re.escape(" (counted by chaoslight's CPU allocator)")


def budget(limit_bytes: int, min_tracked_bytes: int = 1) -> Schedule:
    """A schedule with only a budget; by default every storage counts, however small."""
    return Schedule(memory_budget=MemoryBudget(limit_bytes, min_tracked_bytes))


def dispatch_modes() -> list[Any]:
    """The torch dispatch modes pushed on this thread, innermost last."""
    return list(_get_current_dispatch_mode_stack())


MAKERS: dict[str, Callable[[], Any]] = {
    "cat": lambda: torch.cat([torch.ones(FLOATS_PER_MiB // 2)] * 4),
    "matmul": lambda: torch.ones(512, 128) @ torch.ones(128, 1024),
    "repeat": lambda: torch.ones(FLOATS_PER_MiB // 2).repeat(4),
    "new_zeros": lambda: torch.ones(4).new_zeros(2 * FLOATS_PER_MiB),
    "tensor_from_list": lambda: torch.tensor([0.0] * (2 * FLOATS_PER_MiB)),
}


@pytest.mark.parametrize("make", MAKERS.values(), ids=MAKERS.keys())
def test_tensors_made_by_any_op_count(make: Callable[[], Any]) -> None:
    """A 2 MiB result of cat, @, repeat, new_zeros or torch.tensor counts: it fits in 3 MiB
    beside its (under 1 MiB of) inputs, and runs out of a budget one byte short of 2 MiB."""
    with chaoslight.inject(budget(3 * MiB)):
        assert make().nbytes == 2 * MiB
    with (
        chaoslight.inject(budget(2 * MiB - 1)),
        pytest.raises(torch.OutOfMemoryError, match=f"^{OOM_PREFIX} 2.00 MiB"),
    ):
        make()


def test_views_and_in_place_ops_are_not_counted_twice() -> None:
    """Views, in-place ops and out= of a counted tensor, or of one made before the budget,
    take nothing more: the rest of the budget is still free to the byte."""
    made_before = torch.ones(4 * FLOATS_PER_MiB)
    views: list[Any] = []
    with chaoslight.inject(budget(4 * MiB)):
        counted = torch.ones(2 * FLOATS_PER_MiB)
        for tensor in (counted, made_before):
            views += [tensor.view(-1, 4), tensor[::2], tensor.reshape(2, -1), tensor.detach()]
            views += [tensor.unsqueeze(0).expand(3, -1), tensor.as_strided((8,), (2,))]
            tensor.add_(1).mul_(2).zero_()
            torch.add(tensor, 1, out=tensor)
        rest = torch.empty(2 * FLOATS_PER_MiB)  # the other 2 MiB fit exactly
        with pytest.raises(torch.OutOfMemoryError, match=f"^{OOM_PREFIX} 4 bytes"):
            torch.empty(1)
    assert len(views) == 12 and rest.nbytes == counted.nbytes == 2 * MiB


def test_a_freed_storage_gives_its_bytes_back_when_its_last_view_goes() -> None:
    """A cat's 2 MiB stay counted while a view of it lives, and come back once it is gone."""
    with chaoslight.inject(budget(3 * MiB)):
        block = torch.ones(FLOATS_PER_MiB)
        first = torch.cat([block, block])
        view = first[:1]
        del first
        with pytest.raises(torch.OutOfMemoryError):
            torch.cat([block, block])
        del view
        again = torch.cat([block, block])
    assert again.nbytes == 2 * MiB


def grow(kept: list[Any], block: Any) -> None:
    """The user's code that makes the rank-specific extra (the frame a report names)."""
    kept.append(torch.cat([block, block]))


def test_budget_oom_names_rank_step_user_frame_request_used_and_limit(counted_by: str) -> None:
    """Inside a fit, a torch.cat over the budget raises the CUDA-shaped OOM from the user's
    frame, naming the rank, step, that frame, the request, what is used and the limit."""
    kept: list[Any] = []
    block = torch.ones(FLOATS_PER_MiB // 2)  # 0.5 MiB: under min_tracked_bytes, not counted
    model = tiny_model(step_hook=lambda model, step: grow(kept, block))
    schedule = Schedule(memory_budget=MemoryBudget(5 * MiB // 2))  # default min: 1 MiB
    with chaoslight.inject(schedule), pytest.raises(torch.OutOfMemoryError) as caught:
        fit(model, max_steps=4)
    message = str(caught.value)
    assert message.startswith(f"{OOM_PREFIX} 1.00 MiB. GPU 0 has a total capacity of 2.50 MiB")
    where = rf"{re.escape(__file__)}:\d+ in grow"
    what, how = (r"aten\.cat\S*", "") if counted_by == OPS else ("an allocation", HOW)
    assert re.search(
        rf"MemoryBudget on rank 0, step 2: {what} at {where} requested 1\.00 MiB; "
        rf"2\.00 MiB used of the 2\.50 MiB limit{how}\]$",
        message,
    ), message
    frames = traceback.extract_tb(caught.value.__traceback__)
    assert "grow" in [frame.name for frame in frames]
    assert [step for step, _ in model.batches] == [0, 1, 2] and len(kept) == 2


def test_gradients_made_by_backward_count() -> None:
    """The backward's gradients count: two 1 MiB partial gradients run out of 1.5 MiB."""
    weights = torch.ones(FLOATS_PER_MiB, requires_grad=True)  # made before: not counted
    with chaoslight.inject(budget(3 * MiB // 2)):
        loss = (weights * weights).sum()  # the 1 MiB product is freed by the sum
        with pytest.raises(torch.OutOfMemoryError) as caught:
            loss.backward()
    assert " in test_gradients_made_by_backward_count requested 1.00 MiB" in str(caught.value)


class _TwoBigTensors(Dataset):  # type: ignore[type-arg]
    """Each item makes 6 MiB in the DataLoader worker; returns whether it saw a mode."""

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: int) -> Any:
        kept = [torch.ones(3 * FLOATS_PER_MiB), torch.ones(3 * FLOATS_PER_MiB)]
        return torch.tensor([len(dispatch_modes()), len(kept)])


# Python 3.12+ warns that fork() in a multi-threaded process may deadlock: this one doesn't.
@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")
def test_other_threads_and_dataloader_worker_processes_do_not_count() -> None:
    """Tensors made in another thread or in a forked DataLoader worker never count (nor does
    the worker keep the dispatch mode)."""
    made: list[Any] = []
    with chaoslight.inject(budget(MiB)):
        thread = threading.Thread(target=lambda: made.append(torch.ones(4 * FLOATS_PER_MiB)))
        thread.start()
        thread.join()
        loader = DataLoader(_TwoBigTensors(), num_workers=1, multiprocessing_context="fork")
        (seen,) = list(loader)
    assert made[0].nbytes == 4 * MiB
    assert seen.tolist() == [[0, 2]]  # no mode in the worker, and no OOM either


def _exit_0_if_a_cat_runs_out() -> None:
    """In a forked child: exit 0 if the inherited 2 MiB budget stops a 2 MiB torch.cat."""
    torch.set_num_threads(1)  # the parent's OpenMP pool is gone: a parallel fill would hang
    block = torch.ones(FLOATS_PER_MiB)
    try:
        torch.cat([block, block])
    except torch.OutOfMemoryError:
        os._exit(0)
    os._exit(1)


@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")
def test_a_process_forked_outside_a_dataloader_keeps_its_budget() -> None:
    """A rank forked from the training process (Lightning's ddp_fork) keeps counting."""
    with chaoslight.inject(budget(2 * MiB)):
        child = multiprocessing.get_context("fork").Process(target=_exit_0_if_a_cat_runs_out)
        child.start()
        child.join(timeout=60)
    if child.exitcode is None:
        child.kill()  # a hung child fails the test, it does not hang the suite
    assert child.exitcode == 0


class _UserMode(TorchDispatchMode):
    """A user's own dispatch mode, passing every op through."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return func(*args, **(kwargs or {}))


def test_a_dispatch_mode_only_while_a_budget_is_counted_by_ops(counted_by: str) -> None:
    """No budget, no dispatch mode at all; with one counted by ops, exactly one (by the
    allocator, none), gone after the block whether it ends normally or by an exception,
    and a mode the user left on top survives."""
    with chaoslight.inject(Schedule()):
        assert dispatch_modes() == []
    with chaoslight.inject(budget(MiB)):
        assert len(dispatch_modes()) == (1 if counted_by == OPS else 0)
    assert dispatch_modes() == []
    with pytest.raises(ValueError, match="boom"), chaoslight.inject(budget(MiB)):
        raise ValueError("boom")
    assert dispatch_modes() == []
    user_mode = _UserMode()
    with chaoslight.inject(budget(MiB)):
        user_mode.__enter__()  # and never left
    try:
        assert dispatch_modes() == [user_mode]
    finally:
        user_mode.__exit__(None, None, None)


def rank_0_hoards() -> None:
    """World target: a 2-rank DDP fit in which rank 0 alone keeps a 1 MiB torch.cat per step."""
    kept: list[Any] = []
    block = torch.ones(FLOATS_PER_MiB // 2)

    def hook(model: Any, step: int) -> None:
        if model.trainer.global_rank == 0:
            grow(kept, block)

    world = int(os.environ["WORLD_SIZE"])
    trainer = tiny_trainer(max_steps=4, devices=world, strategy="ddp")
    trainer.fit(tiny_model(step_hook=hook), tiny_loader())


@pytest.mark.slow
@pytest.mark.parametrize("counted_by", [ALLOCATOR], indirect=True)  # as the ranks count
def test_a_rank_0_extra_made_by_torch_cat_runs_rank_0_out_of_budget(world2: Any) -> None:
    """In a 2-rank DDP fit, rank 0's torch.cat extras run it out of budget at step 2; rank 1,
    which makes none, does not run out."""
    target = f"{Path(__file__).resolve()}:rank_0_hoards"
    schedule = Schedule(memory_budget=MemoryBudget(5 * MiB // 2))
    outcome = world2.run(target, schedule, timeout=30)
    error = outcome.ranks[0].exception
    assert error is not None and error.type == "OutOfMemoryError", outcome.report()
    assert "MemoryBudget on rank 0, step 2: an allocation" in error.message
    assert re.search(r"test_budget\.py:\d+ in grow requested 1\.00 MiB", error.message)
    other = outcome.ranks[1].exception
    assert other is None or other.type != "OutOfMemoryError", outcome.report()


# -- counted by the allocator --------------------------------------------------------------


@pytest.mark.parametrize("counted_by", [ALLOCATOR], indirect=True)
def test_the_allocator_counts_what_a_device_would_and_ops_do_not_see() -> None:
    """A storage grown in place (``resize_``) and an op's temporaries count, as on a card;
    chaoslight's own calls do not."""
    with chaoslight.inject(budget(MiB)):
        grown = torch.empty(0)
        with pytest.raises(torch.OutOfMemoryError, match=f"^{OOM_PREFIX} 2.00 MiB"):
            grown.resize_(2 * FLOATS_PER_MiB)
        engine = chaoslight._sites.STATE.dispatcher
        with engine.internal():
            own = torch.ones(4 * FLOATS_PER_MiB)  # chaoslight's: never counted
        with pytest.raises(torch.OutOfMemoryError):
            torch.ones(2 * FLOATS_PER_MiB)  # the user's, still counted after it
    assert own.nbytes == 4 * MiB


@pytest.mark.parametrize("counted_by", [ALLOCATOR], indirect=True)
def test_torch_has_its_own_allocator_back_after_the_block() -> None:
    """The allocator stands in front of torch's only inside ``inject``; a tensor counted
    inside and freed after gives nothing back to a later budget."""
    allocator = _cpu_budget.counter()
    assert allocator is not None and not allocator.installed()
    with chaoslight.inject(budget(3 * MiB)):
        assert allocator.installed()
        kept = torch.ones(2 * FLOATS_PER_MiB)
    assert not allocator.installed()
    with chaoslight.inject(budget(3 * MiB)):
        del kept  # counted by the budget before: this one's count stays at 0
        assert allocator.used() == 0
        torch.ones(2 * FLOATS_PER_MiB)  # 2 MiB of 3: fits
    with pytest.raises(ValueError, match="boom"), chaoslight.inject(budget(MiB)):
        raise ValueError("boom")
    assert not allocator.installed()


def test_how_a_cpu_budget_is_counted_follows_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``CHAOSLIGHT_CPU_BUDGET=ops`` asks for the dispatch mode; a value that is neither
    is named, and counted by ops."""
    try:
        for value, expected in (
            ("ops", (OPS, "CHAOSLIGHT_CPU_BUDGET=ops asks for it")),
            ("gpu", (OPS, "CHAOSLIGHT_CPU_BUDGET='gpu' is neither 'allocator' nor 'ops'")),
            ("allocator", (ALLOCATOR, "")),
        ):
            monkeypatch.setenv(_cpu_budget.MECHANISM_VARIABLE, value)
            _cpu_budget._load.cache_clear()
            assert _cpu_budget.how_counted() == expected
    finally:
        monkeypatch.undo()
        _cpu_budget._load.cache_clear()


def test_the_allocator_is_built_privately_and_not_loaded_from_a_shared_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build lands in the user's own cache, named by what it was built from; a cache
    folder others may write is refused (code is loaded from it)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = _cpu_budget.library_path()
    assert path.parent == tmp_path / "chaoslight" and path.name.startswith("cpu_budget-")
    _cpu_budget.build(path)
    assert path.exists() and not list(path.parent.glob("*.partial"))
    path.parent.chmod(0o777)
    with pytest.raises(RuntimeError, match="not private to this user"):
        _cpu_budget.build(path)


@pytest.mark.parametrize("counted_by", [ALLOCATOR], indirect=True)
def test_a_world_builds_the_allocator_before_its_ranks_need_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``prebuild`` (a World's ``run`` under a budget) leaves the built allocator where the
    ranks look, so none builds it inside its example's time; with ``ops`` it builds none."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    try:
        for mechanism, built in ((OPS, False), (ALLOCATOR, True)):
            monkeypatch.setenv(_cpu_budget.MECHANISM_VARIABLE, mechanism)
            _cpu_budget._load.cache_clear()
            _cpu_budget.prebuild()
            assert _cpu_budget.library_path().exists() is built, mechanism
    finally:
        monkeypatch.undo()
        _cpu_budget._load.cache_clear()  # the next test loads this machine's own build


@pytest.mark.parametrize("counted_by", [ALLOCATOR], indirect=True)
def test_a_replay_says_when_this_machine_counts_a_budget_another_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A budget's OOM replays exactly where it is counted as the run counted it: the replay
    names the other way, and how to count as the run did; nothing when they agree."""
    by_allocator = (
        f"MemoryBudget on rank 0, step 2: an allocation at f.py:3 ({_cpu_budget.COUNTED_HERE})"
    )
    by_ops = "MemoryBudget on rank 0, step 2: aten.cat.default at f.py:3 requested 1.00 MiB"
    assert _cpu_budget.replay_note(by_allocator) is None
    assert "CHAOSLIGHT_CPU_BUDGET=ops to count as the run did" in str(
        _cpu_budget.replay_note(by_ops)
    )
    monkeypatch.setattr(_cpu_budget, "how_counted", lambda: (OPS, "no C++ compiler"))
    assert "here it is counted by ops (no C++ compiler)" in str(
        _cpu_budget.replay_note(by_allocator)
    )
    assert _cpu_budget.replay_note(by_ops) is None
    assert _cpu_budget.replay_note("rank 0 swallowed the injected oom") is None
