"""The errors a program catches: read from its source around each reached site, raised there
by the search (found: a one-rank skip on a caught ValueError; clean: the agreed skip)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import Phase, find, settings
from hypothesis.errors import NoSuchExample

import chaoslight
from chaoslight import Event, Raise
from chaoslight._checks._reach import ReachRecorder
from chaoslight._runtime._resolve import exception_class
from chaoslight._search._caught import caught_errors, caught_names, read_source
from chaoslight._search._reach import Reach
from chaoslight.strategies import raises

ROOT = Path(__file__).resolve().parent.parent
MESSAGE = ("injected by chaoslight",)
SNIPPET = """\
import contextlib
import json as j
from json import JSONDecodeError as JDE

ERRORS = (KeyError, IndexError)


class BadRecord(ValueError):
    pass


def step(x):
    try:
        try:
            a = call(x)  # line 15: two tries hold it
        except (ValueError, TypeError) as error:
            b = call(x)  # line 17: only the outer try holds a handler's body
        except j.JSONDecodeError:
            pass
        else:
            c = call(x)  # line 21: an else is not guarded by its own try
    except ERRORS:
        pass
    d = call(x)  # line 24: after every try
    with contextlib.suppress(FileNotFoundError):
        e = call(x)  # line 26
    try:
        f = call(x)  # line 28
    except BadRecord:
        pass
    except JDE:
        pass
    try:
        g = call(x)  # line 34
    except:
        pass
