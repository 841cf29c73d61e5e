"""What a known framework issue is, what it claims of a run, and which Lightning release
a run ran.

A ``KnownIssue`` is one entry of the table in ``_known.py``: the release range it lives
in, its signature, its reference and its workaround. Its signature does not judge a run
as a whole: it says which **symptoms** of the run the framework's bug explains
(``Claimed``: the ranks whose end it explains, the check violations it explains), read
from the evidence whatever other faults fired; the oracle judges the rest as if those
symptoms were not there. A ``KnownClaim`` is one issue's claim on one run; a
``KnownFinding`` is one met by a campaign. The release a run ran comes from the handler
that took its SIGTERM, from the Lightning installation its hung ranks' stacks run, or
from the facts the ranks recorded of themselves (``_known_silent.package_in_facts``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata

from chaoslight._report import Outcome, known_issue_block
from chaoslight._runtime import Violation
from chaoslight._schedule import Schedule
from chaoslight._verdict._preemption import Delivery

Version = tuple[int, ...]


def parse_version(text: str) -> Version:
    """'2.5.1' -> (2, 5, 1); a suffix such as 'rc1' or '.post0' is ignored."""
    numbers = []
    for part in text.split(".")[:3]:
        leading = re.match(r"\d+", part)
        if leading is None:
            break
        numbers.append(int(leading.group()))
    return tuple(numbers)


@dataclass(frozen=True)
class Claimed:
    """The symptoms of one run a known issue explains: the ranks whose end (a failure, a
    hang, a release, a crash) its bug explains, and the check violations it explains.
    Nothing else of the run is its: the oracle judges the rest."""

    ranks: frozenset[int] = frozenset()
    violations: tuple[Violation, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.ranks or self.violations)

    def __or__(self, other: Claimed) -> Claimed:
        extra = tuple(v for v in other.violations if v not in self.violations)
        return Claimed(self.ranks | other.ranks, self.violations + extra)


NOTHING = Claimed()

# A signature: given a run and the SIGTERMs its package's own handler took there (none,
# for an issue that needs no signal), what of the run the issue explains.
Signature = Callable[[Outcome, list[Delivery]], Claimed]


@dataclass(frozen=True)
class KnownIssue:
    """One framework bug: where it lives, how to recognise it, what to do about it.

    ``versions`` is ``(first, last)``, inclusive, compared on (major, minor, patch);
    ``claims(outcome, deliveries)`` is the signature (``Signature``). It reads the
    evidence the run left (the hung ranks' stacks, the ranks' errors, where each rank
    stopped, what a violation compares) and claims only the symptoms the documented
    bug produces, whatever else fired: anything wider hides the program's bugs, and a
    claim that needs nothing else to have fired is what keeps a second fault from
    turning the framework's bug into the program's.
    """

    key: str
    package: str  # the distribution whose handler ran ("pytorch-lightning"), or "cpython"
    versions: tuple[str, str]
    title: str
    signature: str  # the signature in words, as the report prints it
    reference: str
    workaround: str
    claims: Signature
    # Releases of a maintenance line past ``versions``' start that have the fix: a version
    # of the same major.minor at or past one of these is not covered.
    fixed_in: tuple[str, ...] = ()

    def matches(self, outcome: Outcome, taken: list[Delivery]) -> bool:
        """Whether it claims anything of ``outcome``."""
        return bool(self.claims(outcome, taken))

    def covers(self, package: str, version: str) -> bool:
        first, last = (parse_version(v) for v in self.versions)
        met = parse_version(version)
        fixed = any(
            met[:2] == parse_version(f)[:2] and met >= parse_version(f) for f in self.fixed_in
        )
        return package in _ALIASES.get(self.package, (self.package,)) and (
            first <= met <= last and not fixed
        )


# The two distributions ship the same trainer (and Fabric) code under two names.
_ALIASES = {
    "pytorch-lightning": ("pytorch-lightning", "lightning"),
    "lightning-fabric": ("lightning-fabric", "lightning"),
}


@dataclass(frozen=True)
class KnownClaim:
    """One known issue's claim on one run: the issue, the release the run ran, and the
    symptoms it explains (``Claimed``)."""

    issue: KnownIssue
    package: str
    version: str
    claimed: Claimed = NOTHING

    def explains(self) -> str:
        """``lightning-sigterm-broadcast (pytorch-lightning 2.6.6)``."""
        return f"{self.issue.key} ({self.package} {self.version})"


@dataclass(frozen=True)
class KnownFinding:
    """A known issue met by a campaign: the issue, the package met, the schedule of the
    run it was met in and what it explained there (``Verdict.known_findings``)."""

    issue: KnownIssue
    package: str
    version: str
    schedule: Schedule
    reason: str

    def report(self) -> list[str]:
        """The known-issue block (``_report/_known.py``)."""
        issue = self.issue
        return known_issue_block(
            f"{self.package} {self.version}: {issue.title}",
            self.schedule.to_text(),
            self.reason,
            (issue.signature, issue.workaround, issue.reference),
        )


def package_of(delivery: Delivery) -> tuple[str, str]:
    """'lightning (pytorch-lightning 2.6.6)' -> ('pytorch-lightning', '2.6.6')."""
    inside = delivery.handler.partition("(")[2].rstrip(")")
    package, _, version = inside.partition(" ")
    return package, version


# A faulthandler frame in Lightning's trainer, either flavour: the folder it is installed in.
_LIGHTNING_FRAME = re.compile(
    r'File "(?P<site>[^"]+)/(?P<flavour>lightning/pytorch|pytorch_lightning)/'
)


def package_in_stacks(outcome: Outcome) -> tuple[str, str] | None:
    """The Lightning distribution whose code the hung ranks' stacks run, and its version,
    read from that installation (the ranks' environment, which need not be this one)."""
    for result in outcome.ranks:
        frame = _LIGHTNING_FRAME.search(result.stacks or "")
        if frame is not None:
            package = (
                "lightning" if frame["flavour"] == "lightning/pytorch" else "pytorch-lightning"
            )
            version = _installed_version(frame["site"], package)
            return (package, version) if version is not None else None
    return None


@lru_cache(maxsize=8)
def _installed_version(site: str, package: str) -> str | None:
    for distribution in metadata.distributions(path=[site]):
        if distribution.metadata["Name"].lower() == package:
            return distribution.version
    return None
