"""Layer 7, the verdict: what a run means.

The fault-aware oracle (``judge``, ``Verdict``, its ``Rule``) judges a run by what a correct
program may do under exactly the faults that fired; the known framework issues
(``KNOWN_ISSUES``, ``match_known``) set apart what Lightning itself causes. Its input is the
record of a run (``Outcome``, layer 4) and the checks' violations (layer 6); it decides
nothing about which runs to try, which is the search's (layer 8).
"""

from __future__ import annotations

from chaoslight._verdict._known import KNOWN_ISSUES, KnownFinding, match_known
from chaoslight._verdict._oracle import Rule, Verdict, judge

__all__ = ["KNOWN_ISSUES", "KnownFinding", "Rule", "Verdict", "judge", "match_known"]
