"""The upstream programs (examples/upstream) are registered, documented and resolvable, and
the false-alarm benchmark's programs resolve: cheap, no World, no torch import.

Each program's fault-free run is not repeated here (``chaoslight check`` on each, a few
seconds apiece, is what ``benchmarks/false_alarms_budget.py`` starts from): the suite's
time budget goes to the shapes and the corpus, which ``tests/test_shapes.py`` and
``tests/test_corpus.py`` already run in a World.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from chaoslight._world._target import parse_target

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from examples.upstream import HERE, UPSTREAM, target  # noqa: E402

BENCHMARK = ROOT / "benchmarks" / "false_alarms_budget.py"


def _top_level_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}


def _benchmark() -> Any:
    spec = importlib.util.spec_from_file_location("false_alarms_budget", BENCHMARK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_every_upstream_program_is_registered_once() -> None:
    """Each examples/upstream/*.py program (helpers start with '_') is in UPSTREAM once."""
    files = {path.stem for path in HERE.glob("[!_]*.py")}
    names = [program.name for program in UPSTREAM]
    assert len(names) == len(set(names)), names
    assert set(names) == files
    assert len(names) >= 12


@pytest.mark.parametrize("program", UPSTREAM, ids=lambda p: p.name)
def test_an_upstream_target_resolves(program: Any) -> None:
    """The target names a file that defines the function, as the World will load it."""
    parsed = parse_target(program.target())
    assert parsed.path == str(program.path) and program.target() == target(program.name)
    assert program.function in _top_level_functions(program.path)


@pytest.mark.parametrize("program", UPSTREAM, ids=lambda p: p.name)
def test_an_upstream_program_says_its_shape_why_and_its_source(program: Any) -> None:
    """The docstring names the shape and why it is correct; the README has its row."""
    doc = ast.get_docstring(ast.parse(program.path.read_text())) or ""
    assert "Shape:" in doc and "Why it is correct:" in doc, program.name
    assert f"| `{program.name}` |" in (HERE / "README.md").read_text()
    assert program.adapted_from


def test_helper_modules_have_names_no_other_example_folder_uses() -> None:
    """A World worker imports targets with their folder on sys.path: a helper module
    named like another folder's would shadow it in the same worker."""
    helpers = [path.name for path in HERE.glob("_*.py") if path.name != "__init__.py"]
    others = {
        path.name
        for path in (ROOT / "examples").glob("*/_*.py")
        if path.parent != HERE and path.name != "__init__.py"
    }
    assert helpers and not set(helpers) & others


def test_the_benchmark_runs_every_correct_program_and_each_resolves() -> None:
    """Every upstream program, shape and corpus program is in the false-alarm benchmark;
    each of its targets names an existing file defining the function; keys are unique."""
    from examples.corpus import CORPUS
    from examples.shapes import SHAPES

    chosen = _benchmark().programs()
    keys = [program.key for program in chosen]
    assert len(keys) == len(set(keys))
    for name in (p.name for p in UPSTREAM):
        assert f"upstream/{name}:train" in keys
    assert {f"shapes/{name}:train" for name in SHAPES} <= set(keys)
    assert {f"corpus/{entry.name}:train" for entry in CORPUS} <= set(keys)
    for program in chosen:
        assert program.function in _top_level_functions(program.path), program.key


def test_the_benchmark_selects_by_key_group_module_and_pattern() -> None:
    """--only takes keys, groups, modules and shell patterns, and refuses unknown names."""
    bench = _benchmark()
    everything = bench.programs()
    assert [p.key for p in bench.select(everything, "upstream/gan:train")] == ["upstream/gan:train"]
    assert all(p.group == "corpus" for p in bench.select(everything, "corpus"))
    assert {p.key for p in bench.select(everything, "restart/resume_shapes")} >= {
        "restart/resume_shapes:deterministic_adam"
    }
    assert len(bench.select(everything, "bugs/*")) == len(
        [p for p in everything if p.group == "bugs"]
    )
    with pytest.raises(SystemExit, match="no program is named"):
        bench.select(everything, "no_such_program")


def test_the_table_and_the_slowest_read_the_records(tmp_path: Path) -> None:
    """Records in, the Markdown rows out; a later record of a program replaces an earlier
    one; the programs cut shortest by the budget come first."""
    bench = _benchmark()
    base = {"lightning_arg": "", "max_time": 20.0, "max_examples": None, "seed": 0}
    records = [
        {**base, "key": "a:train", "status": "clean", "examples": 9, "campaign_s": 20.0},
        {**base, "key": "b:train", "status": "clean", "examples": 4, "campaign_s": 20.5},
        {**base, "key": "c:train", "status": "clean", "examples": 100, "campaign_s": 12.0},
        {
            **base,
            "key": "a:train",
            "status": "failed",
            "examples": 12,
            "campaign_s": 20.1,
            "false_alarm": True,
            "reason": "replicas differ",
            "schedule": "flip@x rank=0",
            "known": [{"key": "lightning-sigterm-broadcast", "schedule": "preempt@y"}],
        },
    ]
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    loaded = bench.load_records([path])
    assert [r["key"] for r in loaded] == ["a:train", "b:train", "c:train"]
    text = bench.table(loaded, "cmd")
    assert "**failed**: replicas differ — `flip@x rank=0`" in text
    assert "lightning-sigterm-broadcast" in text and "**1 false alarms** in 3" in text
    assert bench.slowest(loaded, 5) == ["b:train"]
