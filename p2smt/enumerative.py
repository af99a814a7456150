"""P²'s enumerative search: programs in increasing length, pruned by the Hoare preconditions."""

from __future__ import annotations

import numpy as np

from .errors import P2Error
from .problem import SynthesisProblem, canonical_order
from .semantics import MAX_INTERPRETER_DEVICES, Violation, apply_step, goal_state, initial_state


def enumerate_programs(problem: SynthesisProblem, max_len: int) -> list[tuple[int, ...]]:
    """Every valid program of at most ``max_len`` candidates, in canonical order.

    A step whose precondition fails is pruned with all its extensions (rows only grow, so a
    double-counted or mixed chunk can never be repaired); a program stops at the goal, after which
    no step can satisfy a precondition. Different prefixes often reach the same state, so the
    valid suffixes of a (state, remaining length) pair are computed once and shared.
    """
    k = problem.num_devices
    if k > MAX_INTERPRETER_DEVICES:
        raise P2Error(
            f"{k} devices in one reduction group is too large for the enumerative engine (its k×k×k "
            f"state is limited to {MAX_INTERPRETER_DEVICES} devices); use --engine pieces (the same "
            "search on a compressed state, exact at any size) or --engine z3 --encoding representative"
        )
    goal = goal_state(k, problem.goal_groups)
    cands = problem.candidates
    memo: dict[tuple[bytes, int], list[tuple[int, ...]]] = {}

    def suffixes(state: np.ndarray, remaining: int) -> list[tuple[int, ...]]:
        key = (np.packbits(state).tobytes(), remaining)
        if key in memo:
            return memo[key]
        out: list[tuple[int, ...]] = []
        for idx, cand in enumerate(cands):
            nxt = apply_step(state, 0, cand.collective, cand.groups, problem.require_progress)
            if isinstance(nxt, Violation):
                continue
            if np.array_equal(nxt, goal):
                out.append((idx,))
            elif remaining > 1:
                out.extend((idx, *rest) for rest in suffixes(nxt, remaining - 1))
        memo[key] = out
        return out

    return canonical_order(suffixes(initial_state(k), max_len)) if max_len >= 1 else []
