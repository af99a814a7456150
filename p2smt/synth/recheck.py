"""The independent re-check of an engine's programs at the real size, by an interpreter that shares no code
with the engine or the encodings: the dense k×k×k interpreter up to ``PIECES_ABOVE`` devices, the
compressed one up to ``VECTORIZED_ABOVE``, its vectorized form above (the symmetric engine refuses above
``RECHECK_LIMIT``)."""

from __future__ import annotations

from p2smt.errors import InternalError
from p2smt.model.problem import SynthesisProblem
from p2smt.semantics.dense import execute_all

PIECES_ABOVE = 128  # devices; above this the compressed interpreter re-checks (the k^3 one costs GiBs)
VECTORIZED_ABOVE = 512
"""Devices above which the vectorized form re-checks: on the superpod's 7,636 programs at length 5 it takes
1.6 s against the compressed interpreter's 2.0 s at 1,024 devices and 2.4 s against 10.1 s at 4,096 (at
512: 1.8 s against 1.1 s)."""
RECHECK_LIMIT = 65536  # devices; above this no interpreter re-checks and the result says what it rests on


INTERPRETERS = {"numpy": "the dense interpreter", "pieces": "the compressed interpreter",
                "vectorized": "the vectorized compressed interpreter"}


def checker(k: int) -> str:
    """The interpreter ``recheck`` runs on ``k`` devices (a key of ``INTERPRETERS``)."""
    return "numpy" if k <= PIECES_ABOVE else "pieces" if k <= VECTORIZED_ABOVE else "vectorized"


def dropped_stats(prob: SynthesisProblem, rejected) -> dict:
    """A result's record of the candidates ``recheck(..., drop=True)`` rejected: how many, and the shortest."""
    stats = {"dropped_at_real_size": len(rejected)}
    if rejected:
        stats["dropped_example"] = prob.label(min(rejected, key=lambda p: (len(p), p)))
    return stats


def recheck(prob: SynthesisProblem, programs, engine: str, drop: bool = False, sizes=None) -> list:
    """Every engine's program must be valid in an independent concrete interpreter; else fail loudly.

    Up to ``PIECES_ABOVE`` devices that is the k×k×k interpreter (``dense.py``); above, the compressed
    one (``pieces.py``), exact at any size, and above ``VECTORIZED_ABOVE`` its vectorized form
    (``vectorized.py``: the same rule code and verdicts). None shares code with the encodings.
    ``drop``: the engine proposes candidates that may be invalid at the real size (a generic-instance
    search); the invalid ones are returned instead of raising. ``sizes``: the hierarchy's level sizes, which
    only speed up the vectorized check. Returns the rejected programs.
    """
    cands = prob.candidates
    rejected = []

    def reject(prog, why: str) -> None:
        if not drop:
            raise InternalError(f"engine {engine!r} returned {prob.label(prog)!r}, which the interpreter rejects: {why}")
        rejected.append(prog)

    which = checker(prob.num_devices)
    if which != "numpy":
        if which == "pieces":
            from p2smt.semantics.pieces import check_programs

            verdicts = check_programs(prob, programs)
        else:
            from p2smt.semantics.vectorized import check_programs as check_vectorized

            verdicts = check_vectorized(prob, programs, sizes=sizes)
        for prog, verdict in zip(programs, verdicts, strict=True):
            if not verdict.proved:
                reject(prog, f"step {verdict.step}: {verdict.rule}" if verdict.step is not None else verdict.rule)
        return rejected
    runs = execute_all(
        prob.num_devices,
        [[(cands[i].collective, cands[i].groups) for i in prog] for prog in programs],
        prob.goal_groups,
        prob.require_progress,
        keep_states=False,
        sharding=prob.sharding,
    )
    for prog, run in zip(programs, runs, strict=True):
        if not run.valid:
            reject(prog, run.violation.message if run.violation else "the goal is not reached")
    return rejected
