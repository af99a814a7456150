"""P²'s enumerative search: programs in increasing length, pruned by the Hoare preconditions."""

from __future__ import annotations

import numpy as np

from p2smt.errors import P2Error
from p2smt.model.problem import SynthesisProblem
from p2smt.semantics.dense import MAX_INTERPRETER_DEVICES, Violation, apply_step, goal_state, initial_state
from p2smt.synth.search import FirstStepReport, search_programs


def enumerate_programs(problem: SynthesisProblem, max_len: int,
                       on_first_step: FirstStepReport | None = None) -> list[tuple[int, ...]]:
    """Every valid program of at most ``max_len`` candidates, in canonical order
    (``synth.search.search_programs`` on the k×k×k interpreter's state)."""
    k = problem.num_devices
    if k > MAX_INTERPRETER_DEVICES:
        raise P2Error(
            f"{k} devices in one reduction group is too large for the enumerative engine (its k×k×k "
            f"state is limited to {MAX_INTERPRETER_DEVICES} devices); use --engine pieces (the same "
            "search on a compressed state, exact at any size) or --engine z3 --encoding representative"
        )
    goal = goal_state(k, problem.goal_groups, sharding=problem.sharding)
    cands = problem.candidates

    def step(state: np.ndarray, i: int) -> np.ndarray | None:
        nxt = apply_step(state, 0, cands[i].collective, cands[i].groups, problem.require_progress)
        return None if isinstance(nxt, Violation) else nxt

    return search_programs(
        initial_state(k, sharding=problem.sharding),
        max_len,
        len(cands),
        step,
        lambda state: np.array_equal(state, goal),
        lambda state: np.packbits(state).tobytes(),
        on_first_step,
    )
