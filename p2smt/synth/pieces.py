"""P²'s enumerative search on the compressed interpreter's state (``semantics.pieces``): exact at any size."""

from __future__ import annotations

from p2smt.model.problem import SynthesisProblem
from p2smt.semantics.pieces import Stepper
from p2smt.synth.search import FirstStepReport, search_programs

SEARCH_LIMIT = 4096
"""Most devices the pieces, auto and certified engines search on (``driver._pieces``): the search's states
grow with the devices. On the superpod's four levels at length 5 it took 101 s and 2.9 GB at 4,096 devices,
and was stopped unfinished at 16,384 (after 300 s, at 7.6 GB) and at 65,536 (after 6 min, at 4.7 GB), so
above the limit those engines refuse a request at once rather than run out of memory."""


def enumerate_programs(problem: SynthesisProblem, max_len: int,
                       on_first_step: FirstStepReport | None = None) -> list[tuple[int, ...]]:
    """Every valid program of at most ``max_len`` candidates (canonical order), on compressed states.

    ``search_programs`` (P²'s search, as the enumerative engine runs it) on ``semantics.pieces``'s
    state, so it is exact at any number of devices: its memory is O(states · k · pieces), not the k×k×k
    interpreter's (the engines bound it by ``SEARCH_LIMIT``). ``on_first_step``: see ``search_programs``.
    """
    stepper = Stepper(problem)
    goal = stepper.goal
    return search_programs(stepper.initial, max_len, len(problem.candidates), stepper.step,
                           lambda state: state == goal, lambda s: s, on_first_step)
