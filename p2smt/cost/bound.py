"""The cost bound strategy of ``best``: the N cheapest valid programs on one hierarchy, found and proved with Z3.

Per placement, one incremental solver holds a counterexample-guided encoding (``smt.lazy``: one-hot
step choices, exact per-cell chunk counts ``n``; each model is a candidate that ``refine`` proves on
every cell or refutes with a necessary condition of validity). The search is a bound strategy on the
one solver loop (``smt.engine.run_encoding``): accepted programs are re-checked by the interpreter,
priced by ``cost.program_time`` and blocked.

The cost of a step is a function of its choice and of the chunk counts of its members before it
(``cost.program_time`` of the one-instruction program with those holdings; memoized per pair).
Once N programs are known, the search is bounded by ``cost <= U`` with U the N-th cheapest time
plus a relative 1e-7 (so every program that ties it at ``rank``'s 9-significant-digit resolution
stays in); U only decreases. The bound is enforced by lazily generated clauses over the choices
(``bound="clauses"``, default): along a model's path the counts are functions of the prefix, so when
a prefix plus one more step already costs more than U, the clause "not (this prefix, then that
step)" is implied by the bound (step times are non-negative). At every prefix a model visits, all
steps that would overshoot U are excluded at once. ``bound="sum"`` also asserts the bound as a
bit-vector sum of per-step costs (``lit(t, c, counts) -> cost_t = weight``, weights rounded down;
pairs not yet priced weigh 0, so the sum never exceeds a valid program's scaled time): fewer solver
calls, but each is much slower (see ``benchmarks/best.py``).

``lookahead`` (default) strengthens the clauses with a lower bound on completing the program: the
step's time plus the cheapest path, in the abstraction that keeps only each cell's chunk count and
contributions per chunk (docs/semantics.md §4's count rules, necessary conditions of validity), from the counts
after the step to the goal's counts within the remaining steps, pricing only (candidate, counts)
pairs already priced (0 otherwise: step times are non-negative). Every valid program's counts follow
such a path, so the bound never exceeds a valid completion's time; it halves the solver calls on the
4-level superpod (``benchmarks/best.py``).

``unsat`` then proves that every valid program of at most ``max_len`` steps costing at most U has
been found. Order and ties are ``rank``'s: seconds to 9 significant digits, then the program text
(across placements then the matrix), so ``best`` returns what ranking the complete set would.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import z3

from p2smt.cost.model import held_fractions_of_programs, program_time
from p2smt.cost.rank import sort_key as rank_key
from p2smt.errors import InternalError, P2Error
from p2smt.model.dsl import Program, candidate_instructions, format_program, problem
from p2smt.model.hierarchy import SynthesisHierarchy
from p2smt.model.status import SolveStatus
from p2smt.model.system import System
from p2smt.semantics.dense import execute
from p2smt.smt import terms as T
from p2smt.smt.counts import after as counts_after
from p2smt.smt.counts import may_run
from p2smt.smt.engine import SOLVER_FIGURES, run_encoding
from p2smt.smt.lazy import CheckedEncoding
from p2smt.smt.registry import load_encoding
from p2smt.smt.strategy import Phase, Strategy

TIE_TOLERANCE = 1e-7
"""Relative slack of the bound above the N-th time: covers ``rank``'s 9-significant-digit ties."""
SUM_UNITS = 2**24
"""``bound="sum"``: the bound's integer value when first stated (the resolution of step weights)."""


@dataclass(frozen=True)
class RankedProgram:
    program: Program
    seconds: float

    @property
    def text(self) -> str:
        return format_program(self.program)

    def to_json(self) -> dict[str, Any]:
        return {"program": self.text, "seconds": self.seconds}


