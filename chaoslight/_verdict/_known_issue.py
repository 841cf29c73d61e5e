"""What a known framework issue is, and which Lightning release a run ran.

A ``KnownIssue`` is one entry of the table in ``_known.py``: the release range it lives
in, its signature (a predicate on the failed run), its reference and its workaround. A
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
from typing import Any

from chaoslight._report import known_issue_block
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
class KnownIssue:
    """One framework bug: where it lives, how to recognise it, what to do about it.

    ``versions`` is ``(first, last)``, inclusive, compared on (major, minor, patch);
    ``matches(outcome, deliveries)`` is the signature, given a run the oracle failed
    and the SIGTERMs it delivered that the package's own handler took (none, for an
    issue that needs no signal). A signature reads the evidence the run left (the hung
    ranks' stacks, the ranks' errors, the faults that fired, where each rank stopped)
    and matches only the documented shape: anything wider hides the program's bugs.
    """

    key: str
    package: str  # the distribution whose handler ran: "pytorch-lightning" or "lightning"
    versions: tuple[str, str]
    title: str
    signature: str  # the signature in words, as the report prints it
    reference: str
    workaround: str
    matches: Callable[[Any, list[Delivery]], bool]

    def covers(self, package: str, version: str) -> bool:
        first, last = (parse_version(v) for v in self.versions)
        return package in _ALIASES.get(self.package, (self.package,)) and (
            first <= parse_version(version) <= last
        )


# The two distributions ship the same trainer code under two names.
_ALIASES = {"pytorch-lightning": ("pytorch-lightning", "lightning")}


@dataclass(frozen=True)
class KnownFinding:
    """A known issue met by a campaign: the issue, the package met, and the run."""

    issue: KnownIssue
    package: str
    version: str
    schedule: Any
    verdict: Any

    def report(self) -> list[str]:
        """The known-issue block (``_report/_known.py``)."""
        issue = self.issue
        return known_issue_block(
            f"{self.package} {self.version}: {issue.title}",
            self.schedule.to_text(),
            self.verdict.reason,
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


def package_in_stacks(outcome: Any) -> tuple[str, str] | None:
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
