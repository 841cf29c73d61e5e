"""A site that cannot fire costs a lookup, or nothing: only the sites where a fault can still
fire at this rank and step are matched by the engine (``Engine.live``), and once the engine
hears of every move of the step, the other sites' gates close (``_runtime/_gates.py``). The
same schedule fires at the same calls, with the same call numbers and batches, as when every
armed call was matched (a tracer has them all matched: the comparison below); a site whose
gate closed is counted only where it was watched, and the report says so."""

from __future__ import annotations

import io
import threading
from collections import Counter
from typing import Any

import pytest
import torch
from helpers import (
    changed,
    fit,
    patched_attributes,
    saving,
    tiny_loader,
    tiny_model,
    tiny_model_class,
    tiny_trainer,
)
from hypothesis import given, settings
from hypothesis import strategies as st

import chaoslight
from chaoslight import Allocate, Delay, DropBatch, MemoryBudget, Raise, RepeatBatch, Schedule
from chaoslight._runtime._engine import Engine
from chaoslight._runtime._inject import active
from chaoslight._runtime._live import MAX_STEPS_SEEN, SETTLE_AFTER, Counts
from chaoslight._schedule._catalog import SITES as CATALOGUE

pytestmark = pytest.mark.usefixtures("rank_env", "lightning_in_process")


@pytest.fixture
def engine_calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Per site, the calls the engine matched against the schedule: it counts each of them
    alone (``Counts.add``), and defers the calls that passed through (``defer``)."""
    seen: Counter[str] = Counter()
    add = Counts.add

    def counted(self: Counts, site: str, rank: int, step: int | None) -> int:
        seen[site] += 1
        return add(self, site, rank, step)

    monkeypatch.setattr(Counts, "add", counted)
    return seen


def test_a_fault_for_another_rank_never_reaches_the_engine(engine_calls: Counter[str]) -> None:
    """On rank 0, a fault for rank 1 leaves its site's calls to the wrapped function; the
    report still counts them."""
    with chaoslight.inject("oom@lightning.training_step rank=1") as run:
        fit(max_steps=4)
    assert engine_calls["lightning.training_step"] == 0
    assert run.fired() == [] and run.reached[("lightning.training_step", 0)] == 4


def test_a_fault_at_a_step_reaches_the_engine_at_that_step_only(
    engine_calls: Counter[str],
) -> None:
    """A fault at step 2 (and one at a step the run never reaches) is looked up at step 2
    only; the one that never fired says the run never got to its step."""
    schedule = "delay@lightning.on_train_batch_end step=2 seconds=0\noom@lightning.forward step=99"
    with chaoslight.inject(schedule) as run:
        fit(max_steps=5)
    assert engine_calls == Counter({"lightning.on_train_batch_end": 1})
    assert [(e.site, e.step, e.call) for e in run.fired()] == [
        ("lightning.on_train_batch_end", 2, 1)  # its first call at step 2
    ]
    assert "rank 0 trained up to step 4: step 99 was never reached" in run.report()
    assert run.unwatched == {"lightning.on_train_batch_end", "lightning.forward"}


def test_a_fault_at_a_step_the_site_skips_says_so(engine_calls: Counter[str]) -> None:
    """Validation runs at steps 1 and 3 only: a fault at step 2 of a validation step never
    fires, and the note says its site was not reached there (it was watched at step 2)."""
    fault = Delay(0.0, site="lightning.validation_step", step=2)
    with chaoslight.inject(fault) as run:
        model = tiny_model(validate=True)
        fit(model, max_steps=4, val_loader=tiny_loader(batches=1, seed=1), val_check_interval=2)
    assert run.fired() == []
    assert "lightning.validation_step was not reached on rank 0 at step 2" in run.report()


@pytest.mark.parametrize(("times", "looked_up"), [(1, 1), (2, 2), (None, 5)])
def test_a_spent_fault_stops_being_looked_up(
    engine_calls: Counter[str], times: int | None, looked_up: int
) -> None:
    """A fault with no step is looked up until it has fired ``times`` times, then never."""
    fault = Delay(0.0, site="lightning.training_step", times=times)
    with chaoslight.inject(fault) as run:
        fit(max_steps=5)
    assert engine_calls["lightning.training_step"] == looked_up
    assert [e.call for e in run.fired()] == list(range(1, looked_up + 1))


def test_an_nth_call_is_counted_while_nothing_is_looked_up(engine_calls: Counter[str]) -> None:
    """``nth=1 step=2``: calls before step 2 pass by; the firing's number is its nth."""
    fault = Delay(0.0, site="lightning.on_before_zero_grad", step=2, nth=1)
    with chaoslight.inject(fault) as run:
        fit(max_steps=4)
    assert engine_calls["lightning.on_before_zero_grad"] == 1
    assert [(e.step, e.call) for e in run.fired()] == [(2, 1)]