class _StepCosts:
    """Seconds of one step per (candidate, chunk counts of its cells), from ``cost.program_time``."""

    def __init__(self, system: System, h: SynthesisHierarchy, instructions, cell: Sequence[int],
                 cells_of: Sequence[tuple[int, ...]], algo: str, bytes_per_device: float):
        self.system, self.h, self.instructions = system, h, instructions
        self.cell, self.cells_of = cell, cells_of
        self.algo, self.bytes = algo, bytes_per_device
        self.table: dict[tuple[int, tuple[int, ...]], float] = {}
        self.seconds = 0.0

    def get(self, c: int, counts: tuple[int, ...]) -> float:
        key = (c, counts)
        if key not in self.table:
            start = time.perf_counter()
            k = self.h.num_devices
            by_cell = dict(zip(self.cells_of[c], counts))
            frac = np.array([by_cell.get(self.cell[d], 0) / k for d in range(k)])
            one = Program((self.instructions[c],))
            self.table[key] = program_time(self.system, self.h, one, algo=self.algo,
                                           bytes_per_device=self.bytes, fractions=[frac]).seconds
            self.seconds += time.perf_counter() - start
        return self.table[key]


class CostBound(Strategy):
    """The cost-bounded search on one synthesis hierarchy, a bound strategy on the one solver loop
    (see the module docstring): one query over every length, models over U excluded before they reach
    the encoding's confirmation, every accepted program re-checked, priced and the bound tightened."""

    batch = False  # a model's chunk counts are read before its confirmation

    def __init__(self, system: System, h: SynthesisHierarchy, *, algo: str, bytes_per_device: float, max_len: int,
                 top: int, timeout_ms: int | None, encoding: str, options: dict[str, Any] | None,
                 require_progress: bool, bound: str, lookahead: bool = True,
                 seed: Sequence[RankedProgram] = ()):
        self.system, self.h, self.top, self.timeout_ms = system, h, top, timeout_ms
        self.max_len, self.mode = max_len, bound
        self.prob = problem(h, require_progress)
        self.instructions = [ins for ins, _ in candidate_instructions(h)]
        enc = load_encoding(encoding).create(self.prob, max_len, options)
        if not isinstance(enc, CheckedEncoding):
            raise P2Error(f"encoding {encoding!r} does not track chunk counts; cost-guided search needs one "
                          "built on smt.lazy.CheckedEncoding (e.g. bool-matrix)")
        self.enc = enc
        s = enc.s
        self.cells_of = [tuple(sorted({s.cell[d] for g in cand.groups for d in g})) for cand in self.prob.candidates]
        self.group_cells = [tuple(tuple(s.cell[d] for d in g) for g in cand.groups) for cand in self.prob.candidates]
        self.costs = _StepCosts(system, h, self.instructions, s.cell, self.cells_of, algo, bytes_per_device)
        self.found: dict[tuple[int, ...], RankedProgram] = {}
        self._model_counts: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
        self.solver: z3.Solver | None = None  # the loop's, from ``begin``
        self.target: float | None = None  # U in seconds
        self._priced: dict[tuple[int, ...], float] = {}  # prefix -> the target its next steps were priced at
        self._blocked: set[tuple[int, ...]] = set()  # prefix + step excluded by a cost clause
        self.lookahead = lookahead
        k = self.prob.num_devices
        self._initial_state = tuple((k, 1) for _ in range(s.cells))
        self._goal_state = tuple((k, s.goal_size[s.rep[x]]) if s.goal_size[s.rep[x]] else (0, 0)
                                 for x in range(s.cells))
        self._lower: dict[tuple, float] = {}  # (count state, steps left) -> cheapest completion
        self._lower_priced = 0
        self._transitions: dict[tuple, tuple | None] = {}
        # bound="sum": per-step bit-vector costs, fixed with the first bound
        self.scale: float | None = None
        self.cap = 0
        self.units: int | None = None
        self.step_cost: list[z3.BitVecRef] = []
        self._weighted: set[tuple[int, tuple[int, ...]]] = set()
        self._literals: dict[tuple[int, int, tuple[int, ...]], Any] = {}
        self.counters = {"bound_updates": 0, "cost_clauses": 0, "over_bound_models": 0}
        self.seeded = self._seed(seed)

    def _seed(self, seed: Sequence[RankedProgram]) -> dict[tuple[int, ...], RankedProgram]:
        """Programs already known (``best``'s branch and bound): re-checked by the interpreter and priced
        again here, then blocked from the first query on and U set from them, so the run proves that no
        other program of at most ``max_len`` steps costs at most U (the bound query)."""
        index = {ins: c for c, ins in enumerate(self.instructions)}
        seeded = {}
        for rp in seed:
            try:
                program = tuple(index[ins] for ins in rp.program.instructions)
            except KeyError:
                raise InternalError(f"best: {rp.text!r} uses an instruction outside this hierarchy's candidates")
            steps = [(self.prob.candidates[c].collective, self.prob.candidates[c].groups) for c in program]
            if not execute(self.prob.num_devices, steps, self.prob.goal_groups, self.prob.require_progress).valid:
                raise InternalError(f"best: the interpreter rejects the seeded program {rp.text!r}")
            seconds = program_time(self.system, self.h, rp.program, algo=self.costs.algo,
                                   bytes_per_device=self.costs.bytes).seconds
            if rank_key(seconds, rp.text) != rank_key(rp.seconds, rp.text):
                raise InternalError(f"best: {rp.text!r} is priced {rp.seconds!r} by the search, {seconds!r} here")
            seeded[program] = self.found[program] = RankedProgram(rp.program, seconds)
        self._tighten()
        return seeded

    # ------------------------------------------------------------------ chunk counts and step costs

    def _counts(self, model: z3.ModelRef, t: int) -> tuple[int, ...]:
        """Every cell's chunk count before step ``t`` in ``model``."""
        cc = self.enc.cellcounts
        return tuple(int(v) if isinstance(v, int) else cc.an.value(model.eval(v, model_completion=True))
                     for v in cc.n[t])

    def _step_seconds(self, c: int, counts: Sequence[int]) -> float:
        key = tuple(counts[x] for x in self.cells_of[c])
        seconds = self.costs.get(c, key)
        if self.scale is not None and (c, key) not in self._weighted:
            self._weigh(c, key, seconds)
        return seconds

    def _may_run(self, c: int, counts: Sequence[int]) -> bool:
        """The count-level Hoare preconditions (necessary for validity; a filter, never needed for soundness)."""
        coll, k = self.prob.candidates[c].collective, self.prob.num_devices
        return all(may_run(coll, [counts[x] for x in cells], k) for cells in self.group_cells[c])

    # ------------------------------------------------------------------ bound="clauses"

    def _block(self, prefix: tuple[int, ...], c: int) -> None:
        lits = self.enc.choices.prefix_literals(prefix) + [self.enc.choices.x[len(prefix)][c]]
        self.solver.add(T.not_(T.and_(lits)))
        self._blocked.add(prefix + (c,))
        self.counters["cost_clauses"] += 1

    # ------------------------------------------------------------------ lower bound (lookahead)

    def _abstract_step(self, c: int, state: tuple) -> tuple | None:
        """Per-cell (chunks, contributions per chunk or None if unknown) after ``c``, by docs/semantics.md §4's
        count rules; None when a count rule rules ``c`` out (a necessary condition of validity)."""
        key = (c, state)
        if key not in self._transitions:
            self._transitions[key] = self._abstract_step_uncached(c, state)
        return self._transitions[key]

    def _abstract_step_uncached(self, c: int, state: tuple) -> tuple | None:
        if not self._may_run(c, tuple(n for n, _ in state)):  # the chunk-count rules
            return None
        k = self.prob.num_devices
        new = list(state)
        for cells in self.group_cells[c]:
            out = counts_after(self.prob.candidates[c].collective, [state[x] for x in cells])
            if any(per is not None and per > k for _, per in out):
                return None  # some contribution would be counted twice
            for x, v in zip(cells, out):
                new[x] = v
        return tuple(new)

    def _priced_seconds(self, c: int, counts: tuple[int, ...]) -> float:
        """The step's time if already priced, else 0 (a lower bound: step times are non-negative);
        pricing every pair the abstraction reaches would cost more than the calls it saves."""
        return self.costs.table.get((c, tuple(counts[x] for x in self.cells_of[c])), 0.0)

    def _remaining(self, state: tuple, steps: int) -> float:
        """A lower bound on the time of any valid completion from ``state`` in at most ``steps``
        steps: the cheapest path of the count abstraction to the goal's counts (every valid program's
        counts follow such a path and step times depend only on the counts), 0 once a count is unknown,
        infinity when no such path exists."""
        if state == self._goal_state:
            return 0.0
        if steps == 0:
            return math.inf
        if any(c is None for _, c in state):
            return 0.0
        key = (state, steps)
        found = self._lower.get(key)
        if found is None:
            found = math.inf
            counts = tuple(n for n, _ in state)
            for c in range(len(self.prob.candidates)):
                nxt = self._abstract_step(c, state)
                if nxt is None or (nxt == state and self.prob.require_progress):
                    continue
                here = self._priced_seconds(c, counts)
                if here >= found:
                    continue
                found = min(found, here + self._remaining(nxt, steps - 1))
            self._lower[key] = found
        return found

    def _prune(self, program: tuple[int, ...], counts: list[tuple[int, ...]], seconds: list[float]) -> bool:
        """Exclude, at every prefix of the model's path, each next step after which every valid
        completion costs more than U (``lookahead``: the step plus the count abstraction's cheapest
        completion; else the step alone).

        True when the program itself costs more than U (it is then excluded too).
        """
        spent = 0.0
        state = self._initial_state
        if len(self.costs.table) > 1.25 * self._lower_priced:  # many more steps priced: tighter bounds
            self._lower.clear()
            self._lower_priced = len(self.costs.table)
        for t, c in enumerate(program):
            prefix = program[:t]
            if self._priced.get(prefix) != self.target:
                self._priced[prefix] = self.target
                for c2 in range(len(self.prob.candidates)):
                    if prefix + (c2,) in self._blocked or not self._may_run(c2, counts[t]):
                        continue
                    bound = spent + self._step_seconds(c2, counts[t])
                    if self.lookahead and state is not None and bound <= self.target:
                        nxt = self._abstract_step(c2, state)
                        bound = math.inf if nxt is None else bound + self._remaining(nxt, self.max_len - t - 1)
                    if bound > self.target:
                        self._block(prefix, c2)
            state = None if state is None else self._abstract_step(c, state)
            spent += seconds[t]
            if spent > self.target:
                if prefix + (c,) not in self._blocked:
                    self._block(prefix, c)
                return True
        return False

    # ------------------------------------------------------------------ bound="sum"

    def _literal(self, t: int, c: int, counts: tuple[int, ...]):
        """``step t runs c with these chunk counts on c's cells`` (False when impossible)."""
        key = (t, c, counts)
        if key not in self._literals:
            cc = self.enc.cellcounts
            parts: list[Any] = [self.enc.choices.x[t][c]]
            for x, v in zip(self.cells_of[c], counts):
                term = cc.n[t][x]
                parts.append(T.eq(term, v if isinstance(term, int) else cc.an.lit(v)))
            self._literals[key] = T.and_(parts)
        return self._literals[key]

    def _weigh(self, c: int, key: tuple[int, ...], seconds: float) -> None:
        """Every step that runs (c, counts) costs its weight: scaled seconds rounded down, capped."""
        self._weighted.add((c, key))
        w = min(math.floor(seconds * self.scale), self.cap)
        for t in range(self.max_len):
            lit = self._literal(t, c, key)
            if lit is not False and w > 0:
                cost = self.step_cost[t]
                self.solver.add(T.implies(lit, cost == z3.BitVecVal(w, cost.size(), cost.ctx)))

    def _sum_bound(self) -> None:
        if self.scale is None:
            self.scale = SUM_UNITS / self.target if self.target > 0 else 1.0
            self.cap = math.floor(self.target * self.scale) + 1
            width = (self.max_len * self.cap).bit_length() + 1
            ctx = self.enc.context
            self.step_cost = [z3.BitVec(f"best_cost_{t}", width, ctx) for t in range(self.max_len)]
            for v in self.step_cost:
                self.solver.add(z3.ULE(v, z3.BitVecVal(self.cap, width, ctx)))  # so the sum cannot wrap
            for c, key in list(self.costs.table):
                self._weigh(c, key, self.costs.table[(c, key)])
        self.units = math.floor(self.target * self.scale)
        total = self.step_cost[0]
        for v in self.step_cost[1:]:
            total = total + v
        self.solver.add(z3.ULE(total, z3.BitVecVal(self.units, total.size(), total.ctx)))

    def _over_sum(self, seconds: list[float]) -> bool:
        return self.units is not None and sum(min(math.floor(x * self.scale), self.cap) for x in seconds) > self.units

    # ------------------------------------------------------------------ the loop

    def _tighten(self) -> None:
        """With N programs known, U = the N-th cheapest time (+ tolerance); it only decreases."""
        if len(self.found) < self.top:
            return
        nth = sorted(self.found.values(), key=lambda r: rank_key(r.seconds, r.text))[self.top - 1].seconds
        target = nth * (1 + TIE_TOLERANCE)
        if self.target is None or target < self.target:
            self.target = target
            self.counters["bound_updates"] += 1
            if self.mode == "sum" and self.solver is not None:
                self._sum_bound()

    def _accept(self, program: tuple[int, ...], counts: list[tuple[int, ...]]) -> RankedProgram:
        """Interpreter re-check, interpreter holdings = the solver's counts, exact cost."""
        prob = self.prob
        steps = [(prob.candidates[c].collective, prob.candidates[c].groups) for c in program]
        run = execute(prob.num_devices, steps, prob.goal_groups, prob.require_progress)
        if not run.valid:
            why = run.violation.message if run.violation else "the goal is not reached"
            raise InternalError(f"best: the encoding accepted {prob.label(program)!r}, which the interpreter "
                                f"rejects: {why}")
        prog = Program(tuple(self.instructions[c] for c in program))
        fractions = held_fractions_of_programs(self.h, [prog])[prog]
        k, cell = prob.num_devices, self.enc.s.cell
        for t in range(len(program)):
            if any(counts[t][cell[d]] != round(float(fractions[t][d]) * k) for d in range(k)):
                raise InternalError(f"best: chunk counts of {prob.label(program)!r} before step {t} differ "
                                    "between the encoding and the interpreter")
        cost = program_time(self.system, self.h, prog, algo=self.costs.algo, bytes_per_device=self.costs.bytes,
                            fractions=fractions)
        return RankedProgram(prog, cost.seconds)

    # ------------------------------------------------------------------ the strategy's hooks

    def phases(self, enc, max_len: int) -> Iterator[Phase]:
        nonempty = z3.Not(enc.choices.stop(0))
        yield Phase("all", None, lambda: [nonempty])

    def begin(self, enc, solver: z3.Solver) -> None:
        self.solver = solver
        for program in self.seeded:
            solver.add(enc.blocking_clause(program))
        if self.mode == "sum" and self.target is not None:
            self._sum_bound()

    def admit(self, solver: z3.Solver, model: z3.ModelRef, program: tuple[int, ...]) -> bool:
        """Price the model's steps; a model over U is excluded by cost clauses and never confirmed."""
        counts = [self._counts(model, t) for t in range(len(program))]
        priced = len(self.costs.table)
        seconds = [self._step_seconds(c, counts[t]) for t, c in enumerate(program)]
        if self.target is not None and self.mode == "clauses" and self._prune(program, counts, seconds):
            self.counters["over_bound_models"] += 1
            return False
        if self.mode == "sum" and self._over_sum(seconds):
            if len(self.costs.table) == priced:
                raise InternalError("best: a model violates the stated cost bound")
            self.counters["over_bound_models"] += 1  # it ran pairs priced only now: look again
            return False
        self._model_counts[program] = counts
        return True

    def accepted(self, solver: z3.Solver, program: tuple[int, ...]) -> None:
        self.found[program] = self._accept(program, self._model_counts.pop(program))
        self._tighten()

    def run(self) -> tuple[SolveStatus, list[RankedProgram], dict[str, Any]]:
        start = time.perf_counter()
        res = run_encoding(self.enc, self.max_len, timeout_ms=self.timeout_ms, strategy=self)
        ranked = sorted(self.found.values(), key=lambda r: rank_key(r.seconds, r.text))[: self.top]
        status = res.status
        if status is SolveStatus.COMPLETE:
            status = SolveStatus.OPTIMAL if ranked else SolveStatus.INFEASIBLE
        refuted = sum(res.stats["refinements"].values())
        stats: dict[str, Any] = {
            "bound": self.mode,
            "solver_calls": res.stats["solver_calls"],
            "candidates": refuted + len(res.programs),
            "refuted": refuted,
            "accepted": len(res.programs),
            **self.counters,
            "priced_pairs": len(self.costs.table),
            "pricing_seconds": round(self.costs.seconds, 6),
            "seconds": round(time.perf_counter() - start, 6),
            "solver": {k: res.stats[k] for k in SOLVER_FIGURES if k in res.stats},
            "encoding": self.enc.statistics(),
        }
        return status, ranked, stats
