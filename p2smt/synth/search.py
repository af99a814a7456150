"""P²'s enumerative search over any concrete state, shared by the explicit engines (each brings its own
interpreter as a step function)."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TypeVar

from p2smt.model.problem import canonical_order

S = TypeVar("S")
FirstStepReport = Callable[[int, list[tuple[int, ...]]], None]
"""``(i, programs)``: the search has finished every program starting with candidate ``i`` (canonical order)."""


def search_programs(
    start: S,
    max_len: int,
    candidates: int,
    step: Callable[[S, int], S | None],
    is_goal: Callable[[S], bool],
    key: Callable[[S], Hashable],
    on_first_step: FirstStepReport | None = None,
) -> list[tuple[int, ...]]:
    """P²'s enumerative search over a concrete state, every valid program in canonical order.

    ``step(state, i)`` is the state after candidate ``i``, or None when a precondition fails: the step
    is pruned with all its extensions (rows only grow, so a double-counted or mixed chunk can never be
    repaired); a program stops at the goal, after which no step can satisfy a precondition.
    Different prefixes often reach the same state, so the valid suffixes of a (``key(state)``,
    remaining length) pair are computed once and shared. ``on_first_step`` receives each first step's
    programs once its whole subtree is searched (final: a deadline can keep them).
    """
    memo: dict[tuple[Hashable, int], list[tuple[int, ...]]] = {}

    def suffixes(state: S, remaining: int) -> list[tuple[int, ...]]:
        k = (key(state), remaining)
        found = memo.get(k)
        if found is not None:
            return found
        out = [prog for i in range(candidates) for prog in starting_with(state, i, remaining)]
        memo[k] = out
        return out

    def starting_with(state: S, i: int, remaining: int) -> list[tuple[int, ...]]:
        nxt = step(state, i)
        if nxt is None:
            return []
        if is_goal(nxt):
            return [(i,)]
        return [(i, *rest) for rest in suffixes(nxt, remaining - 1)] if remaining > 1 else []

    if max_len < 1:
        return []
    found: list[tuple[int, ...]] = []
    for i in range(candidates):
        programs = starting_with(start, i, max_len)
        found.extend(programs)
        if on_first_step is not None:
            on_first_step(i, canonical_order(programs))
    return canonical_order(found)