def test_a_batch_fetched_ahead_is_looked_up_only_for_the_step_it_can_fire_at(
    engine_calls: Counter[str],
) -> None:
    """A batch belongs to the step it is fetched for, not the step running when it is
    fetched; a fault at step 3 of ``lightning.next_batch`` looks up that fetch alone, and
    step 3's batch is trained again at step 4."""
    with chaoslight.inject("repeat_batch@lightning.next_batch step=3") as run:
        model = fit(max_steps=6)
    assert engine_calls["lightning.next_batch"] == 1
    assert [(e.site, e.step) for e in run.fired()] == [("lightning.next_batch", 3)]
    sums = [batch.sum().item() for _, batch in model.batches]
    assert sums[4] == sums[3] and len(set(sums)) == 5
    # Watched while a fault could fire within the batches fetched ahead (steps 0 to 3),
    # and for the fetch the repeat's batch waited for.
    assert run.reached[("lightning.next_batch", 0)] == 5


def test_an_observed_site_always_reaches_the_engine(engine_calls: Counter[str]) -> None:
    """A site a check or a watchdog observes is routed whether or not a fault is there."""
    with chaoslight.inject("oom@lightning.training_step rank=1", observe={"lightning.backward"}):
        fit(max_steps=3)
    assert engine_calls["lightning.backward"] == 3
    assert engine_calls["lightning.training_step"] == 0


def test_a_process_group_that_changes_the_rank_makes_the_site_live(
    rank_env: pytest.MonkeyPatch, gloo_group: Any
) -> None:
    """RANK=1 in the environment, then a process group in which this process is rank 0:
    a fault for rank 0 fires from then on, as the engine reads the rank at each call."""
    import torch.distributed as dist

    rank_env.setenv("RANK", "1")
    dist.destroy_process_group()  # the fixture's group, until the schedule is armed
    with chaoslight.inject(Raise(site="torch.save", rank=0)) as run:
        torch.save(1, io.BytesIO())  # rank 1: nothing fires
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        with pytest.raises(RuntimeError, match="injected by chaoslight"):
            torch.save(1, io.BytesIO())
    assert [(e.rank, e.call) for e in run.fired()] == [(0, 2)]
    assert run.reached == Counter({("torch.save", 1): 1, ("torch.save", 0): 1})


def test_chaoslights_own_calls_of_a_site_that_cannot_fire_are_not_counted() -> None:
    """A call made inside ``Engine.internal()`` passes every site uncounted, live or not."""
    with chaoslight.inject("raise@torch.save rank=1") as run:
        injection = active()
        assert injection is not None and injection.engine is not None
        with injection.engine.internal():
            torch.save(1, io.BytesIO())
        torch.save(1, io.BytesIO())
    assert run.reached == Counter({("torch.save", 0): 1})


