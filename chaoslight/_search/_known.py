"""Known issues of the frameworks chaoslight patches, reported apart from the user's bugs.

As Valgrind ships suppressions for the system libraries, chaoslight ships a table of
failures Lightning itself causes. A finding that matches an entry is reported once per
campaign under "known issues in <package> <version>", with its workaround and upstream
reference, and the search goes on looking for the user's own bugs; ``strict=True``
(``chaoslight fuzz --strict``) makes it a failure like any other. A finding that
matches no entry stays the user's, even when every frame is in Lightning.

Adding an issue is one ``KnownIssue(...)`` in ``KNOWN_ISSUES`` (and its test).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from typing import Any

from chaoslight._search._preemption import Delivery, deliveries
from chaoslight._world._outcome import FAILED, HUNG

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
    issue that needs no signal).
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
        return [
            f"known issue in {self.package} {self.version}: {self.issue.title}",
            f"  schedule: {self.schedule.to_text()}",
            f"  evidence: {self.verdict.reason}",
            f"  signature: {self.issue.signature}",
            f"  workaround: {self.issue.workaround}",
            f"  reference: {self.issue.reference}",
        ]


def _broadcast_in_handler(outcome: Any, taken: list[Delivery]) -> bool:
    """Lightning's handler ran on some rank and the job did not stop together."""
    return bool(taken)


def _stopped_alone(outcome: Any, taken: list[Delivery]) -> bool:
    """A signalled rank raised SIGTERMException while a peer ended otherwise."""
    if not taken:
        return False
    raised = {
        r.rank
        for r in outcome.ranks
        if r.status == FAILED and r.exception is not None and r.exception.type == "SIGTERMException"
    }
    return bool(raised) and len(raised) < len(outcome.ranks)


# A faulthandler frame of Lightning's OnExceptionCheckpoint.on_exception, either flavour.
_ON_EXCEPTION_FRAME = re.compile(
    r"(lightning/pytorch|pytorch_lightning)/callbacks/on_exception_checkpoint\.py\", "
    r"line \d+ in on_exception\b"
)


def _saved_on_exception(outcome: Any, taken: list[Delivery]) -> bool:
    """A rank hung inside OnExceptionCheckpoint.on_exception (save_checkpoint's barrier)."""
    return any(
        r.status == HUNG and _ON_EXCEPTION_FRAME.search(r.stacks or "") for r in outcome.ranks
    )


_WORKAROUND = (
    "stop together by agreement: after Lightning installs its handler (e.g. in "
    "on_train_start) replace it with one that only sets a flag; at every batch start "
    "all-reduce the flag with MAX on every rank and, if set, save a checkpoint, set "
    "trainer.should_stop = True and return -1 from on_train_batch_start "
    "(examples/catalogue/preemption.py:train_fixed)"
)

KNOWN_ISSUES: tuple[KnownIssue, ...] = (
    KnownIssue(
        key="lightning-sigterm-broadcast",
        package="pytorch-lightning",
        versions=("2.5.2", "2.6.99"),
        title="Lightning's SIGTERM handler calls dist.broadcast inside the signal handler",
        signature=(
            "SIGTERM taken by Lightning's handler on some rank, then the ranks did not stop "
            "together: the handler's broadcast pairs with whatever collective a peer is in"
        ),
        reference=(
            "https://github.com/Lightning-AI/pytorch-lightning/pull/20825 (the fix for "
            "issue #20806, released in 2.5.2)"
        ),
        workaround=_WORKAROUND,
        matches=_broadcast_in_handler,
    ),
    KnownIssue(
        key="lightning-sigterm-alone",
        package="pytorch-lightning",
        versions=("2.0.0", "2.5.1"),
        title="a rank that receives SIGTERM stops alone and leaves its peers in a collective",
        signature=(
            "SIGTERM taken by Lightning's handler; one rank raised SIGTERMException while a "
            "peer ended otherwise (a gloo error on CPU, a hang on NCCL)"
        ),
        reference="https://github.com/Lightning-AI/pytorch-lightning/issues/20806",
        workaround=_WORKAROUND,
        matches=_stopped_alone,
    ),
    KnownIssue(
        key="lightning-on-exception-checkpoint",
        package="pytorch-lightning",
        versions=("2.0.0", "2.6.99"),
        title=(
            "OnExceptionCheckpoint saves from the failing rank alone: save_checkpoint's "
            "barrier waits for peers that never come"
        ),
        signature=(
            "a hang in which a rank waits in a collective called from "
            "OnExceptionCheckpoint.on_exception (trainer.save_checkpoint's barrier) while "
            "its peers go on training"
        ),
        reference="https://github.com/Lightning-AI/pytorch-lightning/issues/20187",
        workaround=(
            "under DDP, do not use OnExceptionCheckpoint: save from hooks every rank "
            "reaches (ModelCheckpoint), or in your own on_exception write this rank's own "
            "file with torch.save (no collective) and let the exception go on"
        ),
        matches=_saved_on_exception,
    ),
)


def match_known(outcome: Any, issues: tuple[KnownIssue, ...] = KNOWN_ISSUES) -> Any:
    """The known issue a failed run shows, as ``(issue, package, version)``, or None."""
    taken = [d for d in deliveries(outcome) if d.by_lightning]
    found = _package_of(taken[0]) if taken else _package_in_stacks(outcome)
    if found is None:
        return None
    package, version = found
    for issue in issues:
        if issue.covers(package, version) and issue.matches(outcome, taken):
            return issue, package, version
    return None


def _package_of(delivery: Delivery) -> tuple[str, str]:
    """'lightning (pytorch-lightning 2.6.6)' -> ('pytorch-lightning', '2.6.6')."""
    inside = delivery.handler.partition("(")[2].rstrip(")")
    package, _, version = inside.partition(" ")
    return package, version


# A faulthandler frame in Lightning's trainer, either flavour: the folder it is installed in.
_LIGHTNING_FRAME = re.compile(
    r'File "(?P<site>[^"]+)/(?P<flavour>lightning/pytorch|pytorch_lightning)/'
)


def _package_in_stacks(outcome: Any) -> tuple[str, str] | None:
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
