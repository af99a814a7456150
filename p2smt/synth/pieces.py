"""P²'s enumerative search on the compressed interpreter's state (``semantics.pieces``): exact at any size."""

from __future__ import annotations

from p2smt.model.problem import SynthesisProblem
from p2smt.semantics.pieces import Stepper
from p2smt.synth.search import FirstStepReport, search_programs


def enumerate_programs(problem: SynthesisProblem, max_len: int,
                       on_first_step: FirstStepReport | None = None) -> list[tuple[int, ...]]:
    """Every valid program of at most ``max_len`` candidates (canonical order), on compressed states.

    ``search_programs`` (P²'s search, as the enumerative engine runs it) on ``semantics.pieces``'s
    state, so it is exact at any number of devices: its memory is O(states · k · pieces), not the
    k×k×k interpreter's. ``on_first_step``: see ``search_programs``.
    """
    stepper = Stepper(problem)
    goal = stepper.goal
    return search_programs(stepper.initial, max_len, len(problem.candidates), stepper.step,
                           lambda state: state == goal, lambda s: s, on_first_step)