def test_calls_that_pass_through_on_several_threads_are_all_counted(
    rank_env: pytest.MonkeyPatch, gloo_group: Any
) -> None:
    """Threads calling a site that cannot fire, while another thread reads the counts (as
    the World's wavefront does) and the main thread moves the rank: every call is counted
    once, at the rank it was made at, and the fault fires at its call number."""
    import torch.distributed as dist

    threads, calls = 4, 300
    start, done = threading.Barrier(threads + 2), threading.Event()
    errors: list[BaseException] = []

    def read(engine: Engine) -> None:
        start.wait(timeout=30)
        while not done.is_set():
            _ = engine.counts().calls["torch.save"]

    rank_env.setenv("RANK", "1")
    dist.destroy_process_group()  # the fixture's group: rank 1 until the schedule's end
    with chaoslight.inject(Delay(0.0, site="torch.save", rank=0, nth=threads * calls + 1)) as run:
        injection = active()
        assert injection is not None and injection.engine is not None
        workers = [threading.Thread(target=saving(start, calls, errors)) for _ in range(threads)]
        reader = threading.Thread(target=read, args=(injection.engine,))
        for thread in [*workers, reader]:
            thread.start()
        start.wait(timeout=30)
        for worker in workers:
            worker.join(timeout=60)
        done.set()
        reader.join(timeout=60)
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        torch.save(1, io.BytesIO())  # rank 0 now: the fault's call
    assert errors == []
    assert run.reached == Counter({("torch.save", 1): threads * calls, ("torch.save", 0): 1})
    assert [(e.rank, e.call) for e in run.fired()] == [(0, threads * calls + 1)]


def test_every_site_armed_never_firing_leaves_every_original_in_place() -> None:
    """The benchmark's schedule (every site armed at a step never reached): nothing fires,
    no call of a training step reaches chaoslight once the Trainer's loop counts its first
    batch, and every patched attribute is the original object again after ``inject()``."""
    before = patched_attributes()
    armed = Schedule([Delay(0.0, site=site, step=10**9) for site in CATALOGUE])
    with chaoslight.inject(armed) as run:
        fit(max_steps=3)
    assert run.fired() == []
    assert run.reached[("lightning.training_step", 0)] == 0
    assert {"lightning.training_step", "lightning.on_train_batch_end"} <= run.unwatched
    assert "trained up to step 2: step 1000000000 was never reached" in run.report()
    assert changed(before, patched_attributes()) == []


# -- the same firings as when every armed call went through the engine ------------------


class RouteAll:
    """A tracer that records nothing: while one is set, every armed site is live."""

    def enter(self, *args: Any) -> None:
        pass

    def exit(self, *args: Any) -> None:
        pass


def nested_model() -> Any:
    """A TinyModel whose forward calls another LightningModule (``lightning.forward`` twice
    per step, the inner call nested in the outer)."""

    class Outer(tiny_model_class()):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.inner = tiny_model()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.layer(x) + self.inner(x)

    return Outer()


def record(schedule: Schedule, route_all: bool, nested: bool = False) -> Any:
    """What a 7-step fit over two epochs with validation every 2 steps, then a second
    trainer's 2-step fit, recorded under ``schedule``: events without their times, the
    reach, the report, the batches trained."""
    outcome: list[Any] = []
    with chaoslight.inject(schedule) as run:
        if route_all:
            injection = active()
            assert injection is not None and injection.engine is not None
            injection.engine.tracer = RouteAll()
        for steps in (7, 2):
            model = nested_model() if nested else tiny_model(validate=True)
            # max_epochs: drops that eat every batch of an epoch end the fit, not loop on
            trainer = tiny_trainer(
                max_steps=steps, max_epochs=8, limit_val_batches=2, val_check_interval=2
            )
            validation = None if nested else tiny_loader(batches=2, seed=1)
            try:
                trainer.fit(model, tiny_loader(batches=4), validation)
            except (ValueError, torch.OutOfMemoryError) as exc:
                outcome.append(type(exc).__name__)
            outcome.append([(step, batch.sum().item()) for step, batch in model.batches])
    return run, outcome


