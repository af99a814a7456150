"""The engine-facing synthesis problem: devices, goal groups and candidate instructions as plain groups.

Engines (enumerative, Z3 encodings) see only this value, never the DSL or the hierarchy, so the
specification (the DSL) stays separate from the encodings that search over it.
"""

from __future__ import annotations

from dataclasses import dataclass

from p2smt.model.collectives import Collective, Group


@dataclass(frozen=True)
class Candidate:
    """One deduplicated instruction: its DSL text, its collective and its groups (rank order)."""

    label: str
    collective: Collective
    groups: tuple[Group, ...]


@dataclass(frozen=True)
class SynthesisProblem:
    """Reduce over ``goal_groups`` on ``num_devices`` devices (= chunks = contributors).

    Initial state: device i holds column i in every row. Goal: every row of device i holds exactly
    the columns of the goal group containing i. A program is a sequence of candidate indices.
    ``require_progress``: every group of every step must change some member's state.
    """

    num_devices: int
    goal_groups: tuple[Group, ...]
    candidates: tuple[Candidate, ...]
    require_progress: bool = True

    def label(self, program: tuple[int, ...]) -> str:
        return "; ".join(self.candidates[i].label for i in program)


def canonical_order(programs: list[tuple[int, ...]] | set[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """The one order every engine reports programs in: by length, then by candidate indices."""
    return sorted(programs, key=lambda p: (len(p), p))
