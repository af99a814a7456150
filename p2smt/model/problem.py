"""The engine-facing synthesis problem: devices, goal groups and candidate instructions as plain groups.

Engines (enumerative, Z3 encodings) see only this value, never the DSL or the hierarchy, so the
specification (the DSL) stays separate from the encodings that search over it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, TypeVar

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
    ``hierarchy``: the synthesis hierarchy it came from (or None), for encodings that solve a
    re-sized copy of the problem (``representative``); not part of the problem's identity.
    """

    num_devices: int
    goal_groups: tuple[Group, ...]
    candidates: tuple[Candidate, ...]
    require_progress: bool = True
    hierarchy: Any = field(default=None, compare=False, repr=False)

    def label(self, program: tuple[int, ...]) -> str:
        return "; ".join(self.candidates[i].label for i in program)


def canonical_order(programs: list[tuple[int, ...]] | set[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """The one order every engine reports programs in: by length, then by candidate indices."""
    return sorted(programs, key=lambda p: (len(p), p))


S = TypeVar("S")


def search_programs(
    start: S,
    max_len: int,
    candidates: int,
    step: Callable[[S, int], S | None],
    is_goal: Callable[[S], bool],
    key: Callable[[S], Hashable],
) -> list[tuple[int, ...]]:
    """P²'s enumerative search over a concrete state, every valid program in canonical order.

    ``step(state, i)`` is the state after candidate ``i``, or None when a precondition fails: the step
    is pruned with all its extensions (rows only grow, so a double-counted or mixed chunk can never be
    repaired); a program stops at the goal, after which no step can satisfy a precondition.
    Different prefixes often reach the same state, so the valid suffixes of a (``key(state)``,
    remaining length) pair are computed once and shared.
    """
    memo: dict[tuple[Hashable, int], list[tuple[int, ...]]] = {}

    def suffixes(state: S, remaining: int) -> list[tuple[int, ...]]:
        k = (key(state), remaining)
        found = memo.get(k)
        if found is not None:
            return found
        out: list[tuple[int, ...]] = []
        for i in range(candidates):
            nxt = step(state, i)
            if nxt is None:
                continue
            if is_goal(nxt):
                out.append((i,))
            elif remaining > 1:
                out.extend((i, *rest) for rest in suffixes(nxt, remaining - 1))
        memo[k] = out
        return out

    return canonical_order(suffixes(start, max_len)) if max_len >= 1 else []
