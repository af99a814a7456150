"""The engine-facing synthesis problem: devices, goal groups and candidate instructions as plain groups.

Engines (enumerative, Z3 encodings) see only this value, never the DSL or the hierarchy, so the
specification (the DSL) stays separate from the encodings that search over it.
"""

from __future__ import annotations

from dataclasses import dataclass

from p2smt.model.collectives import Collective, Group
from p2smt.model.goal import Sharding


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
    ``sharding``: a sharded goal on these devices (docs/semantics.md §6: ReduceScatter/HSDP ends with each
    device's shard only; AllGather also starts from it); None is the AllReduce goal above.
    """

    num_devices: int
    goal_groups: tuple[Group, ...]
    candidates: tuple[Candidate, ...]
    require_progress: bool = True
    sharding: Sharding | None = None

    def refuse_sharded(self, what: str) -> None:
        """One line instead of a silent AllReduce proof when ``what`` (an engine, encoding or rule) knows only
        the AllReduce goal."""
        from p2smt.errors import P2Error

        if self.sharding is not None:
            raise P2Error(f"{what} does not take the {self.sharding.kind.value} goal (docs/semantics.md §6 lists "
                          "what does)")

    def label(self, program: tuple[int, ...]) -> str:
        return "; ".join(self.candidates[i].label for i in program)


def canonical_order(programs: list[tuple[int, ...]] | set[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """The one order every engine reports programs in: by length, then by candidate indices."""
    return sorted(programs, key=lambda p: (len(p), p))
