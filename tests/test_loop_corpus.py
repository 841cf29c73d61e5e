"""The loop corpus (``examples/loops``): Fabric and plain PyTorch programs no Trainer runs.

Fast: ``LOOPS`` names exactly the programs there, at least eight of each kind, and each
imports with its targets and a docstring. Slow, in the session's 2-rank World: every
correct program (a ``train_fixed`` twin or a ``train``) passes a fault-free run and its
bug's schedule; every buggy twin fails under that schedule, and the verdict is the
program's, not a known issue's. A silent bug fails no rank: under its schedule every
rank of the buggy twin returns, another value than the fault-free run, and the loop's
``check`` says what went wrong (``restart-equivalence``: where a restarted job trained
otherwise; ``data-order``: an order that never moved); the fixed twin ends where the
fault-free run did."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from chaoslight import Schedule, judge
from chaoslight._report import PASSED

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from examples.loops import HERE, LOOPS  # noqa: E402

TIMEOUT = 30.0  # a cap: a hang is told in about a second, by the World's wavefront
BUGGY = [loop for loop in LOOPS if loop.bug]


def test_the_list_names_exactly_the_programs_there_each_with_its_targets() -> None:
    present = {p.stem for p in HERE.glob("*.py") if not p.stem.startswith("_")}
    names = [loop.name for loop in LOOPS]
    assert sorted(names) == sorted(present)  # no program twice, none missing
    for loop in LOOPS:
        tree = ast.parse((HERE / f"{loop.name}.py").read_text())
        functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        wanted = {"train_buggy", "train_fixed"} if loop.bug else {"train"}
        assert wanted <= functions, loop.name
        assert ast.get_docstring(tree), loop.name
        assert ("_ok_" in loop.name) == (not loop.bug), loop.name
        restarts = Schedule.parse(loop.reveals).restarts
        assert not loop.silent or restarts or loop.check != "restart-equivalence", loop.name
        Schedule.parse(loop.reveals)  # every schedule reads
    for kind in ("fabric_", "plain_"):
        assert len([name for name in names if name.startswith(kind)]) >= 8, kind
    assert all(name.startswith(("fabric_", "plain_")) for name in names)


def _module_loads(name: str) -> Any:
    sys.path.insert(0, str(HERE))
    try:
        spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(HERE))


@pytest.mark.parametrize("loop", LOOPS, ids=lambda loop: loop.name)
def test_each_program_imports_with_its_targets_and_docstring(loop: Any) -> None:
    module = _module_loads(loop.name)
    names = ("train_buggy", *loop.correct) if loop.bug else loop.correct
    assert all(callable(getattr(module, name)) for name in names)
    assert module.__doc__ and "\n\n" in module.__doc__.strip()


@pytest.mark.slow
@pytest.mark.parametrize("loop", LOOPS, ids=lambda loop: loop.name)
def test_every_correct_program_passes_a_fault_free_run(world2: Any, loop: Any) -> None:
    for name in loop.correct:
        outcome = world2.run(loop.target(name), Schedule(), timeout=TIMEOUT)
        assert outcome.passed, outcome.report()


def _values(outcome: Any) -> list[Any]:
    return [rank.value for rank in outcome.ranks]


@pytest.mark.slow
@pytest.mark.parametrize("loop", BUGGY, ids=lambda loop: loop.name)
def test_the_bug_shows_under_its_schedule_and_the_twin_survives_it(world2: Any, loop: Any) -> None:
    schedule = Schedule.parse(loop.reveals)
    checks = [loop.check] if loop.silent else []
    buggy = world2.run(loop.target("train_buggy"), schedule, timeout=TIMEOUT, checks=checks)
    fixed = world2.run(loop.target("train_fixed"), schedule, timeout=TIMEOUT, checks=checks)
    verdict = judge(fixed)
    assert not verdict.failed or verdict.known is not None, fixed.report()
    if loop.silent:  # no rank fails: the restarted job ends elsewhere, or where it should
        clean = _values(world2.run(loop.target("train_fixed"), Schedule(), timeout=TIMEOUT))
        assert fixed.passed and all(r.status == PASSED for r in buggy.ranks), buggy.report()
        assert _values(fixed) == pytest.approx(clean, rel=1e-6), fixed.report()
        assert _values(buggy) != pytest.approx(clean, rel=1e-3), buggy.report()
        assert [v.check for v in buggy.violations] == [loop.check], buggy.report()
    verdict = judge(buggy)
    assert verdict.failed and verdict.known is None, (verdict.reason, buggy.report())


@pytest.mark.slow
def test_the_flip_probe_finds_a_collective_under_a_ranks_own_loss_spike(world2: Any) -> None:
    """fabric_spike_reduce all-reduces the loss only when the rank's own loss spikes: the
    default search's flip probe (rank 0, before the second step's loss) makes it spike on
    rank 0 alone, which then waits in that all-reduce while its peer is in the next
    gradient all-reduce. Found among the probes, minimal at once."""
    import chaoslight

    (loop,) = [loop for loop in LOOPS if loop.name == "fabric_spike_reduce"]
    _, failure = chaoslight.fuzz(loop.target("train_buggy"), world=world2, max_examples=20, seed=0)
    assert failure is not None
    assert [str(f) for f in failure.schedule] == ["flip@fabric.forward rank=0 step=1"]
    assert "runner.all_reduce(value" in failure.reason, failure.reason
