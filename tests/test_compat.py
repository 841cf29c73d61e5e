"""The Lightning chaoslight can patch: an unsupported one fails loudly, a supported one works.

The fast tests break one private Lightning internal in this process (monkeypatch) and check
that entering ``inject()`` refuses with one line naming the package, its version and the
internal, leaving nothing patched. The slow test runs ``benchmarks/compat.py`` against
pytorch-lightning 2.5.1 in a throwaway venv (cached between runs).
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import chaoslight
from chaoslight import ChaosError, Schedule, _runtime, _sites
from chaoslight._sites import _versions
from chaoslight._sites._core import PatchPoint

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "compat.py"
EXIT_NO_INDEX = 3  # benchmarks/compat.py: a venv is needed and the index cannot be reached
PACKAGES = {"pytorch_lightning": "pytorch-lightning", "lightning.pytorch": "lightning"}


@pytest.fixture
def fresh_check(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The once-per-process check forgets what it verified, so it runs again here."""
    monkeypatch.setattr(_versions, "_VERIFIED", set())
    return monkeypatch


def attributes() -> dict[tuple[int, str], Any]:
    """Every patch point's attribute as stored, resolved without the version check."""
    return {
        (id(owner), point.attribute): vars(owner).get(point.attribute, _sites.MISSING)
        for point in _sites.PATCH_POINTS
        for owner in PatchPoint.owners(point)
    }


def _swapped_interrupt(trainer_fn: Any, trainer: Any, *args: Any, **kwargs: Any) -> Any:
    return trainer_fn(*args, **kwargs)


def _fit_impl_without_ckpt_path(self: Any, model: Any, train_dataloaders: Any = None) -> None:
    return None


def _drop_next(mp: pytest.MonkeyPatch, flavour: str) -> None:
    fetchers = importlib.import_module(f"{flavour}.loops.fetchers")
    mp.delattr(fetchers._DataFetcher, "__next__")


def _swap_interrupt(mp: pytest.MonkeyPatch, flavour: str) -> None:
    call = importlib.import_module(f"{flavour}.trainer.call")
    mp.setattr(call, "_call_and_handle_interrupt", _swapped_interrupt)


def _drop_ckpt_path(mp: pytest.MonkeyPatch, flavour: str) -> None:
    trainer = importlib.import_module(f"{flavour}.trainer.trainer")
    mp.setattr(trainer.Trainer, "_fit_impl", _fit_impl_without_ckpt_path)


BREAKS: dict[str, tuple[Callable[[pytest.MonkeyPatch, str], None], str]] = {
    "missing": (_drop_next, "loops.fetchers._DataFetcher.__next__ is missing"),
    "reordered": (
        _swap_interrupt,
        "trainer.call._call_and_handle_interrupt(trainer_fn, trainer, args, kwargs) "
        "does not start with (trainer, trainer_fn)",
    ),
    "no ckpt_path": (_drop_ckpt_path, "trainer.trainer.Trainer._fit_impl has no parameter"),
}


@pytest.mark.parametrize("flavour", sorted(PACKAGES))
@pytest.mark.parametrize("broken", sorted(BREAKS))
def test_a_broken_internal_fails_loudly_and_patches_nothing(
    fresh_check: pytest.MonkeyPatch, flavour: str, broken: str
) -> None:
    """A missing or reshaped private internal makes inject() raise one line naming the
    package, its version, the internal and the supported range; nothing stays patched."""
    brk, internal = BREAKS[broken]
    brk(fresh_check, flavour)
    version = importlib.import_module(flavour).__version__
    before = attributes()
    injection = chaoslight.inject(Schedule())
    with pytest.raises(ChaosError) as raised:
        injection.__enter__()
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"{PACKAGES[flavour]} {version} is not supported by chaoslight: ")
    assert f"{flavour}.{internal}" in message
    assert f"pip install '{PACKAGES[flavour]}{_versions.SUPPORTED}'" in message
    after = attributes()
    assert after.keys() == before.keys()
    assert [key for key in before if after[key] is not before[key]] == []  # identity: wrapt
    assert _runtime.active() is None
    assert _sites.STATE.dispatcher is None


def test_a_release_outside_the_range_with_the_same_internals_is_let_through(
    fresh_check: pytest.MonkeyPatch,
) -> None:
    """The check is on the internals chaoslight uses, not on the version number."""
    import pytorch_lightning

    fresh_check.setattr(pytorch_lightning, "__version__", "2.99.0")
    with chaoslight.inject(Schedule()):
        pass
    assert ("pytorch_lightning", "2.99.0") in _versions._VERIFIED


def test_the_check_runs_once_per_process_and_release(fresh_check: pytest.MonkeyPatch) -> None:
    """A second inject() does not inspect Lightning again: the check costs once."""
    inspected: list[str] = []
    problem = _versions.Internal.problem

    def counting(self: _versions.Internal, flavour: str) -> str | None:
        inspected.append(flavour)
        return problem(self, flavour)

    fresh_check.setattr(_versions.Internal, "problem", counting)
    with chaoslight.inject(Schedule()):
        pass
    first = len(inspected)
    with chaoslight.inject(Schedule()):
        pass
    assert first == len(_versions.INTERNALS) * len(PACKAGES)
    assert len(inspected) == first


@pytest.mark.slow
def test_compat_script_passes_every_smoke_step_on_pytorch_lightning_2_5_1(
    tmp_path: Path,
) -> None:
    """benchmarks/compat.py installs pytorch-lightning 2.5.1 beside this torch and every
    smoke step (sites, restore, World, resume, crash) passes on it; a preemption of one
    rank is named as 2.5.1's known SIGTERM issue (#20806), which `fuzz` sets apart, and the
    agreement that stops every rank together passes a strict search."""
    output = tmp_path / "compat.md"
    command = [sys.executable, str(SCRIPT), "--version", "pytorch-lightning==2.5.1"]
    done = subprocess.run(
        [*command, "--output", str(output)], capture_output=True, text=True, timeout=900
    )
    if done.returncode == EXIT_NO_INDEX:
        pytest.skip(done.stderr.strip().splitlines()[-1])
    assert done.returncode == 0, done.stderr[-4000:]
    rows = [line for line in output.read_text().splitlines() if line.startswith("| pytorch-")]
    assert len(rows) == 1 and rows[0].startswith("| pytorch-lightning 2.5.1 | ok |")
    cells = [cell.strip() for cell in rows[0].strip("|").split("|")]
    assert "FAILED" not in rows[0] and cells.count("ok") >= 5
    assert "ok: known issue lightning-sigterm-alone" in cells
    assert "ok: lightning-sigterm-alone apart; agreement clean with strict" in cells