def same_run(schedule: Schedule, nested: bool = False) -> None:
    """The run with gates and the one with every armed call matched (a tracer) fire the
    same faults at the same calls and train the same batches; every site watched in both
    has the same counts, and the same faults never fired."""
    gated, outcome = record(schedule, False, nested)
    routed, routed_outcome = record(schedule, True, nested)
    assert outcome == routed_outcome
    assert _firings(gated) == _firings(routed)
    watched = {k: n for k, n in gated.reached.items() if k[0] not in gated.unwatched}
    assert watched == {k: n for k, n in routed.reached.items() if k[0] not in gated.unwatched}
    unfired = [e.fault for e in gated.events if e.kind == "unfired"]
    assert unfired == [e.fault for e in routed.events if e.kind == "unfired"]


def _firings(run: Any) -> list[tuple[Any, ...]]:
    return [
        (e.kind, e.site, e.rank, e.step, e.fault, e.call, e.detail)
        for e in run.events
        if e.kind != "unfired"
    ]


SITES = [
    "lightning.training_step",
    "lightning.validation_step",
    "lightning.forward",
    "lightning.backward",
    "lightning.optimizer_step",
    "lightning.on_train_batch_start",
    "lightning.on_train_batch_end",
    "lightning.on_train_epoch_end",
    "lightning.on_validation_epoch_end",
    "lightning.on_fit_start",
    "lightning.next_batch",
    # A plain loop's sites, reached inside Lightning's loop too: their calls belong to the
    # loop's step (``Behaviour.step_of``), matched only when a fault can fire at that step.
    "torch.next_batch",
    "torch.backward",
    "torch.optimizer_step",
]
triggers = {
    "rank": st.sampled_from([None, 0, 1]),
    "step": st.sampled_from([None, 0, 1, 2, 3, 5, 6, 9]),
    "nth": st.sampled_from([None, None, 1, 2, 3]),
    "times": st.sampled_from([1, 1, 2, None]),
}
fault_strategy = st.one_of(
    st.builds(Delay, st.just(0.0), site=st.sampled_from(SITES), **triggers),
    st.builds(
        Raise,
        st.just("ValueError"),
        site=st.sampled_from(SITES),
        **(triggers | {"times": st.just(1)}),
    ),
    st.builds(RepeatBatch, site=st.just("lightning.next_batch"), **triggers),
    st.builds(DropBatch, site=st.just("lightning.next_batch"), **triggers),
    st.builds(
        Allocate,
        site=st.sampled_from(SITES),
        nbytes=st.just(2**20),
        hold_steps=st.sampled_from([1, 2, None]),
        **triggers,
    ),
)
schedule_strategy = st.builds(
    Schedule,
    st.lists(fault_strategy, min_size=1, max_size=5),
    memory_budget=st.sampled_from([None, MemoryBudget(2**40), MemoryBudget(3 * 2**20, 2**20)]),
)


@pytest.mark.slow  # seconds of real runs: the fast loop stays under a minute
@settings(max_examples=25, database=None)
@given(schedule=schedule_strategy)
def test_the_same_schedule_fires_at_the_same_calls(schedule: Schedule) -> None:
    """Drawn schedules of faults at any rank, step, nth and times (a batch repeated or
    dropped by a fetch ahead of its step, memory held and released, a raise that ends a
    fit, a budget): events, call numbers, reach, report and batches trained are those of
    the run in which every armed call went through the engine."""
    same_run(schedule)


@pytest.mark.parametrize(
    "text",
    ["oom@lightning.forward step=3", "delay@lightning.forward seconds=0 step=2 nth=2"],
)
def test_a_nested_site_counts_once_whether_or_not_it_can_fire(text: str) -> None:
    """A LightningModule inside a LightningModule: the nested ``self(x)`` counts once, as
    in the engine, while the site passes through at the steps before its fault."""
    same_run(Schedule.parse(text), nested=True)


