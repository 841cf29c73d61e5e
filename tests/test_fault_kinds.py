"""A fault kind is one unit: its class (with its traits), its action, its strategy.

A throwaway kind added in exactly those three places parses, fires, is drawn and is
judged; the tables the layers derive from the built-in kinds' traits agree.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
import torch
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

import chaoslight
from chaoslight import Fault, MemoryBudget, Schedule, judge
from chaoslight._runtime._actions import ACTIONS, Firing
from chaoslight._runtime._engine import Engine
from chaoslight._schedule import FAULT_KINDS, OFF_COLLECTIVES, SITES, Severity, fault_kind
from chaoslight._schedule._validate import check_choice
from chaoslight._search._inprocess import run_in_process
from chaoslight._search._kinds import KILLING_KINDS, resolve_kinds
from chaoslight._search._strategies import KIND_STRATEGIES
from chaoslight._verdict._oracle import BENIGN_RULE
from chaoslight.strategies import DEFAULT_KINDS, IN_PROCESS_KINDS, KINDS, schedules

LABELS = ("here", "there")


def save_once() -> None:
    """A program with one site call: a torch.save to memory."""
    torch.save({"w": 1}, io.BytesIO())


@pytest.fixture
def stamp() -> Iterator[tuple[type[Fault], list[tuple[str, int, int | None]]]]:
    """A new kind, ``stamp``, that records where it fired: added in the three places a
    contributor adds one (class, action, strategy), and removed from them afterwards."""
    stamped: list[tuple[str, int, int | None]] = []

    @fault_kind  # 1. the class, with its traits (``_schedule/_faults.py``)
    @dataclass(frozen=True)
    class Stamp(Fault):
        """Record that it fired, and where (a kind this test adds and removes)."""

        kind: ClassVar[str] = "stamp"
        severity: ClassVar[Severity] = Severity.BENIGN
        simplicity: ClassVar[int] = 100
        label: str = "here"

        def _validate(self) -> None:
            check_choice("label", self.label, LABELS)

    def _apply_stamp(engine: Engine, fault: Any, firing: Firing) -> None:
        stamped.append((fault.label, firing.rank, firing.step))

    def stamps(
        *, world_size: int, steps: int, sites: tuple[str, ...], reach: Any
    ) -> st.SearchStrategy[Fault]:
        return st.builds(
            Stamp,
            site=st.sampled_from(sites),
            rank=st.integers(0, world_size - 1),
            step=st.integers(0, steps - 1),
            label=st.sampled_from(LABELS),
        )

    ACTIONS[Stamp] = _apply_stamp  # 2. its action (``_runtime/_actions.py``)
    KIND_STRATEGIES[Stamp] = stamps  # 3. its strategy (``_search/_strategies.py``)
    try:
        yield Stamp, stamped
    finally:
        del FAULT_KINDS["stamp"], ACTIONS[Stamp], KIND_STRATEGIES[Stamp]


def test_a_new_kind_parses_from_its_text_and_json_forms(stamp: Any) -> None:
    """The text form names the new kind and its parameter, and both forms round-trip."""
    cls, _ = stamp
    schedule = Schedule.parse("stamp@torch.save rank=0 label=there")
    (fault,) = schedule.faults
    assert isinstance(fault, cls) and fault.label == "there"
    assert str(fault) == "stamp@torch.save rank=0 label=there"
    assert Schedule.from_json(schedule.to_json()) == schedule
    assert "stamp" in chaoslight.faults()
    with pytest.raises(chaoslight.InvalidSchedule, match="label='nowhere' is not one of"):
        Schedule.parse("stamp@torch.save label=nowhere")


def test_a_new_kind_fires_through_inject_at_its_site(stamp: Any) -> None:
    """Under ``inject`` the new kind's action runs at its site, and the run records it."""
    _, stamped = stamp
    with chaoslight.inject("stamp@torch.save label=there") as run:
        save_once()
    assert stamped == [("there", 0, None)]
    assert [event.fault for event in run.fired("torch.save")] == ["stamp@torch.save label=there"]


def test_a_new_kind_is_drawn_by_the_search_when_named(stamp: Any) -> None:
    """``schedules(faults=["stamp"])`` draws only the new kind, at the sites asked for."""
    cls, _ = stamp
    drawn = find(
        schedules(faults=["stamp"], sites=["torch.save", "torch.load"]),
        lambda schedule: any(f.label == "there" for f in schedule),
        settings=settings(database=None),
    )
    assert all(isinstance(fault, cls) for fault in drawn)
    assert drawn.to_text() == "stamp@torch.save rank=0 step=0 label=there"
    assert "stamp" not in resolve_kinds(None)  # not drawn by default: its trait says so


def test_a_new_kind_is_judged_by_its_severity(stamp: Any) -> None:
    """The oracle reads the new kind's severity: a benign kind's run must simply pass."""
    cls, _ = stamp
    assert cls(site="torch.save").fault_class() == Severity.BENIGN
    verdict = judge(run_in_process(save_once, Schedule.parse("stamp@torch.save")))
    assert not verdict.failed and verdict.rule == BENIGN_RULE
    assert verdict.fired == ((0, "stamp@torch.save"),)


FIRST_DRAW = settings(database=None, phases=(Phase.generate,))  # any fault: no shrinking


