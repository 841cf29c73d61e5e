"""Reference pages from the schedule-layer registries: faults, sites, checks, formats.

Everything is enumerated from ``FAULT_KINDS``, ``SITES``, the patch points and
``CHECKS``: a kind, site or check added to a registry appears here with no edit. Every
example is built from the code and read back; one that does not round-trip is reported
as a build warning (an error under ``mkdocs build --strict``).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Iterator
from typing import Any

from _ref_markdown import code, docstring, first_line, inline, page, table
from mkdocs.plugins import get_plugin_logger

from chaoslight._checks import CHECKS
from chaoslight._schedule import FAULT_KINDS, SITES, Fault, MemoryBudget, Schedule, _textform
from chaoslight._search._failure import Failure, default_specs
from chaoslight._sites import PATCH_POINTS
from chaoslight._sites._lightning import FLAVOURS
from chaoslight._verdict._known import KNOWN_ISSUES

log = get_plugin_logger("chaoslight-reference")

# The base class holds exactly the trigger; every kind adds its own fields after it.
TRIGGER = tuple(f.name for f in dataclasses.fields(Fault))


def example_site(cls: type[Fault]) -> str | None:
    """The first catalogue site this kind may fire at (some kinds need a capability)."""
    for name, info in SITES.items():
        if cls.needs is None or cls.needs in info.capabilities:
            return name
    return None


def example_fault(cls: type[Fault]) -> Fault | None:
    """An instance with the kind's defaults on rank 0 at step 1, or None if it needs more."""
    site = example_site(cls)
    if site is None:
        return None
    try:
        return cls(site=site, rank=0, step=1)
    except Exception as exc:  # a kind with required parameters: say so, do not guess them
        log.info("no default example for %s: %s", cls.kind, exc)
        return None


def round_trips(schedule: Schedule) -> bool:
    """Whether the text and JSON forms both read back as the same schedule."""
    text_ok = Schedule.parse(schedule.to_text()) == schedule
    json_ok = Schedule.from_json(schedule.to_json()) == schedule
    if not (text_ok and json_ok):
        log.warning("does not round-trip (text %s, JSON %s): %s", text_ok, json_ok, schedule)
    return text_ok and json_ok


def _default(f: dataclasses.Field[Any]) -> str:
    if f.default is not dataclasses.MISSING:
        return code(repr(f.default))
    if f.default_factory is not dataclasses.MISSING:
        return code(repr(f.default_factory()))
    return "required"


def _field_rows(cls: type[Fault], trigger: bool) -> Iterator[list[str]]:
    """The trigger fields, or the kind's own ones."""
    for f in dataclasses.fields(cls):
        if (f.name in TRIGGER) == trigger:
            yield [code(f.name), code(f.type), _default(f)]


def _able_sites(cls: type[Fault]) -> str:
    if cls.needs is None:
        return "any site"
    able = [name for name, info in SITES.items() if cls.needs in info.capabilities]
    return f"a *{cls.needs}* site ({len(able)}: " + ", ".join(code(n) for n in able) + ")"


def _fault_section(kind: str, cls: type[Fault]) -> str:
    rows = list(_field_rows(cls, trigger=False))
    params = table(["field", "type", "default"], rows) if rows else "No parameters of its own.\n"
    fault = example_fault(cls)
    example = "No default example: the kind has required parameters.\n"
    if fault is not None and round_trips(Schedule([fault])):
        as_json = json.dumps(Schedule([fault]).to_dict()["faults"][0])
        example = (
            f"Example, `{cls.__name__}(site={fault.site!r}, rank=0, step=1)`: its text form "
            f"(fields at their defaults are left out) and its JSON (every field):\n\n"
            f"```\n{fault}\n```\n\n```json\n{as_json}\n```\n"
        )
    return "\n".join(
        [
            f"## `{kind}`: `{cls.__name__}` {{#{kind}}}\n",
            docstring(cls) + "\n",
            f"Fires at: {_able_sites(cls)}.\n",
            params,
            example,
        ]
    )


