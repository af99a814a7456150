"""P²'s enumerative search: programs in increasing length, pruned by the Hoare preconditions."""

from __future__ import annotations

import numpy as np

from .problem import SynthesisProblem, canonical_order
from .semantics import Violation, apply_step, goal_state, initial_state


def enumerate_programs(problem: SynthesisProblem, max_len: int) -> list[tuple[int, ...]]:
    """Every valid program of at most ``max_len`` candidates, in canonical order.

    A step whose precondition fails is pruned with all its extensions (rows only grow, so a
    double-counted or mixed chunk can never be repaired); a program stops at the goal, after which
    no step can satisfy a precondition.
    """
    k = problem.num_devices
    goal = goal_state(k, problem.goal_groups)
    found: list[tuple[int, ...]] = []
    cands = problem.candidates

    def search(state: np.ndarray, prefix: tuple[int, ...]) -> None:
        for idx, cand in enumerate(cands):
            nxt = apply_step(state, len(prefix), cand.collective, cand.groups, problem.require_progress)
            if isinstance(nxt, Violation):
                continue
            program = (*prefix, idx)
            if np.array_equal(nxt, goal):
                found.append(program)
            elif len(program) < max_len:
                search(nxt, program)

    if max_len >= 1:
        search(initial_state(k), ())
    return canonical_order(found)