def test_every_kind_has_one_action_and_one_strategy() -> None:
    """The registry, the engine's actions and the search's strategies name the same kinds,
    and each strategy draws faults of its own kind."""
    kinds = set(FAULT_KINDS.values())
    assert set(ACTIONS) == kinds and set(KIND_STRATEGIES) == kinds
    for cls, builder in KIND_STRATEGIES.items():
        fault = find(builder(world_size=2, steps=2), lambda fault: True, settings=FIRST_DRAW)
        assert type(fault) is cls


def test_each_kind_is_judged_as_the_oracle_documents() -> None:
    """fault_class: delays benign; errors, OOMs, crashes, preemptions, freezes, aborts,
    repeated batches and bad checkpoints hard; dropped syncs, corruptions, bit flips and
    dropped batches desync; a reorder benign on every rank, desync on one; an allocation
    hard under a memory budget, benign without one unless it is large."""
    expected = {
        "delay@lightning.training_step": "benign",
        "reorder@dist.all_reduce": "benign",
        "reorder@dist.all_reduce rank=0": "desync",
        "drop_sync@dist.barrier rank=0": "desync",
        "corrupt@lightning.training_step": "desync",
        "oom@lightning.forward": "hard",
        "oom@lightning.forward deferred=true": "hard",
        "raise@torch.save": "hard",
        "crash@lightning.training_step": "hard",
        "allocate@lightning.forward": "benign",
        "allocate@lightning.forward nbytes=1073741824": "hard",
        "preempt@lightning.training_step": "hard",
        "preempt@lightning.training_step group=true": "hard",
        "freeze@lightning.training_step rank=1": "hard",
        "pg_abort@dist.all_reduce rank=0": "hard",
        "flip@lightning.optimizer_step rank=0": "desync",
        "repeat_batch@lightning.next_batch rank=0": "hard",
        "drop_batch@lightning.next_batch rank=0": "desync",
        "bad_checkpoint@torch.load": "hard",
    }
    judged = {text: Schedule.parse(text).faults[0].fault_class() for text in expected}
    assert judged == expected
    budget = MemoryBudget(2**30)
    assert Schedule.parse("allocate@lightning.forward").faults[0].fault_class(budget) == "hard"


def test_the_derived_kind_tables_agree_with_the_traits() -> None:
    """The search's lists are the built-in kinds' traits read out, and no kind's traits
    contradict each other."""
    assert KINDS == (
        "delay",
        "raise",
        "oom",
        "drop_sync",
        "crash",
        "preempt",
        "allocate",
        "reorder",
        "corrupt",
        "flip",
        "repeat_batch",
        "drop_batch",
        "bad_checkpoint",
        "pg_abort",
        "freeze",
    )
    assert DEFAULT_KINDS == (
        "delay",
        "raise",
        "oom",
        "crash",
        "preempt",
        "allocate",
        "reorder",
        "flip",
        "repeat_batch",
        "bad_checkpoint",
        "pg_abort",
        "freeze",
    )
    # In one process: what cannot kill it, stop it, or need a peer's process group.
    assert IN_PROCESS_KINDS == (
        "delay",
        "raise",
        "oom",
        "allocate",
        "flip",
        "repeat_batch",
        "bad_checkpoint",
    )
    assert KILLING_KINDS == ("crash", "preempt", "freeze")
    simplicity = [cls.simplicity for cls in FAULT_KINDS.values()]
    assert len(set(simplicity)) == len(simplicity)  # one simplest-first order
    for kind, cls in FAULT_KINDS.items():
        assert cls.kind == kind
        if cls.kills_process or cls.aborts_call:
            assert cls.severity == Severity.HARD, kind  # a correct program may fail under it
        if cls.drawn_by_default:
            # No correct program survives a desync fault: drawn only when it changes values
            # and never collectives (silent), so a correct program cannot hang under it.
            assert cls.severity != Severity.DESYNC or cls.silent, kind
        if cls.needs is not None:
            assert cls.drawn_at == cls.needs, kind  # drawn only where it can fire
        assert cls.drawn_at in (None, OFF_COLLECTIVES) or any(
            cls.drawn_at in site.capabilities for site in SITES.values()
        ), kind


def test_a_deferred_oom_does_not_abort_its_call() -> None:
    """Whether a fault aborts its call depends on its parameters: a deferred OOM raises later."""
    assert chaoslight.OOM(site="lightning.forward").aborts()
    assert not chaoslight.OOM(site="lightning.forward", deferred=True).aborts()
    assert (
        chaoslight.Raise(site="torch.save").aborts()
        and chaoslight.Crash(site="torch.save").aborts()
    )
    assert not chaoslight.Delay(site="torch.save").aborts()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schedule=schedules(world_size=2, in_process=True))
def test_the_in_process_default_draws_no_kind_that_needs_peers_or_kills(schedule: Schedule) -> None:
    """In one process the default search draws neither a kind that would end the process
    nor one that changes nothing without peers (a reduction order)."""
    assert {fault.kind for fault in schedule} <= set(IN_PROCESS_KINDS)


def test_no_layer_above_the_schedule_spells_a_kind_by_name() -> None:
    """Above layer 1 a kind is known by its class and traits, never by a string such as
    ``"preempt"`` or a ``"preempt@"`` prefix: a renamed or added kind changes no verdict."""
    import ast
    from pathlib import Path

    package = Path(chaoslight.__file__).parent
    spelled = [
        f"{path.relative_to(package)}:{node.lineno} {node.value!r}"
        for path in package.rglob("*.py")
        if "_schedule" not in path.parts
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and any(
            node.value in (kind, f"{kind}@") or node.value.startswith(f"{kind}@")
            for kind in FAULT_KINDS
        )
    ]
    assert spelled == []
