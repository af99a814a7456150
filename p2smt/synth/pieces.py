"""P²'s enumerative search on the compressed interpreter's state (``semantics.pieces``): exact at any size."""

from __future__ import annotations

from p2smt.errors import P2Error
from p2smt.model.problem import SynthesisProblem
from p2smt.semantics.pieces import Stepper
from p2smt.synth.search import FirstStepReport, search_programs

SEARCH_LIMIT = 4096
"""Most devices the exact search takes on: its states grow with the devices (on the superpod's four
levels at length 5: 101 s and 2.9 GB at 4,096 devices, over 300 s and 7.6 GB at 16,384, over 6 min and
4.7 GB at 65,536), so above it a request is refused at once rather than left to run out of memory."""


def enumerate_programs(problem: SynthesisProblem, max_len: int,
                       on_first_step: FirstStepReport | None = None) -> list[tuple[int, ...]]:
    """Every valid program of at most ``max_len`` candidates (canonical order), on compressed states.

    ``search_programs`` (P²'s search, as the enumerative engine runs it) on ``semantics.pieces``'s
    state, so it is exact at any number of devices up to ``SEARCH_LIMIT``: its memory is O(states · k ·
    pieces), not the k×k×k interpreter's. ``on_first_step``: see ``search_programs``.
    """
    if problem.num_devices > SEARCH_LIMIT:
        raise P2Error(f"{problem.num_devices:,} devices: more than the exact search (pieces, the certified engine's "
                      f"proposer) takes on ({SEARCH_LIMIT:,}); use --engine symmetric (a search on the generic "
                      "instance, every program checked at the real size)")
    stepper = Stepper(problem)
    goal = stepper.goal
    return search_programs(stepper.initial, max_len, len(problem.candidates), stepper.step,
                           lambda state: state == goal, lambda s: s, on_first_step)