def faults_page() -> str:
    trigger = table(["field", "type", "default"], _field_rows(Fault, trigger=True))
    kinds = table(
        ["kind", "class", "what it does"],
        ([f"[`{k}`](#{k})", code(c.__name__), first_line(c)] for k, c in FAULT_KINDS.items()),
    )
    intro = (
        f"{len(FAULT_KINDS)} fault kinds, as `chaoslight faults` lists them. Each is a frozen "
        "dataclass importable from `chaoslight`; its text-form name is the kind. What a "
        "step is, and the errors bad values get: [Schedules and triggers](schedules.md).\n\n"
        + kinds
        + "\n## The trigger, shared by every kind\n\n"
        + docstring(Fault)
        + "\n\n"
        + trigger
    )
    return page("Fault kinds", intro, (_fault_section(k, c) for k, c in FAULT_KINDS.items()))


def _owner(path: str, attribute: str) -> str:
    """``module:Qual`` plus attribute as one dotted name, both Lightning flavours as ``<pkg>``."""
    for flavour in FLAVOURS:
        if path.startswith(flavour + "."):
            path = "<pkg>" + path[len(flavour) :]
    return f"{path.replace(':', '.')}.{attribute}"


def _patched(site: str) -> str:
    names: list[str] = []
    for point in PATCH_POINTS:
        if site in point.sites:
            for path in point.owner_paths:
                name = code(_owner(path, point.attribute))
                if point.subclasses:
                    name += " and subclasses that override it"
                if name not in names:
                    names.append(name)
    if not names:
        log.warning("site %s has no patch point: nothing would fire there", site)
    return ", ".join(names)


def _capability_kinds() -> str:
    gated = [f"{code(k)} needs a *{c.needs}* site" for k, c in FAULT_KINDS.items() if c.needs]
    free = [code(k) for k, c in FAULT_KINDS.items() if not c.needs]
    return "; ".join(gated) + "; " + ", ".join(free) + " fire at any site"


def sites_page() -> str:
    groups: dict[str, list[str]] = {}
    for name in SITES:
        groups.setdefault(name.split(".")[0], []).append(name)
    sections = []
    for prefix, names in groups.items():
        rows = (
            [
                code(n),
                inline(SITES[n].description),
                ", ".join(sorted(SITES[n].capabilities)) or "—",
                _patched(n),
            ]
            for n in names
        )
        header = ["site", "what goes through it", "capabilities", "patched"]
        sections.append(f"## `{prefix}.*` ({len(names)} sites)\n\n" + table(header, rows))
    intro = (
        f"{len(SITES)} sites, as `chaoslight sites` and `chaoslight.sites()` list them. "
        f"A site's *capabilities* say which fault kinds may fire there: {_capability_kinds()}. "
        "*Patched* is the attribute a wrapt wrapper replaces while a schedule names the "
        f"site; `<pkg>` stands for each Lightning flavour ({', '.join(FLAVOURS)}) that is "
        "installed. Why each patch point is where it is: "
        "[How injection works](../explanation/injection.md)."
    )
    return page("Sites", intro, sections)


def _call(cls: type) -> str:
    """``Name(param=default, ...)``: how a check is built."""
    params = inspect.signature(cls).parameters.values()
    shown = ", ".join(p.name if p.default is p.empty else f"{p.name}={p.default!r}" for p in params)
    return f"{cls.__name__}({shown})"


def checks_page() -> str:
    summary = table(
        ["name", "class", "holds when"],
        ([f"[`{n}`](#{n})", code(c.__name__), first_line(c)] for n, c in CHECKS.items()),
    )
    sections = [
        f"## `{name}` {{#{name}}}\n\n`{_call(cls)}`\n\n{docstring(cls)}\n"
        for name, cls in CHECKS.items()
    ]
    intro = (
        f"{len(CHECKS)} built-in checks, importable from `chaoslight.checks` and named on the "
        "command line with `--check NAME`. What each catches and the usual cause: "
        "[Checks](../explanation/checks.md); writing one: "
        "[Write your own check](../how-to/custom-check.md).\n\n" + summary
    )
    return page("Checks", intro, sections)


