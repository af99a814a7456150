"""A deterministic bound on one proof's work: Z3's resource units (``rlimit``) over every solver of a context.

Z3 counts resource units per context (every solver of one context advances the same counter) and a
solver's ``rlimit`` parameter lets one check spend at most that many more. A budget arms each check with
what is left, so a proof stops after the same work on every machine, unlike a wall-clock timeout; the
result then says the proof was not finished, never that no program exists.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from p2smt.interrupts import received

if TYPE_CHECKING:  # the CLI reads the default without importing Z3
    import z3

__all__ = ["DEFAULT_PROOF_BUDGET", "UNITS", "ResourceBudget"]

UNITS = 1_000_000
"""``--proof-budget`` counts millions of Z3 resource units."""
DEFAULT_PROOF_BUDGET = 100
"""Millions of units per placement's proof: about 35-45 s of Z3 on the 2-core AMD EPYC of docs/results, where
three-level sets of 1,635 programs spend 31-47 M (10-25 s) and P²'s placements 1-2 M; four-level sets of
7,636 programs need more than 200 M and are reported not certified unless the budget is raised."""


def spent(solver: z3.Solver) -> int:
    """The units the solver's context has counted so far (0 before any work)."""
    from p2smt.smt.statistics import statistics

    return int(statistics(solver, "rlimit count".__eq__).get("rlimit count", 0))


class ResourceBudget:
    """``units`` Z3 resource units for one proof (None: unlimited, still counted), from the first ``arm``."""

    def __init__(self, units: int | None):
        self.units = units
        self._start: int | None = None
        self._last = 0
        self.reason: str | None = None  # Z3's reason_unknown after the last check that gave no answer

    def arm(self, solver: z3.Solver) -> bool:
        """Before a check: let ``solver`` spend at most what is left (True), or report nothing left (False);
        nothing is left once a stop signal came (a worker thread's proof then ends at its next check)."""
        if received() is not None:
            return False
        now = spent(solver)
        if self._start is None:
            self._start = now
        self._last = now
        left = 0 if self.units is None else self.units - (now - self._start)  # Z3's rlimit 0: no limit
        if self.units is not None and left <= 0:
            return False
        solver.set("rlimit", left)  # set either way: a limited proof searches as an unlimited one does
        return True

    def note(self, solver: z3.Solver) -> None:
        """After a check: record what the context has spent (``used`` and ``exhausted`` read it) and why Z3
        gave no answer, if it did not."""
        self._last = spent(solver)
        reason = solver.reason_unknown()
        self.reason = reason if reason and reason != "unknown" else self.reason

    @property
    def used(self) -> int:
        return 0 if self._start is None else self._last - self._start

    @property
    def exhausted(self) -> bool:
        """Whether the proof spent its whole budget (a check it armed may have stopped for that)."""
        return self.units is not None and self.used >= self.units
