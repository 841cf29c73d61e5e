"""The loop corpus (``examples/loops``): Fabric and plain PyTorch programs no Trainer runs.

Every correct program passes a fault-free run and its bug's schedule; every buggy twin
fails under that schedule, and the verdict is the program's (not a known issue's)."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from chaoslight import Schedule, judge

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from examples.loops import HERE, LOOPS  # noqa: E402

TIMEOUT = 30.0


def test_the_list_names_exactly_the_programs_there_each_with_its_targets() -> None:
    present = {p.stem for p in HERE.glob("*.py") if not p.stem.startswith("_")}
    assert {loop.name for loop in LOOPS} == present
    for loop in LOOPS:
        tree = ast.parse((HERE / f"{loop.name}.py").read_text())
        functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        wanted = {"train_buggy", "train_fixed"} if loop.bug else {"train"}
        assert wanted <= functions, loop.name
        assert ast.get_docstring(tree), loop.name
        Schedule.parse(loop.reveals)  # every schedule reads
    fabric = [loop for loop in LOOPS if loop.name.startswith("fabric_")]
    plain = [loop for loop in LOOPS if loop.name.startswith("plain_")]
    assert len(fabric) + len(plain) == len(LOOPS)


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
def test_each_program_imports(loop: Any) -> None:
    module = _module_loads(loop.name)
    assert all(callable(getattr(module, name)) for name in loop.correct)


@pytest.mark.slow
@pytest.mark.parametrize("loop", LOOPS, ids=lambda loop: loop.name)
def test_the_correct_program_passes_and_the_buggy_twin_fails_under_its_schedule(
    world2: Any, loop: Any
) -> None:
    for name in loop.correct:
        clean = world2.run(loop.target(name), Schedule(), timeout=TIMEOUT)
        assert clean.passed, clean.report()
        if loop.reveals:
            faulted = world2.run(loop.target(name), Schedule.parse(loop.reveals), timeout=TIMEOUT)
            verdict = judge(faulted)
            assert not verdict.failed or verdict.known is not None, faulted.report()
    if loop.bug:
        outcome = world2.run(
            loop.target("train_buggy"), Schedule.parse(loop.reveals), timeout=TIMEOUT
        )
        verdict = judge(outcome)
        assert verdict.failed and verdict.known is None, (verdict.reason, outcome.report())