def _example_schedule() -> Schedule:
    faults = [f for f in (example_fault(c) for c in FAULT_KINDS.values()) if f is not None]
    return Schedule(faults, memory_budget=MemoryBudget(512 * 2**20))


def formats_page() -> str:
    schedule = _example_schedule()
    ok = round_trips(schedule)
    units = ", ".join(code(u) for u in _textform._UNITS)
    methods = table(
        ["method", "what it does"],
        (
            [code(f"Schedule.{m}"), first_line(getattr(Schedule, m)) or "—"]
            for m in ("parse", "load", "save", "to_text", "to_json", "from_json")
        ),
    )
    failure = Failure(schedule=Schedule(list(schedule)[:1]), target="train.py:main")
    failure = dataclasses.replace(failure, checks=default_specs(), reason="…")
    sections = [
        "## The text form\n\n" + docstring(_textform) + "\n",
        f"Size units: {units}.\n",
        "## JSON\n\nEvery field, with the schema version `chaoslight_schedule`.\n",
        "## One schedule in both forms\n\n"
        f"One fault of every kind at its defaults, and a memory budget. When these docs were "
        f"built it was parsed back from each form and compared equal "
        f"({'it did' if ok else 'IT DID NOT'}).\n\n"
        f"```\n{schedule.to_text()}\n```\n\n```json\n{schedule.to_json()}\n```\n",
        "## Reading and writing\n\n" + methods,
        "## The failure file\n\n"
        "`chaoslight fuzz --out FILE` (default `chaoslight-failure.json`) writes the schedule "
        "with what `chaoslight replay` needs to judge it again. "
        + docstring(Failure)
        + "\n\n```json\n"
        + json.dumps(json.loads(failure.to_json()), indent=2)
        + "\n```\n",
    ]
    intro = (
        "A schedule has two written forms, both read by `Schedule.parse`, "
        "`Schedule.load` and every `--schedule` option."
    )
    return page("Schedule formats", intro, sections)


def known_issues_page() -> str:
    """Every entry of the known framework issues table, as ``fuzz`` reports it."""
    sections = [
        f"## {issue.key}\n\n**{inline(issue.title)}**\n\n"
        + table(
            ["", ""],
            [
                ["versions", _versions(issue)],
                ["signature", inline(issue.signature)],
                ["workaround", inline(issue.workaround)],
                ["reference", f"<{issue.reference.split()[0]}>"],
            ],
        )
        for issue in KNOWN_ISSUES
    ]
    intro = (
        "Failures Lightning (or the Python interpreter) itself causes. `chaoslight fuzz` "
        'prints a finding that matches one of these once, under "known issue in <package> '
        '<version>", with its schedule, '
        "evidence and workaround; the exit status stays 0 and the search goes on for the "
        "program's own bugs. `--strict` (pytest: `--chaos-strict`) makes it a failure. A "
        "finding that matches no entry is the program's, even when every frame is in "
        "Lightning. The table lives in `chaoslight/_verdict/_known.py`; "
        "`examples/known_issues/` and `examples/catalogue/preemption.py` show them."
    )
    return page("Known framework issues", intro, sections)


def _versions(issue: Any) -> str:
    """``cpython 3.8.0 to 3.11.9 (fixed in 3.8.20, ...)``: the range the table covers."""
    covered = f"{issue.package} {issue.versions[0]} to {issue.versions[1]}"
    return covered + (f" (fixed in {', '.join(issue.fixed_in)})" if issue.fixed_in else "")


def pages() -> dict[str, str]:
    return {
        "reference/faults.md": faults_page(),
        "reference/sites.md": sites_page(),
        "reference/checks.md": checks_page(),
        "reference/formats.md": formats_page(),
        "reference/known-issues.md": known_issues_page(),
    }