"""


@pytest.fixture
def snippet(tmp_path: Path) -> str:
    path = tmp_path / "snippet.py"
    path.write_text(SNIPPET)
    return str(path)


def names_at(path: str, line: int) -> list[list[str]]:
    source = read_source(path, "snippet", "")
    assert source is not None
    return caught_names(source, line)[0]


def test_nested_tries_list_their_handlers_innermost_first(snippet: str) -> None:
    """A line in two tries meets the inner handlers (a tuple, an aliased module's class) first."""
    assert names_at(snippet, 15) == [
        ["ValueError", "TypeError"],
        ["json:JSONDecodeError"],
        ["KeyError", "IndexError"],  # ERRORS, a tuple the module defines
    ]


def test_only_a_try_whose_body_holds_the_line_guards_it(snippet: str) -> None:
    """A handler's own body and a try's else are guarded only by the tries around them."""
    assert names_at(snippet, 17) == [["KeyError", "IndexError"]]
    assert names_at(snippet, 21) == [["KeyError", "IndexError"]]
    assert names_at(snippet, 24) == []


def test_suppress_from_imports_and_bare_except_are_read(snippet: str) -> None:
    """``contextlib.suppress``, ``from m import C as D``, a class the module defines, a bare
    ``except``."""
    assert names_at(snippet, 26) == [["FileNotFoundError"]]
    assert names_at(snippet, 28) == [["snippet:BadRecord"], ["json:JSONDecodeError"]]
    assert names_at(snippet, 34) == [["BaseException"]]


def test_relative_imports_resolve_against_the_frames_package(tmp_path: Path) -> None:
    """``from .errors import BadRecord`` in package ``pkg`` names ``pkg.errors:BadRecord``."""
    path = tmp_path / "step.py"
    path.write_text(
        "from .errors import BadRecord\n"
        "from . import codes\n\n"
        "def f():\n    try:\n        call()\n"
        "    except (BadRecord, codes.Unknown):\n        pass\n"
    )
    source = read_source(str(path), "pkg.step", "pkg")
    assert source is not None
    assert caught_names(source, 6) == ([["pkg.errors:BadRecord", "pkg:codes.Unknown"]], [])


def test_unreadable_source_is_a_note_not_an_error(tmp_path: Path) -> None:
    """A file that is gone or is not Python gives no handler and one note."""
    broken = tmp_path / "broken.py"
    broken.write_text("def f(:\n")
    paths = {"lightning.forward": [[(str(broken), 1)], [(str(tmp_path / "gone.py"), 3)]]}
    caught, notes = caught_errors(paths, {})
    assert caught == ()
    assert len(notes) == 2 and all("not read" in note for note in notes)
    assert read_source(str(broken)) is None


def test_caught_errors_are_the_ones_the_plain_raise_does_not_exercise(snippet: str) -> None:
    """One class per handler the plain RuntimeError/OSError do not reach; a handler's
    subclass (JSONDecodeError is a ValueError) adds nothing; a bare except adds nothing."""
    paths = {
        "lightning.forward": [[(snippet, 15)]],
        "lightning.backward": [[(snippet, 34)]],
        "torch.load": [[(snippet, 26)]],
    }
    caught, notes = caught_errors(paths, {snippet: ["snippet", ""]})
    assert caught == (
        ("lightning.forward", "ValueError", MESSAGE),
        ("lightning.forward", "KeyError", MESSAGE),
        ("torch.load", "FileNotFoundError", MESSAGE),
    )
    assert notes == ()


def test_a_class_that_does_not_resolve_in_this_process_is_left_out_with_a_note(
    snippet: str,
) -> None:
    """The program's own class is not imported by the parent: skipped, the next handler
    (a JSONDecodeError, built with its three arguments) is drawn."""
    caught, notes = caught_errors({"torch.save": [[(snippet, 28)]]}, {snippet: ["snippet", ""]})
    assert caught == (("torch.save", "json.decoder:JSONDecodeError", (*MESSAGE, "", 0)),)
    assert len(notes) == 1 and "snippet:BadRecord" in notes[0]


@pytest.mark.parametrize(
    ("handler", "why"),
    [
        ("UnicodeDecodeError", "JSON arguments"),  # needs bytes
        ("StopIteration", "end of an iteration"),
        ("KeyboardInterrupt", "not an Exception"),
    ],
)
def test_errors_that_cannot_or_must_not_be_raised_are_left_out(
    tmp_path: Path, handler: str, why: str
) -> None:
    """An error no JSON arguments build, an iteration's end, an interrupt: a note each."""
    path = tmp_path / "one.py"
    path.write_text(f"def f():\n    try:\n        call()\n    except {handler}:\n        pass\n")
    caught, notes = caught_errors({"torch.load": [[(str(path), 3)]]}, {})
    assert caught == ()
    assert len(notes) == 1 and why in notes[0]


def test_a_wide_handler_behind_a_narrow_one_gets_a_value_error(tmp_path: Path) -> None:
    """``except Exception`` that the plain errors never reach (an earlier handler takes
    them) is exercised by a ValueError."""
    path = tmp_path / "wide.py"
    path.write_text(
        textwrap.dedent(
            """\
            def f():
                try:
                    call()
                except (RuntimeError, OSError):
                    raise
                except Exception:
                    return None
            """
        )
    )
    caught, _ = caught_errors({"torch.load": [[(str(path), 3)]]}, {})
    assert caught == (("torch.load", "ValueError", MESSAGE),)


def test_a_drawn_error_builds_and_surfaces_as_the_oracle_reads_it() -> None:
    """Every drawn (name, args) resolves, builds, and reads as its fault in a traceback."""
    fault = Raise("json.decoder:JSONDecodeError", (*MESSAGE, "", 0), site="torch.load")
    error = exception_class(fault.exception)(*fault.args)
    assert isinstance(error, json.JSONDecodeError)
    assert fault.surfaced_in(f"json.decoder.JSONDecodeError: {error}")


def observation(paths: dict[str, Any], steps: dict[str, list[int]]) -> Event:
    detail = json.dumps({"steps": steps, "user": [], "paths": paths, "modules": {}})
    return Event("observation", "reach", 0, None, 0.0, 0.0, detail=detail)


class Outcome:
    def __init__(self, events: list[Event]) -> None:
        self.events = events


def reach_of(snippet: str) -> Reach:
    steps = {"lightning.forward": [0, 1, 2], "dist.barrier": [0], "torch.load": [1]}
    paths = {
        "lightning.forward": [[[snippet, 15]]],
        "dist.barrier": [[[snippet, 15]]],
        "torch.load": [[[snippet, 26]]],
    }
    reach = Reach.from_outcome(Outcome([observation(paths, steps)]))
    assert reach is not None
    return reach


def test_the_search_draws_caught_errors_at_their_sites_never_at_a_collective(
    snippet: str,
) -> None:
    """``raises`` with a reach draws ValueError at the forward and FileNotFoundError at the
    load, on any rank and reached step; never at a collective; it shrinks to RuntimeError."""
    reach = reach_of(snippet)
    strategy = raises(world_size=2, reach=reach)
    value_error = find(strategy, lambda f: f.exception == "ValueError" and f.rank == 1)
    assert (value_error.site, value_error.step) == ("lightning.forward", 0)
    missing = find(strategy, lambda f: f.exception == "FileNotFoundError")
    assert (missing.site, missing.step) == ("torch.load", 1)
    assert find(strategy, lambda f: True).exception == "RuntimeError"
    assert {(f.site, f.exception) for f in drawn(strategy) if f.site == "dist.barrier"} <= {
        ("dist.barrier", "RuntimeError"),
        ("dist.barrier", "OSError"),
    }
    plain = raises(world_size=2, reach=Reach(reach.points, reach.user))
    assert {f.exception for f in drawn(plain)} == {"RuntimeError", "OSError"}


def drawn(strategy: Any, count: int = 150) -> list[Any]:
    """``count`` faults the strategy generates (no shrinking)."""
    seen: list[Any] = []
    quick = settings(max_examples=count, database=None, phases=[Phase.generate])
    with pytest.raises(NoSuchExample):
        find(strategy, lambda fault: seen.append(fault) and False, settings=quick)
    return seen


def test_probes_raise_each_caught_error_on_the_last_rank_at_its_first_step(snippet: str) -> None:
    """Before the random search: each caught error once, where a one-rank skip shows."""
    probes = [s.faults[0] for s in reach_of(snippet).probes(2, ["raise"])]
    assert Raise("ValueError", MESSAGE, site="lightning.forward", rank=1, step=0) in probes
    assert Raise("FileNotFoundError", MESSAGE, site="torch.load", rank=1, step=1) in probes
    assert reach_of(snippet).probes(2, ["delay"]) == []


@pytest.mark.usefixtures("lightning_in_process")
def test_a_baseline_run_records_the_handlers_around_each_site(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """In one process: the reach of a program that catches JSON and key errors around its
    forward names them there (under ``trace=True`` too, whose spans are still recorded)."""
    import importlib.util

    monkeypatch.chdir(tmp_path)
    spec = importlib.util.spec_from_file_location(
        "caught_bad_record", ROOT / "examples" / "shapes" / "caught_bad_record.py"
    )
    assert spec is not None and spec.loader is not None
    program = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(program)
    with chaoslight.inject(None, checks=[ReachRecorder()], trace=True) as run:
        program.train()
    reach = Reach.from_outcome(run)
    assert reach is not None
    assert {(site, name) for site, name, _ in reach.caught} == {
        ("lightning.forward", "json.decoder:JSONDecodeError"),
        ("lightning.forward", "KeyError"),
    }
    assert any(event.kind == "enter" for event in run.events)  # the trace still records


@pytest.mark.slow
@pytest.mark.parametrize(("function", "found"), [("train_buggy", True), ("train_fixed", False)])
def test_default_fuzz_finds_the_one_rank_skip_and_not_the_agreed_one(
    world2: Any, function: str, found: bool
) -> None:
    """Default fuzz raises the caught ValueError inside the try on one rank: the lone skip
    hangs the job; the twin that all-reduces a skip flag recovers on every rank."""
    target = f"{ROOT / 'examples' / 'bugs' / 'caught_value_error_skip.py'}:{function}"
    _, failure = chaoslight.fuzz(target, world=world2, max_examples=12, seed=0)
    assert (failure is not None) is found, failure and failure.reason
    if failure is not None:
        assert [f.exception for f in failure.schedule] == ["ValueError"]
