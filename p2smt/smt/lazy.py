"""Counterexample-guided encodings: a compact synthesizer whose candidates an exact checker confirms.

The synthesizer (one incremental solver) asserts the choices, the per-cell chunk counts and
contributions per chunk with their necessary conditions (``unroll.CellCounts``: exact counts, so every
count rule — ReduceScatter divisibility, AllGather sizes, progress — is exact), Broadcasts that cannot
add information (``unroll.equal_state_lemmas``), and the Hoare rules and the goal on the tracks of a
growing set of concrete witnesses. Each model is a candidate program; ``check.PlanChecker`` proves it
on every chunk and payload at once or names the first failing step and a witness. A failure is turned
into a constraint that excludes the candidate and no valid program:

* ``refine="witness"``: the witness's track joins the synthesizer (both sides evaluate the very same
  formulas, so the candidate violates it there too) — counterexample-guided inductive synthesis;
* ``refine="prefix"`` (and for existential rules, which no single witness refutes): a clause over the
  choice variables that excludes every program starting with the failing prefix (the Hoare semantics
  stops at the first failing step, so none of them is valid).

Both kinds only add necessary conditions of validity, and every refinement removes the current
candidate (a witness that is already tracked falls back to blocking), so the enumeration is exact
and terminates. The engine confirms candidates in batches (``refine_many``): each candidate is
excluded by its own blocking clause when decoded, and the batch is proved by one checker query when
all are valid; the failing ones are then refuted one by one as above.
"""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Hashable, Sequence
from typing import Any

import z3

from p2smt.model.problem import SynthesisProblem
from p2smt.smt import terms as T
from p2smt.smt.base import ACCEPTED, Encoding, Program, Refinement
from p2smt.smt.check import PayloadFactory, PlanChecker, SameStates, Unknown
from p2smt.smt.choices import StepChoices
from p2smt.smt.engine import solver_figures
from p2smt.smt.structure import Structure, goal_is_terminal
from p2smt.smt.unroll import CellCounts, Payload, Semantics, equal_state_lemmas

Witness = Hashable


