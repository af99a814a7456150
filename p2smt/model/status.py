"""The closed set of outcomes of a solver run (a ``StrEnum``: JSON output shows the plain words)."""

from __future__ import annotations

from enum import StrEnum


class SolveStatus(StrEnum):
    """``complete``: every length exhausted; ``unknown``: a solver call gave up; ``optimal`` and
    ``infeasible``: a bound strategy proved its list cheapest, or that no program exists;
    ``conjectured``: every program returned is valid, but that no other exists is not proved (the
    symmetric engine's generic instance; the result's ``rests_on`` says what is known)."""

    COMPLETE = "complete"
    CONJECTURED = "conjectured"
    UNKNOWN = "unknown"
    OPTIMAL = "optimal"
    INFEASIBLE = "infeasible"


class ProofStatus(StrEnum):
    """The verdict on one fixed plan."""

    PROVED = "proved"
    COUNTEREXAMPLE = "counterexample"
    UNKNOWN = "unknown"
