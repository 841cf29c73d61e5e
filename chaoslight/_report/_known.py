"""The block a known framework issue gets in a report: printed apart from the user's own
failures, once, with its workaround."""

from __future__ import annotations


def known_issue_block(
    title: str, schedule: str, evidence: str, notes: tuple[str, str, str]
) -> list[str]:
    """``title`` names the package, version and issue; ``notes`` are its signature,
    workaround and reference."""
    signature, workaround, reference = notes
    return [
        f"known issue in {title}",
        f"  schedule: {schedule or '(none: a fault-free run shows it)'}",
        f"  evidence: {evidence}",
        f"  signature: {signature}",
        f"  workaround: {workaround}",
        f"  reference: {reference}",
    ]