class CheckedEncoding(Encoding):
    """Base of the Boolean and value encodings; subclasses define the payload and its witnesses."""

    strict_rows = True
    logic = "QF_FD"

    def __init__(self, problem: SynthesisProblem, max_len: int, options: Any):
        """``options``: the variant's typed options; read here: ``refine``, ``arithmetic``,
        ``lemma_depth`` and, when present, ``weights`` (per-chunk contribution counts; default on)."""
        super().__init__(problem, max_len)
        self.options = options
        self.refine_mode = options.refine
        self.lemma_depth = options.lemma_depth
        arithmetic = options.arithmetic
        use_weights = getattr(options, "weights", True)
        self.s = Structure(problem)
        self.chunks = problem.num_devices
        self.choices = StepChoices(self.context, max_len, len(problem.candidates), prefix="s_", decode_index=True)
        self.cellcounts = CellCounts(
            self.s,
            self.choices,
            self.chunks,
            self.context,
            arithmetic,
            problem.require_progress,
            same_chunks=self.strict_rows,
            contributions=self.strict_rows and use_weights,
        )
        self.arith = self.cellcounts.wide
        self.tracked: list[Witness] = []
        self.terminal = goal_is_terminal(problem)
        self._solver: z3.Solver | None = None
        self._checker: PlanChecker | None = None
        self._diagnoser: PlanChecker | None = None
        self._same: SameStates | None = None
        self.counters = {"witnesses": 0, "prefix_blocks": 0, "program_blocks": 0, "checks": 0}
        self.seconds = {"declare": 0.0, "check": 0.0}

    # ------------------------------------------------------------------ subclass hooks

    @abstractmethod
    def payload_factory(self) -> PayloadFactory:
        """Builds the checker's symbolic payload: (payload, [(name, variable)], domain constraints)."""

    def proof_checker(self) -> PlanChecker:
        """The checker that proves candidates (default: ``new_checker()``)."""
        return self.new_checker()

    @abstractmethod
    def witness_payload(self, witness: Witness) -> tuple[Any, Payload]:
        """(row, payload) of a concrete witness, for a synthesizer track."""

    @abstractmethod
    def witness_of(self, found: dict[str, int]) -> Witness:
        """The witness a checker failure names (its ``Failure.witness`` dict)."""

    def initial_witnesses(self) -> list[Witness]:
        return []

    # ------------------------------------------------------------------ engine interface

    def declare(self, solver: z3.Solver) -> None:
        start = time.perf_counter()
        self._solver = solver
        ch, cc = self.choices, self.cellcounts
        solver.add(*ch.constraints())
        solver.add(*cc.flush())
        for t in range(self.max_len):
            for c in range(len(self.problem.candidates)):
                cond = T.implies(ch.x[t][c], cc.rules(t, c))
                if cond is not True:
                    solver.add(cond)
        solver.add(cc.goal(), *equal_state_lemmas(self.s, ch, self.lemma_depth))
        for w in self.initial_witnesses():
            self._add_witness(w)
        self.seconds["declare"] += time.perf_counter() - start

    def witness_view(self, witness: Witness) -> tuple[Any, Payload] | None:
        """(a ``structure.Quotient`` and the payload on its devices) when the witness's track may be
        followed on one device per cell of a stable partition; None: on every device."""
        return None

    def _add_witness(self, witness: Witness) -> None:
        row, payload = self.witness_payload(witness)
        view = self.witness_view(witness)
        s = self.s if view is None else view[0]
        if view is not None:
            payload = view[1]
        base = self.s.cell if view is None else [self.s.cell[d] for d in s.rep]
        sem = Semantics(s, payload, row, self.arith, self.strict_rows, self.chunks)
        ch, cc = self.choices, self.cellcounts
        state = sem.initial()
        parts = []
        for t in range(self.max_len):
            options = [(ch.x[t][c], c) for c in range(len(self.problem.candidates))]

            def count(d: int, t=t) -> Any:
                return cc.widen(cc.n[t][base[d]])

            for guard, c in options:
                first = {gid: gi for gi, gid in reversed(list(enumerate(s.cand_groups[c])))}
                conds = [cond for gi in sorted(first.values()) for _, cond in sem.rules(state, c, gi, count)]
                parts.append(T.implies(guard, T.and_(conds)))
            state = sem.step(state, options, count, lambda c, gi, t=t: cc.widen(cc.quotient(t, c, gi)), t)
        parts.append(sem.goal(state))
        self._solver.add(*cc.flush(), *[p for p in parts if p is not True])
        self.tracked.append(witness)
        self.counters["witnesses"] = len(self.tracked)

    def length_assumptions(self, length: int) -> list[z3.BoolRef]:
        return self.choices.length_assumptions(length)

    def decode(self, model: z3.ModelRef) -> Program:
        return self.choices.decode(model)

    def blocking_clause(self, program: Program) -> z3.BoolRef:
        """``choices.blocking_clause`` built with the direct constructors (one per candidate)."""
        lits = self.choices.program_literals(program)
        if not lits:
            return self.choices.blocking_clause(program)
        return T.or_([T.not_(v) for v in lits])

    def checker(self) -> PlanChecker:
        """The exact checker of this encoding's candidates (one per encoding, nodes cached)."""
        if self._checker is None:
            self._checker = self.proof_checker()
        return self._checker

    def implied(self, program: Program) -> list[Program]:
        """Programs the accepted ``program`` implies with the earlier accepted ones (``SameStates``)."""
        if self._same is None:
            self._same = SameStates(self.checker(), self.max_len)
        return self._same.add(program)

    def diagnoser(self) -> PlanChecker:
        """A checker whose failures name a full witness (when the proving checker's do not)."""
        if self._diagnoser is None:
            self._diagnoser = self.new_checker()
        return self._diagnoser

    def new_checker(
        self,
        chunks: int | None = None,
        timeout_ms: int | None = None,
        payload: PayloadFactory | None = None,
        arith: str = "int",
        logic: str | None = None,
    ) -> PlanChecker:
        """A checker of fixed programs in this encoding's semantics (``chunks``: rows of the state)."""
        return PlanChecker(
            self.problem,
            payload or self.payload_factory(),
            chunks=chunks,
            strict_rows=self.strict_rows,
            structure=self.s,
            ctx=self.context,
            timeout_ms=timeout_ms,
            arith=arith,
            logic=logic,
        )

    def queries(self):
        return list(self._checker.log) if self._checker is not None else []

    batch_refine = True

    def refine(self, solver: z3.Solver, program: Program, timeout_ms: int | None = None) -> Refinement:
        return self.refine_many(solver, [program], timeout_ms)[0]

    def refine_many(
        self, solver: z3.Solver, programs: Sequence[Program], timeout_ms: int | None = None
    ) -> list[Refinement]:
        """Prove the candidates (one checker query when all are valid); refute each invalid one."""
        start = time.perf_counter()
        chk = self.checker()
        chk.record = self.record_queries
        if timeout_ms is not None:
            chk.solver.set("timeout", int(timeout_ms))
        self.counters["checks"] += len(programs)
        try:
            fails = chk.failures(programs, terminal_goal=self.terminal)
        except Unknown:
            return [Refinement(False, "unknown")] * len(programs)
        finally:
            self.seconds["check"] += time.perf_counter() - start
        return [ACCEPTED if f is None else self._refute(solver, p, f) for p, f in zip(programs, fails)]

    def _refute(self, solver: z3.Solver, program: Program, fail) -> Refinement:
        """Add a necessary condition of validity that the failing ``program`` violates."""
        witness = None
        if self.refine_mode == "witness" and fail.witness and not fail.early_goal:
            if set(fail.witness) == {"chunk"}:  # the proving checker names no column: ask one that does
                fail = self.diagnoser().first_failure(program, terminal_goal=self.terminal) or fail
            if fail.witness and set(fail.witness) != {"chunk"} and not fail.early_goal:
                witness = self.witness_of(fail.witness)
        if witness is not None and witness not in self.tracked:
            self._add_witness(witness)
            return Refinement(
                False, "witness", {"witness": fail.witness, "step": fail.step, "rule": fail.rule}
            )
        if fail.step is None:
            self.counters["program_blocks"] += 1
            solver.add(self.blocking_clause(program))
            return Refinement(False, "program", {"rule": fail.rule})
        return self._block_prefix(
            program[: fail.step + (0 if fail.early_goal else 1)], fail.early_goal, fail.rule
        )

    def _block_prefix(self, prefix: Sequence[int], continues: bool, rule: str) -> Refinement:
        """Exclude every program starting with ``prefix`` (that has another step, if ``continues``)."""
        lits = self.choices.prefix_literals(prefix)
        if continues:
            lits.append(z3.Not(self.choices.stop(len(prefix))))
        self._solver.add(z3.Not(z3.And(lits)) if len(lits) > 1 else z3.Not(lits[0]))
        self.counters["prefix_blocks"] += 1
        return Refinement(False, "prefix", {"prefix": tuple(prefix), "rule": rule})

    def statistics(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.counters)
        out["cells"] = self.s.cells
        out["encoding_seconds"] = {k: round(v, 6) for k, v in self.seconds.items()}
        if self._checker is not None:
            out["checker_calls"] = self._checker.calls
            out["checker_nodes"] = len(self._checker.nodes)
            out["checker_solver"] = solver_figures(self._checker.solver)
            out["checker_solver_seconds"] = round(self._checker.solver_seconds, 6)
        return out
