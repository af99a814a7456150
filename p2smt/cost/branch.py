"""Cost-guided branch and bound on the bitmatrix state: the N cheapest valid programs of one hierarchy.

The search is P²'s (prune a step whose precondition fails, programs stop at the goal) on
``semantics.bitmatrix``, the state the ``symmetric`` engine searches. A step's price is
``cost.program.step_seconds`` of its instruction under the holdings before it, which are the
popcounts of the devices' non-empty chunks (the same fractions ``held_fractions_of_programs`` takes
from the dense interpreter), so every price, and every program's running sum, is the float ``rank``
computes. The lookahead is exact: ``to_go(state, r)``, the cheapest completion of at most r steps,
by dynamic programming over (state, r) with each state's valid steps and each (candidate, holdings)
price computed once. A prefix is extended only when its sum plus ``to_go`` is within the bound U
(the N-th cheapest time found, plus ``TIE_TOLERANCE`` relative), so the depth-first pass visits
only prefixes of programs that can tie the N-th; ties and order are ``rank``'s (9 significant
digits, then the program text).

Optimality rests on: the interpreter deciding validity (bitmatrix, differentially tested against
the dense and compressed interpreters), non-negative step prices, and the exhaustiveness of the
dynamic programming over every valid step of every reachable state (no solver).
"""

from __future__ import annotations

import math
from typing import Any

from p2smt.cost.bound import TIE_TOLERANCE, RankedProgram
from p2smt.cost.program import Prices
from p2smt.cost.rank import sort_key as rank_key
from p2smt.errors import P2Error
from p2smt.model.dsl import Program, candidate_instructions, problem
from p2smt.model.hierarchy import SynthesisHierarchy
from p2smt.model.system import System
from p2smt.model.topology import build_topology
from p2smt.semantics.bitmatrix import Machine, State

MAX_DEVICES = 256
"""Synthesis devices up to which the k×k-bit state per device is searched at the real size."""


class BranchAndBound:
    """One hierarchy's search; ``run`` returns the ``top`` cheapest programs (rank order) and stats."""

    def __init__(self, system: System, h: SynthesisHierarchy, *, algo: str, bytes_per_device: float, max_len: int,
                 top: int, require_progress: bool = True):
        if h.num_devices > MAX_DEVICES:
            raise P2Error(f"the branch-and-bound search runs on at most {MAX_DEVICES} synthesis devices "
                          f"({h.num_devices} here); use the Z3 bound strategy")
        self.max_len, self.top = max_len, top
        self.prob = problem(h, require_progress)
        self.instructions = [ins for ins, _ in candidate_instructions(h)]
        self.machine = Machine(self.prob.num_devices)
        self.goal = self.machine.goal(self.prob.goal_groups)
        self.prices = Prices(self.instructions, build_topology(system), h, algo=algo, bytes_per_device=bytes_per_device,
                             k=self.prob.num_devices)
        self.steps_of: dict[State, list[tuple[int, State, float]]] = {}
        self.to_go_memo: dict[tuple[State, int], float] = {}
        self.found: list[tuple[tuple[float, str], RankedProgram]] = []
        self.limit = math.inf
        self.visited = 0

    def _price(self, state: State, i: int) -> float:
        return self.prices.of([rows.bit_count() for rows, _ in state], i)

    def steps(self, state: State) -> list[tuple[int, State, float]]:
        """Every valid step from ``state``: (candidate, next state, seconds), in candidate order."""
        found = self.steps_of.get(state)
        if found is None:
            cands, progress = self.prob.candidates, self.prob.require_progress
            found = []
            for i, c in enumerate(cands):
                nxt = self.machine.step(state, c.collective, c.groups, progress)
                if nxt is not None:
                    found.append((i, nxt, self._price(state, i)))
            self.steps_of[state] = found
        return found

    def to_go(self, state: State, remaining: int) -> float:
        """The cheapest completion from a non-goal ``state`` in at most ``remaining`` steps (inf if none)."""
        key = (state, remaining)
        best = self.to_go_memo.get(key)
        if best is None:
            best = math.inf
            for _, nxt, seconds in self.steps(state):
                if nxt == self.goal:
                    best = min(best, seconds)
                elif remaining > 1:
                    best = min(best, seconds + self.to_go(nxt, remaining - 1))
            self.to_go_memo[key] = best
        return best

    def _accept(self, program: tuple[int, ...], seconds: float) -> None:
        """Keep a program; the bound U becomes the N-th cheapest time plus the tie tolerance."""
        prog = Program(tuple(self.instructions[i] for i in program))
        ranked = RankedProgram(prog, seconds)
        self.found.append((rank_key(seconds, ranked.text), ranked))
        if len(self.found) >= self.top:
            self.limit = sorted(k for k, _ in self.found)[self.top - 1][0] * (1 + TIE_TOLERANCE)
            self.found = [f for f in self.found if f[1].seconds <= self.limit]

    def _extend(self, state: State, prefix: tuple[int, ...], spent: float, remaining: int) -> None:
        self.visited += 1
        for i, nxt, seconds in self.steps(state):
            total = spent + seconds
            if nxt == self.goal:
                if total <= self.limit:
                    self._accept((*prefix, i), total)
            elif remaining > 1 and total + self.to_go(nxt, remaining - 1) <= self.limit:
                self._extend(nxt, (*prefix, i), total, remaining - 1)

    def run(self) -> tuple[list[RankedProgram], dict[str, Any]]:
        start = self.machine.initial()
        if self.max_len >= 1 and start != self.goal:
            self._extend(start, (), 0, self.max_len)
        ranked = sorted(self.found, key=lambda f: f[0])
        stats = {"method": "search", "states": len(self.steps_of), "priced": len(self.prices.table),
                 "lookahead_entries": len(self.to_go_memo), "prefixes_visited": self.visited}
        return [r for _, r in ranked[: self.top]], stats
