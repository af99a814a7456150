"""Synthesized programs of a sharded goal judged in buffer positions too (docs/semantics.md §6).

The chunk semantics tracks which chunks a device holds, not where they sit in its buffer. For the AllReduce
and ReduceScatter goals the two agree (ReduceScatter cuts the held chunks in ascending order, as positions
do), but an AllGather concatenates its members' buffers in group order: gathering across nodes first and then
inside each node holds every chunk yet in a permuted order, which XLA, NCCL and JAX's ``all_gather(tiled=True)``
do not undo. So every program of a sharded goal that the chunk semantics accepts is run by the positions
interpreter on the synthesis devices (whose groups list members in the lowered plan's order), and the ones it
rejects (a permuted result, or a Broadcast or AllReduce on buffers of unequal lengths, which the collectives
refuse) are dropped, counted and the first named in the result.
"""

from __future__ import annotations

from collections.abc import Sequence

from p2smt.model.problem import SynthesisProblem
from p2smt.semantics.positions import execute_positions


def permuted(prob: SynthesisProblem, programs: Sequence[tuple[int, ...]]) -> dict[tuple[int, ...], str]:
    """The programs whose final buffers miss the sharded goal in positions, with the positions interpreter's
    reason (empty for the AllReduce goal, which the chunk semantics decides alone)."""
    if prob.sharding is None:
        return {}
    cands, k = prob.candidates, prob.num_devices
    out = {}
    for p in programs:
        run = execute_positions(k, [(cands[i].collective, cands[i].groups) for i in p], prob.goal_groups, k,
                                prob.sharding)
        if not run.valid:
            out[tuple(p)] = run.message()
    return out


def positions_stats(prob: SynthesisProblem, dropped: dict[tuple[int, ...], str]) -> dict:
    """A result's record of the programs the positions check dropped: how many, and the first with its reason."""
    if not dropped:
        return {"positions_dropped": 0}
    first = min(dropped, key=lambda p: (len(p), p))
    return {"positions_dropped": len(dropped), "positions_example": f"{prob.label(first)}: {dropped[first]}"}


def positions_words(stats: dict) -> str:
    """What the positions check adds to a result's ``rests_on``."""
    n = stats.get("positions_dropped", 0)
    dropped = (f"{n} program{'' if n == 1 else 's'} dropped: a permuted result or a step on buffers of unequal "
               "lengths" if n else "none dropped")
    return f"; every program then run in XLA/NCCL buffer positions ({dropped})"
