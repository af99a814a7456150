"""Cost-guided branch and bound on the bitmatrix state: the N cheapest valid programs of one hierarchy.

The search is P²'s (prune a step whose precondition fails, programs stop at the goal) on
``semantics.bitmatrix``, the state the ``symmetric`` engine searches (above ``MAX_DEVICES`` synthesis devices,
where k×k bits per device grow too large, on ``semantics.pieces``' compressed state, exact at any size). A step's price is
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
from p2smt.semantics.bitmatrix import Machine
from p2smt.semantics.bitmatrix import State as BitState
from p2smt.semantics.pieces import Tokens

State = BitState | Tokens
"""A searched state: the bitmatrix interpreter's, or the compressed one's tuple of device-state tokens."""

MAX_DEVICES = 256
"""Synthesis devices up to which the k×k-bit state per device is searched at the real size; above, the
compressed interpreter's state (exact at any size) up to its search limit."""


class _Bitmatrix:
    """The bitmatrix interpreter as the search's step function (a device's k×k bits, one integer per row set)."""

    name = "bitmatrix"

    def __init__(self, prob):
        self.prob, self.machine = prob, Machine(prob.num_devices)
        self.initial, self.goal = self.machine.initial(), self.machine.goal(prob.goal_groups)

    def step(self, state, i: int):
        c = self.prob.candidates[i]
        return self.machine.step(state, c.collective, c.groups, self.prob.require_progress)

    def holdings(self, state) -> list[int]:
        return [rows.bit_count() for rows, _ in state]


class _Pieces:
    """The compressed interpreter as the search's step function (device states interned as tokens)."""

    name = "compressed"

    def __init__(self, prob):
        from p2smt.semantics.pieces import Stepper

        self.stepper = Stepper(prob)
        self.initial, self.goal = self.stepper.initial, self.stepper.goal
        self.step = self.stepper.step
        self.held: dict[int, int] = {}  # token -> chunks held, computed once per distinct device state

    def holdings(self, state) -> list[int]:
        held = self.held
        return [held[t] if t in held else held.setdefault(t, self.stepper.chunks_held(t)) for t in state]


class BranchAndBound:
    """One hierarchy's search; ``run`` returns the ``top`` cheapest programs (rank order) and stats."""

    def __init__(self, system: System, h: SynthesisHierarchy, *, algo: str, bytes_per_device: float, max_len: int,
                 top: int, require_progress: bool = True):
        from p2smt.synth.pieces import SEARCH_LIMIT

        if h.num_devices > SEARCH_LIMIT:
            raise P2Error(f"the branch-and-bound search runs on at most {SEARCH_LIMIT:,} synthesis devices "
                          f"({h.num_devices:,} here); `p2smt rank --engine symmetric` prices the symmetric "
                          "engine's programs instead")
        self.max_len, self.top = max_len, top
        self.prob = problem(h, require_progress)
        self.instructions = [ins for ins, _ in candidate_instructions(h)]
        self.machine = _Bitmatrix(self.prob) if h.num_devices <= MAX_DEVICES else _Pieces(self.prob)
        self.goal = self.machine.goal
        self.prices = Prices(self.instructions, build_topology(system), h, algo=algo, bytes_per_device=bytes_per_device,
                             k=self.prob.num_devices)
        self.steps_of: dict[State, list[tuple[int, State, float]]] = {}
        self.to_go_memo: dict[tuple[State, int], float] = {}
        self.found: list[tuple[tuple[float, str], RankedProgram]] = []
        self.limit = math.inf
        self.visited = 0

    def _price(self, state: State, i: int) -> float:
        return self.prices.of(self.machine.holdings(state), i)

    def steps(self, state: State) -> list[tuple[int, State, float]]:
        """Every valid step from ``state``: (candidate, next state, seconds), in candidate order."""
        found = self.steps_of.get(state)
        if found is None:
            found = []
            for i in range(len(self.prob.candidates)):
                nxt = self.machine.step(state, i)
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
        start = self.machine.initial
        if self.max_len >= 1 and start != self.goal:
            self._extend(start, (), 0, self.max_len)
        ranked = sorted(self.found, key=lambda f: f[0])
        stats = {"method": "search", "states": len(self.steps_of), "priced": len(self.prices.table),
                 "lookahead_entries": len(self.to_go_memo), "prefixes_visited": self.visited}
        if self.machine.name != _Bitmatrix.name:
            stats["interpreter"] = self.machine.name
        return [r for _, r in ranked[: self.top]], stats
