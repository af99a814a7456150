"""The ``top`` cheapest goal paths of a closed, Z3-proved state graph: ``best``'s optimality proof.

The certificate (``synth.certproof.graph_proof``) proves that the valid programs of at most ``max_len``
steps are exactly the graph's goal paths. Each edge is priced from the certified state it leaves (a
device's holdings are the non-empty rows of its k×k matrix, the fractions ``rank`` prices with), the
cheapest completion of every (state, steps left) is computed by dynamic programming over the whole graph,
and the paths within the bound are read off it. Nothing here comes from the branch and bound: its list
must equal this one, or the two exact searches disagree (an internal error).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from p2smt.certcheck.closure import Closed
from p2smt.cost.bound import TIE_TOLERANCE, RankedProgram
from p2smt.cost.program import step_seconds
from p2smt.cost.rank import sort_key as rank_key
from p2smt.model.dsl import Instruction, Program
from p2smt.model.hierarchy import SynthesisHierarchy
from p2smt.model.topology import Topology

__all__ = ["cheapest_paths"]


def _holdings(matrix: int, k: int) -> int:
    """Chunks a device holds: the non-empty rows of its k×k matrix (bit ``r·k + c``)."""
    row = (1 << k) - 1
    return sum(1 for r in range(k) if (matrix >> (r * k)) & row)


def cheapest_paths(doc: dict[str, Any], closed: Closed, instructions: Sequence[Instruction],
                   topo: Topology, h: SynthesisHierarchy, *, algo: str, bytes_per_device: float, max_len: int,
                   top: int) -> list[RankedProgram]:
    """The ``top`` cheapest goal paths of at most ``max_len`` steps (``rank``'s order and ties), with every
    path tying the N-th within ``TIE_TOLERANCE`` considered before the cut."""
    k = doc["devices"]
    held_of = [_holdings(int(x, 16), k) for x in doc["device_states"]]
    states, edges, goals = doc["states"], closed.edges, closed.goals
    prices: dict[tuple[int, bytes], float] = {}
    memo: dict[tuple[int, int], float] = {}

    def price(sid: int, c: int) -> float:
        counts = np.fromiter((held_of[t] for t in states[sid]), dtype=np.int64, count=k)
        key = (c, counts.tobytes())
        seconds = prices.get(key)
        if seconds is None:
            seconds = prices[key] = step_seconds(topo, h, instructions[c], counts / k * bytes_per_device, algo)
        return seconds

    def to_go(sid: int, left: int) -> float:
        """Cheapest goal path of 1..left steps from ``sid`` (inf: none)."""
        key = (sid, left)
        found = memo.get(key)
        if found is None:
            found = math.inf
            for c, t in enumerate(edges[sid]):
                if type(t) is not int:
                    continue
                rest = 0.0 if t in goals else (to_go(t, left - 1) if left > 1 else math.inf)
                if rest < math.inf:
                    found = min(found, price(sid, c) + rest)
            memo[key] = found
        return found

    if max_len < 1 or to_go(0, max_len) == math.inf:
        return []
    limit = to_go(0, max_len) * (1 + TIE_TOLERANCE)
    paths: list[tuple[tuple, RankedProgram]] = []

    def extend(sid: int, prefix: tuple[int, ...], spent: float, left: int) -> None:
        nonlocal limit
        for c, t in enumerate(edges[sid]):
            if type(t) is not int:
                continue
            total = spent + price(sid, c)
            if t in goals and total <= limit:
                rp = RankedProgram(Program(tuple(instructions[i] for i in (*prefix, c))), total)
                paths.append((rank_key(total, rp.text), rp))
                if len(paths) >= top:
                    limit = sorted(key for key, _ in paths)[top - 1][0] * (1 + TIE_TOLERANCE)
            if left > 1 and total + to_go(t, left - 1) <= limit:
                extend(t, (*prefix, c), total, left - 1)

    if top > 1:
        limit = math.inf
    extend(0, (), 0.0, max_len)
    return [rp for _, rp in sorted(paths, key=lambda p: p[0])[:top]]
