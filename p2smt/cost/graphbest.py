"""The ``top`` cheapest goal paths of a closed, Z3-proved state graph: ``best``'s optimality proof.

The certificate (``synth.certproof.graph_proof``) proves every written row: a state's successor under
each candidate, or the rule that fails. Each edge is priced from the certified state it leaves (a device's
holdings are the non-empty rows of its k×k matrix, the fractions ``rank`` prices with).

Only the states a cost bound B needs are expanded (``grow``): cheapest first over (state, steps taken),
every state some path reaches within B before its last step. Step prices are non-negative, so every prefix
of a program costing at most B costs at most B: by induction along the program each of its states is
reached within B and expanded, and the program is a path of the certified rows. With no goal reachable
(or fewer than ``top`` paths in all), nothing is cut off and the whole graph before ``max_len`` is expanded. ``cheapest_paths`` does
not trust the growth: it recomputes the same cheapest-first pass on the certificate and fails if a state
reached within B before the last step has no row, then reads the paths within B off the rows (the cheapest
completion of every expanded (state, steps left) bounds the depth-first pass). B starts at the cheapest
goal's time plus ``rank``'s tie tolerance and doubles until ``top`` paths lie within it.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from typing import Any

from p2smt.certcheck.closure import Closed
from p2smt.cost.bound import TIE_TOLERANCE, RankedProgram
from p2smt.cost.program import Prices
from p2smt.cost.rank import sort_key as rank_key
from p2smt.errors import InternalError
from p2smt.model.dsl import Instruction, Program

__all__ = ["cheapest_paths", "grow"]

Row = Callable[[int], Sequence[Any] | None]
Keep = Callable[[tuple[int, ...]], bool]
"""Which goal paths count (a sharded goal's positions check); the others are passed over, and counted."""


def holdings(matrix: int, k: int) -> int:
    """Chunks a device holds: the non-empty rows of its k×k matrix (bit ``r·k + c``)."""
    row = (1 << k) - 1
    return sum(1 for r in range(k) if (matrix >> (r * k)) & row)


def _settle(row_of: Row, price: Callable[[int, int], float], is_goal: Callable[[int], bool], max_len: int,
            bound: float | None) -> tuple[float, list[int], bool]:
    """Cheapest first over (state, steps taken) from state 0, within ``bound`` (None: the first goal's time
    plus the tie tolerance): (the bound, the states it needed expanded but whose row is missing, whether the
    bound cut some path off)."""
    arrival: dict[tuple[int, int], float] = {(0, 0): 0.0}
    heap = [(0.0, 0, 0)]
    limit = math.inf if bound is None else bound
    missing: list[int] = []
    cut = False
    while heap:
        cost, sid, taken = heapq.heappop(heap)
        if cost > limit:
            cut = True
            break
        if arrival[sid, taken] < cost:
            continue
        if is_goal(sid) and bound is None and limit == math.inf:
            limit = cost * (1 + TIE_TOLERANCE)
        if taken >= max_len:
            continue
        row = row_of(sid)
        if row is None:
            missing.append(sid)
            continue
        for c, t in enumerate(row):
            if type(t) is int:
                nxt = cost + price(sid, c)
                if nxt > limit:
                    cut = True
                elif nxt < arrival.get((t, taken + 1), math.inf):
                    arrival[t, taken + 1] = nxt
                    heapq.heappush(heap, (nxt, t, taken + 1))
    return limit, missing, cut


def grow(builder: Any, prices: Prices, max_len: int, top: int, keep: Keep | None = None) -> float:
    """Expand (``builder.expand``) every state a path reaches within the bound before its last step, the
    bound doubling until ``top`` goal paths lie within it (or nothing is left unexpanded); returns it."""
    k = builder.prob.num_devices
    held: dict[int, int] = {}

    def price(sid: int, c: int) -> float:
        for t in builder.states[sid]:
            if t not in held:
                held[t] = holdings(builder.mats[t], k)
        return prices.of([held[t] for t in builder.states[sid]], c)

    goal = builder.goal_key
    bound, _, cut = _settle(builder.expand, price, lambda s: builder.states[s] == goal, max_len, None)
    while cut:
        reached = builder.ids.get(goal)
        goals = frozenset() if reached is None else frozenset({reached})
        if len(_paths(builder.edges, goals, price, max_len, top, bound, keep)) >= top:
            return bound
        bound *= 2
        _, _, cut = _settle(builder.expand, price, lambda s: builder.states[s] == goal, max_len, bound)
    return math.inf  # nothing cut off: every state before max_len is expanded


def _paths(edges: Sequence[Any], goals: frozenset[int], price: Callable[[int, int], float],
           max_len: int, top: int, bound: float, keep: Keep | None = None,
           passed: list[tuple[int, ...]] | None = None) -> list[tuple[float, tuple[int, ...]]]:
    """Goal paths of at most ``max_len`` steps within ``bound`` (the bound tightening to the ``top``-th
    cheapest plus the tie tolerance once ``top`` are found), as (seconds, candidates)."""
    memo: dict[tuple[int, int], float] = {}

    def to_go(sid: int, left: int) -> float:
        """Cheapest goal path of 1..left steps from ``sid`` over the written rows (inf: none)."""
        key = (sid, left)
        found = memo.get(key)
        if found is None:
            found = math.inf
            for c, t in enumerate(edges[sid] or ()):
                if type(t) is not int:
                    continue
                rest = 0.0 if t in goals else (to_go(t, left - 1) if left > 1 else math.inf)
                if rest < math.inf:
                    found = min(found, price(sid, c) + rest)
            memo[key] = found
        return found

    limit = bound
    found: list[tuple[float, tuple[int, ...]]] = []

    def extend(sid: int, prefix: tuple[int, ...], spent: float, left: int) -> None:
        nonlocal limit
        for c, t in enumerate(edges[sid] or ()):
            if type(t) is not int:
                continue
            total = spent + price(sid, c)
            if t in goals and total <= limit and (keep is None or keep((*prefix, c))):
                found.append((total, (*prefix, c)))
            elif t in goals and total <= limit and passed is not None:
                passed.append((*prefix, c))
                if len(found) >= top:
                    limit = min(limit, sorted(x for x, _ in found)[top - 1] * (1 + TIE_TOLERANCE))
            if left > 1 and total + to_go(t, left - 1) <= limit:
                extend(t, (*prefix, c), total, left - 1)

    if max_len >= 1:
        extend(0, (), 0.0, max_len)
    return [(seconds, program) for seconds, program in found if seconds <= limit]


def cheapest_paths(doc: dict[str, Any], closed: Closed, instructions: Sequence[Instruction], prices: Prices, *,
                   max_len: int, top: int, bound: float, keep: Keep | None = None,
                   passed: list[tuple[int, ...]] | None = None) -> list[RankedProgram]:
    """The ``top`` cheapest goal paths of at most ``max_len`` steps (``rank``'s order and ties) of a closed
    certificate that ``keep`` accepts, after checking that it expands every state a path within ``bound``
    needs; ``passed`` receives the goal paths within the bound that ``keep`` refused."""
    k = doc["devices"]
    held_of = [holdings(int(x, 16), k) for x in doc["device_states"]]
    states, edges = doc["states"], closed.edges

    def price(sid: int, c: int) -> float:
        return prices.of([held_of[t] for t in states[sid]], c)

    def row(sid: int) -> Sequence[Any] | None:
        return None if sid in closed.unexpanded else edges[sid]

    _, missing, _ = _settle(row, price, lambda s: s in closed.goals, max_len, bound)
    if missing:
        raise InternalError(f"best: the certificate leaves state {missing[0]} unexpanded, which a path within "
                            f"{bound:.9g} s reaches before its last step")
    rows = [row(s) for s in range(len(edges))]
    found = _paths(rows, closed.goals, price, max_len, top, bound, keep, passed)
    ranked = sorted((rank_key(seconds, p.text), p) for seconds, p in (
        (s, RankedProgram(Program(tuple(instructions[c] for c in program)), s)) for s, program in found))
    return [p for _, p in ranked[:top]]