def _eager(ops: list[tuple[Any, ...]], in_step: frozenset[str]) -> tuple[Any, ...]:
    """The counts as they were kept before deferral: every call counted when it came."""
    calls: Counter[str] = Counter()
    in_steps: Counter[tuple[str, int | None]] = Counter()
    reached: Counter[tuple[str, int]] = Counter()
    seen: dict[str, list[int | None]] = {}
    numbers = []
    for op, sites, rank, step in ops:
        for site, n in sites:
            calls[site] += n
            reached[(site, rank)] += n
            if site in in_step:
                in_steps[(site, step)] += n
            steps = seen.setdefault(site, [])
            if step not in steps and len(steps) < MAX_STEPS_SEEN:
                steps.append(step)
        if op == "add":
            numbers.append(calls[sites[0][0]])
    return calls, +in_steps, reached, seen, numbers


BULK, ONE_BY_ONE = ("a", "b", "c"), ("x", "y")  # a site's calls come one way: its behaviour's
step_values = st.one_of(st.none(), st.integers(0, 700))
bulk_op = st.tuples(
    st.just("defer"),
    st.dictionaries(st.sampled_from(BULK), st.integers(1, 3), min_size=1).map(
        lambda d: tuple(sorted(d.items()))
    ),
    st.integers(0, 1),
    step_values,
)
single_op = st.tuples(
    st.just("defer_one"),
    st.sampled_from(ONE_BY_ONE).map(lambda s: ((s, 1),)),
    st.integers(0, 1),
    step_values,
)
add_op = st.tuples(
    st.just("add"),
    st.sampled_from(BULK + ONE_BY_ONE).map(lambda s: ((s, 1),)),
    st.integers(0, 1),
    step_values,
)


@settings(max_examples=200, deadline=None)
@given(
    ops=st.lists(st.one_of(bulk_op, single_op, add_op), max_size=60),
    repeat=st.integers(1, 30),
    in_step=st.sets(st.sampled_from(BULK + ONE_BY_ONE)).map(frozenset),
)
def test_deferred_counts_read_as_counts_kept_call_by_call(
    ops: list[tuple[Any, ...]], repeat: int, in_step: frozenset[str]
) -> None:
    """Calls counted in bulk when read (runs of steps that repeat the calls of the step
    before, one-by-one calls of a batch fetched ahead) give the call numbers, per-step and
    per-rank counts and the steps seen (the first 512, in order) of counting each call as
    it came. Each op is repeated at consecutive steps to make runs."""
    expanded = []
    for op, sites, rank, step in ops:
        for k in range(repeat if op == "defer" else 1):
            expanded.append((op, sites, rank, None if step is None else step + k))
    counts, numbers = Counts(in_step), []
    for op, sites, rank, step in expanded:
        if op == "defer":
            counts.defer(frozenset(sites), rank, step)
        elif op == "defer_one":
            counts.defer_one(sites[0][0], rank, step)
        else:
            numbers.append(counts.add(sites[0][0], rank, step))
    calls, in_steps, reached, seen, eager_numbers = _eager(expanded, in_step)
    assert numbers == eager_numbers
    assert counts.calls == calls and +counts.calls_in_step == in_steps
    assert counts.reached == reached and counts.steps_seen == seen


def test_a_long_run_of_deferred_steps_is_counted_before_it_grows_without_bound() -> None:
    counts = Counts(frozenset())
    for step in range(SETTLE_AFTER + 10):
        counts.defer(frozenset({("a", 2)}), 0, step)
    assert len(counts._runs) == 1 and len(counts._runs[0][2]) == 10
    assert counts.calls["a"] == 2 * (SETTLE_AFTER + 10)
    assert counts.steps_seen["a"] == list(range(MAX_STEPS_SEEN))
