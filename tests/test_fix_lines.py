"""The registry of fix lines (``examples/fix_lines.py``) stays honest: every buggy program
of ``examples/`` is in it once, each anchor is on exactly one line of a function or class;
and ``benchmarks/program_lines.py`` scores the frame a report names against that line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # examples.*
sys.path.insert(0, str(ROOT / "benchmarks"))
import program_lines as bench  # noqa: E402

from examples.bugs import BUGS  # noqa: E402
from examples.catalogue import CATALOGUE  # noqa: E402
from examples.corpus import CORPUS  # noqa: E402
from examples.fix_lines import BY_TARGET, FIX_LINES, FixLine, buggy_targets, scopes  # noqa: E402


def test_every_buggy_program_of_the_examples_has_one_fix_line() -> None:
    """A new ``train_buggy`` (or planted ``train`` with a ``train_fixed`` twin) anywhere
    under examples/ fails here until it is registered; a removed one, until unregistered."""
    registered = [entry.target for entry in FIX_LINES]
    assert len(registered) == len(set(registered))
    assert sorted(registered) == sorted(buggy_targets())


def test_the_collections_own_lists_are_all_registered() -> None:
    listed = {f"bugs/{name}.py:train_buggy" for name in BUGS}
    listed |= {f"catalogue/{e.name}.py:{function}" for e in CATALOGUE for function in e.buggy}
    listed |= {f"corpus/{e.name}.py:train_buggy" for e in CORPUS}
    assert listed - set(BY_TARGET) == set()


@pytest.mark.parametrize("entry", FIX_LINES, ids=lambda entry: entry.name)
def test_each_anchor_is_on_exactly_one_line_of_a_function_or_class(entry: FixLine) -> None:
    assert len(entry.matches()) == 1, f"{entry.anchor!r} is on lines {entry.matches()}"
    assert entry.function in {scope.name for scope in scopes(entry.path)}
    scope = entry.scope()
    assert scope is not None and scope.holds(entry.line())


def test_an_anchor_on_two_lines_is_refused_until_a_scope_narrows_it() -> None:
    loose = FixLine("corpus/two_fits.py:train_buggy", "@rank_zero_only")
    with pytest.raises(ValueError, match="on 2 lines"):
        loose.line()
    narrowed = FixLine("corpus/two_fits.py:train_buggy", "@rank_zero_only", "RankZeroFineTuneRate")
    assert narrowed.line() in loose.matches()
    scope = narrowed.scope()  # a decorator's line belongs to the function it decorates
    assert scope is not None and scope.name == "RankZeroFineTuneRate.on_fit_end"


# -- the benchmark's scoring, on report texts ---------------------------------------------
SNAPSHOT = BY_TARGET["bugs/rank0_save_checkpoint.py:train_buggy"]


def _scored(parts: list[tuple[str, str]], fix: FixLine = SNAPSHOT) -> tuple[object, str]:
    named = bench.first_named(parts, fix.path.parent)
    return named, bench.score(named, fix)


def _hang(function: str, line: int, code: str = "trainer.save_checkpoint(path)") -> str:
    return (
        f"rank 0 waits in dist.barrier #8 at step 3 ({function} → {code}, "
        f"rank0_save_checkpoint.py:{line}); blocked 0.9 s in collective #17, dist.barrier "
        "from barrier at ddp.py:303; rank 1 is in collective #17, dist.broadcast from "
        "_broadcast_sigterm_tensor at training_epoch_loop.py:265"
    )


def test_a_hang_named_at_the_fix_line_or_in_its_hook_scores_so() -> None:
    line = SNAPSHOT.line()
    named, scored = _scored([("failure", _hang("on_train_epoch_end", line))])
    assert scored == "exact" and named.function == "on_train_epoch_end"
    assert _scored([("failure", _hang("on_train_epoch_end", line + 1))])[1] == "function"


def test_a_hang_that_names_trainer_fit_is_a_miss() -> None:
    """Naming where the program started the fit, not the barrier that split the ranks."""
    lines = SNAPSHOT.path.read_text().splitlines()
    fit_line = next(n for n, text in enumerate(lines, 1) if "trainer.fit(" in text)
    named, scored = _scored([("failure", _hang("_run", fit_line, "trainer.fit(model, loader)"))])
    assert named is not None and named.line == fit_line and scored == "miss"


def test_library_frames_are_not_the_programs_and_no_frame_is_a_miss() -> None:
    text = "rank 1 is in collective #17, dist.broadcast from _broadcast_sigterm_tensor at "
    text += "training_epoch_loop.py:265: the collectives differ"
    assert _scored([("failure", text)]) == (None, "miss")


def test_the_traceback_names_its_innermost_program_frame() -> None:
    """Past the failure line and notes, the traceback's frame nearest the raise counts
    (Python prints it last), not the outermost ``train_buggy``."""
    path, line = SNAPSHOT.path, SNAPSHOT.line()
    lightning = "/venv/lib/python3.11/site-packages/lightning/pytorch/trainer/trainer.py"
    traceback = "\n".join(
        [
            "rank 0 traceback (the root cause; 12 frames of torch, Lightning hidden):",
            "  Traceback (most recent call last):",
            f'    File "{path}", line 90, in train_buggy',
            f'    File "{lightning}", line 561, in fit',
            f'    File "{path}", line {line}, in on_train_epoch_end',
            f'    File "{lightning}", line 99, in save_checkpoint',
            "  RuntimeError: boom",
        ]
    )
    parts = [("failure", "rank 0 raised: RuntimeError: boom"), ("traceback", traceback)]
    named, scored = _scored(parts)
    assert (named.part, named.line, scored) == ("traceback", line, "exact")


def test_a_shared_helper_is_the_programs_code_but_not_its_fix() -> None:
    swallowed = BY_TARGET["planted/swallowed_oom.py:train"]
    named, scored = _scored([("failure", "(fit → trainer.fit(model), _common.py:37)")], swallowed)
    assert named is not None and named.path.endswith("planted/_common.py") and scored == "miss"
