"""One-line descriptions of every site and every fault kind, for listings and docs."""

from __future__ import annotations

from chaoslight._schedule._catalog import SITES
from chaoslight._schedule._faults import FAULT_KINDS


def site_descriptions() -> dict[str, str]:
    """Every injection site, name to one-line description."""
    return {name: info.description for name, info in SITES.items()}


def fault_descriptions() -> dict[str, str]:
    """Every fault kind, text-form name to one-line description."""
    return {kind: (cls.__doc__ or "").strip().splitlines()[0] for kind, cls in FAULT_KINDS.items()}
