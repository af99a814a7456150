"""P²'s enumerative search over any concrete state, shared by the explicit engines (each brings its own
interpreter as a step function)."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TypeVar

from p2smt.model.problem import canonical_order

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
