"""Lightning's silent bugs in the known-issue table, tried on a buggy and a fixed release.

    python benchmarks/known_issue_releases.py [--cache DIR] [--entry KEY ...]

For each entry of ``ENTRIES`` (a key of ``KNOWN_ISSUES`` in ``chaoslight/_verdict/_known.py``,
its reproducer in ``examples/known_issues/``, the schedule and checks that show it, a
release that has the bug and one that has the fix) it makes a venv per release under
``--cache`` (default ``/tmp``: ``h4venv-<version>``) that sees this interpreter's packages
(``--system-site-packages`` and a ``.pth`` naming this interpreter's site-packages: the CPU
torch here is reused) and installs only
``lightning==X`` and ``pytorch-lightning==X`` with ``--no-deps`` (pip never touches torch;
both flavours at one release, so a rank's facts name it whichever it imports). In each
venv it runs the reproducer in a 2-rank World (chaoslight as this interpreter has it: the
checkout's editable install; under ``/tmp/chaoslight-multirank.lock``), judges the run
with the oracle and prints one table row per (entry, release, target): the expected
result (the known issue on the buggy release, a clean run on the fixed one, and the
reproducer's ``train_fixed`` twin, the workaround, clean on the buggy release) and what
came back.
Exit status 0 when every row is as expected, 1 otherwise. Needs the package index
(minutes on a first run).
"""

from __future__ import annotations

import argparse
import json
import os
import site
import subprocess
import sys
import textwrap
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCK = "/tmp/chaoslight-multirank.lock"


@dataclass(frozen=True)
class Entry:
    key: str
    target: str  # the reproducer, relative to the checkout
    schedule: str  # the schedule that shows the damage, in its text form ("" for none)
    checks: tuple[str, ...]  # the check that sees the damage; framework-facts is added
    buggy: str
    fixed: str
    # What the train_fixed twin (the workaround) gets on the buggy release: clean, or
    # another issue of that release its workaround does not avoid; None: no code twin
    # (the workaround is an upgrade).
    twin: str | None = "clean"


ENTRIES = (
    Entry(
        "lightning-static-graph-manual-sync",
        "examples/known_issues/static_graph_manual.py:train",
        "",
        ("replicas-in-sync",),
        buggy="2.5.6",
        fixed="2.6.0",
    ),
    Entry(
        "lightning-resume-repeats-batch",
        "examples/known_issues/resume_repeats_batch.py:train",
        "restarts 1\ncrash@lightning.training_step rank=0 step=6",
        ("restart-equivalence",),
        buggy="2.4.0",
        fixed="2.5.0",
        # Checkpoints at epoch ends resume the training exactly; on 2.4.x Lightning's
        # count of completed epochs still ends one short (the next entry).
        twin="known issue lightning-epoch-end-resume-count",
    ),
    Entry(
        "lightning-epoch-end-resume-count",
        "examples/known_issues/resume_repeats_batch.py:train_fixed",
        "restarts 1\ncrash@lightning.training_step rank=0 step=6",
        ("restart-equivalence",),
        buggy="2.4.0",
        fixed="2.5.0",
        twin=None,
    ),
    Entry(
        "lightning-eval-batch-sampler-shuffle-lost",
        "examples/known_issues/eval_batch_sampler_shuffle.py:train",
        "",
        ("data-order",),
        buggy="2.4.0",
        fixed="2.5.0",
    ),
)

# Runs in the venv: one World run of the reproducer, judged; one JSON line on stdout.
_PROBE = textwrap.dedent(
    """
    import json, sys
    import lightning
    from chaoslight import World
    from chaoslight._checks._facts import FrameworkFacts
    from chaoslight._checks._restart import RestartEquivalence
    from chaoslight.checks import DataOrder, ReplicasInSync
    from chaoslight._schedule import Schedule
    from chaoslight._verdict._oracle import judge

    target, schedule, names = sys.argv[1], sys.argv[2], sys.argv[3:]
    by_name = {"replicas-in-sync": ReplicasInSync, "restart-equivalence": RestartEquivalence,
               "data-order": DataOrder}
    checks = [by_name[n]() for n in names] + [FrameworkFacts()]
    plan = Schedule.from_text(schedule) if schedule else None
    with World(size=2) as world:
        outcome = world.run(target, plan, checks=checks, timeout=180)
    verdict = judge(outcome)
    known = verdict.known.issue.key if verdict.known else None
    print(json.dumps({"lightning": lightning.__version__, "failed": verdict.failed,
                      "known": known, "reason": verdict.reason[:300]}))
    """
)


def venv(cache: Path, version: str) -> Path:
    """The venv of one release, made on first use; its python."""
    home = cache / f"h4venv-{version}"
    python = home / "bin" / "python"
    if not (home / ".ready").exists():
        subprocess.run(
            [sys.executable, "-m", "venv", "--system-site-packages", str(home)], check=True
        )
        # Run from a venv, --system-site-packages shows the base interpreter's packages,
        # not this one's (torch, lightning_utilities, chaoslight's editable install): a
        # .pth adds them as a site directory (their own .pth files too), after the new
        # venv's own site-packages, so the pinned release shadows this one's Lightning.
        found = subprocess.run(
            [str(python), "-c", "import site; print(site.getsitepackages()[0])"],
            check=True,
            capture_output=True,
            text=True,
        )
        parents = "; ".join(f"site.addsitedir({path!r})" for path in site.getsitepackages())
        pth = Path(found.stdout.strip()) / "parent-site-packages.pth"
        pth.write_text(f"import site; {parents}\n")
        pins = [f"lightning=={version}", f"pytorch-lightning=={version}"]
        pip = [str(python), "-m", "pip", "install", "-q", "--no-deps", *pins]
        subprocess.run(pip, check=True)
        (home / ".ready").touch()
    return python


def probe(python: Path, entry: Entry) -> dict[str, object]:
    env = dict(os.environ)  # chaoslight: this interpreter's (an editable install of ROOT)
    command = [
        "flock",
        LOCK,
        str(python),
        "-c",
        _PROBE,
        entry.target,
        entry.schedule,
        *entry.checks,
    ]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    result: dict[str, object] = json.loads(lines[-1])
    return result


def got(result: dict[str, object]) -> str:
    if "error" in result:
        return f"error: {result['error']}"
    if not result["failed"]:
        return "clean"
    return f"known issue {result['known']}" if result["known"] else f"FAILED: {result['reason']}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=Path("/tmp"))
    parser.add_argument("--entry", action="append", default=[], help="a key; default: every entry")
    args = parser.parse_args(argv)
    rows = []
    for entry in ENTRIES:
        if args.entry and entry.key not in args.entry:
            continue
        twin = entry.target.rpartition(":")[0] + ":train_fixed"
        rows_of_entry = [
            (entry.buggy, entry.target, f"known issue {entry.key}"),
            (entry.fixed, entry.target, "clean"),
        ]
        if entry.twin is not None:  # the workaround, on the release with the bug
            rows_of_entry.append((entry.buggy, twin, entry.twin))
        for version, target, expected in rows_of_entry:
            result = probe(venv(args.cache, version), replace(entry, target=target))
            rows.append(
                (entry.key, f"{version} {target.rpartition(':')[2]}", expected, got(result))
            )
            print(f"{rows[-1]}: {result.get('reason', '')}", file=sys.stderr)
    print("| entry | release, target | expected | got |\n|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0 if all(row[2] == row[3] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
