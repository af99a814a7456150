"""representative: a wrapper strategy over any encoding: synthesize on the hierarchy with every non-trivial
level of size 2, check at the real size.

It takes the synthesis hierarchy explicitly (``enumerate_z3(..., hierarchy=h)``; the driver passes the
one each problem was built from) and runs its inner encoding, its checks and its certificate on the one
solver loop; ``encodings/representative.py`` registers it under the name ``representative``.

Hierarchy (d) (one goal group of all devices): every level of size > 1 is set to ``size`` (2 by
default; never above the real size), levels of size 1 stay 1. The candidates of both hierarchies are
matched by DSL label; the match is checked (same labels, same collectives, same pattern of which
labels share groups), and a problem that does not match (other hierarchy kinds, or no hierarchy given)
falls back to solving the real problem with the inner encoding (``statistics()["fallback"]`` says
why). The inner encoding (any registered one, ``bool-matrix`` by default) enumerates the program set
of the small problem and every program is mapped to the real candidates.

The real-size check (``real_check``; ``statistics()["real_check"]`` says which one ran):

* ``"z3"``: every mapped program is proved at the real size by Z3 (``check.PlanChecker`` of the
  ``bool-matrix`` encoding: a symbolic chunk, every contribution at once). A program that fails is
  never reported and starts a refinement round (CEGIS over sizes): the levels still below their real
  size grow (2 -> 3 -> ... -> real size, at most ``max_rounds`` rounds, the last one at the real
  size), the new small problem is solved again and its proved programs are added. A check that
  returns unknown makes the run's status "unknown".
* ``"recheck"``: no check inside the encoding (the Z3 proof's formulas hold a term per device and
  step: minutes at 256 devices). The mapped programs of the first round are returned as they are and
  the only real-size check is the driver's independent re-check (``synth.recheck``: ``pieces.py``
  above 128 devices, the numpy interpreter below), which drops every failing program and counts it
  (``dropped_at_real_size``). There is no refinement in this mode.
* ``"auto"`` (default): ``"z3"`` up to ``z3_check_max_devices`` devices, ``"recheck"`` above.

Completeness. A program valid at the real size but invalid at size 2 would be missed, and such programs
exist (docs/symmetry.md: a 10-step program valid at (2, 3, 3, 2) and invalid at (2, 2, 2, 2)); the other
direction fails too (a 7-step program valid at sizes (a, b, c) iff a divides c). The real-size check
removes the programs of the second kind: ``z3`` refutes them and refines, and with ``recheck`` the
driver's re-check drops them (``dropped_at_real_size``) and the result's status is ``conjectured``. ``certify`` makes the result
exact regardless: the ``bool-matrix`` synthesizer runs at the real size with the found programs
blocked and must answer unsat for every length (a program it finds is added and counted in
``certificate_additions``); ``certify="auto"`` does so up to ``certify_max_devices`` devices. It is
skipped, and the result called ``exact``, when the inner encoding solved the real problem itself
(real sizes of 2, a last refinement round at the real size, or a fallback). A ``conjectured`` result is
then proved complete by the driver where it can (``synth.driver``: up to three non-trivial levels and
4,096 devices, the inclusion exploration shows size 2 safe at the real size, docs/symmetry.md, Theorem 3').
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

import z3
from pydantic import Field

from p2smt.errors import P2Error
from p2smt.model.dsl import problem as make_problem
from p2smt.model.hierarchy import SynthesisHierarchy
from p2smt.model.problem import SynthesisProblem, canonical_order
from p2smt.model.status import SolveStatus
from p2smt.smt.base import Encoding, EncodingOptions, Program, Refinement
from p2smt.smt.check import PlanChecker, Unknown
from p2smt.smt.engine import EngineResult, Smt2Sink, run_encoding
from p2smt.smt.registry import load_encoding
from p2smt.smt.structure import goal_is_terminal

CONJECTURE = (
    "NOT proved: the programs of the size-2 instance, which can miss programs valid at the real size (the "
    "program set depends on the sizes both ways: docs/symmetry.md)"
)
"""What an uncertified result's completeness rests on."""


class RepresentativeOptions(EncodingOptions):
    inner: str = Field("bool-matrix", description="encoding that solves the small problem")
    inner_options: dict[str, Any] = Field(default_factory=dict, description="options of the inner encoding")
    size: int = Field(2, ge=2, le=64, description="size of every non-trivial level in the first round")
    max_rounds: int = Field(4, ge=1, le=16, description="refinement rounds; the last one solves at the real size")
    real_check: Literal["auto", "z3", "recheck"] = Field(
        "auto",
        description=(
            "check at the real size: z3 (PlanChecker proof, refines sizes on a failure), recheck (none here: "
            "the driver's independent re-check, no refinement), auto (z3 up to z3_check_max_devices)"
        ),
    )
    z3_check_max_devices: int = Field(64, ge=1, description="largest problem real_check='auto' proves with Z3")
    certify: Literal["auto", "always", "never"] = Field(
        "auto", description="prove completeness at the real size with the exact bool-matrix synthesizer"
    )
    certify_max_devices: int = Field(64, ge=1, description="largest problem certify='auto' certifies")
    inner_timeout_ms: int | None = Field(
        None, gt=0, description="per-query timeout of the inner, check and certificate solvers (default: --timeout)"
    )


def resized(h: SynthesisHierarchy, sizes: tuple[int, ...]) -> SynthesisHierarchy:
    """Hierarchy (d) with new level sizes (one replica, one goal group of every device)."""
    levels = tuple((name, s) for (name, _), s in zip(h.levels, sizes))
    k = 1
    for s in sizes:
        k *= s
    return SynthesisHierarchy(h.kind, levels, (tuple(range(k)),), (tuple(range(k)),), h.master_scope)


def _sharing(prob: SynthesisProblem, order: tuple[int, ...]) -> tuple[int, ...]:
    """For each candidate (in ``order``), the position in ``order`` of the first one with its groups."""
    first: dict[tuple, int] = {}
    return tuple(first.setdefault(tuple(prob.candidates[i].groups), pos) for pos, i in enumerate(order))


def match(small: SynthesisProblem, real: SynthesisProblem) -> tuple[int, ...] | str:
    """Small candidate index -> real candidate index by DSL label, or why the structures differ.

    Both sides must have the same labels, each naming the same collective, and the same labels must
    share a group set (an instruction deduplicated at one size but not at the other would mean that
    the representative hierarchy has a different candidate structure)."""
    real_index = {c.label: i for i, c in enumerate(real.candidates)}
    labels = [c.label for c in small.candidates]
    if len(labels) != len(real_index) or set(labels) != set(real_index):
        missing = sorted(set(real_index) - set(labels))[:2] or sorted(set(labels) - set(real_index))[:2]
        return f"the candidate labels differ (e.g. {', '.join(missing)})"
    out = tuple(real_index[label] for label in labels)
    for c, j in zip(small.candidates, out):
        if real.candidates[j].collective is not c.collective:
            return f"label {c.label} names different collectives"
    if _sharing(small, tuple(range(len(labels)))) != _sharing(real, out):
        return "labels share group sets differently"
    return out


class Excluding(Encoding):
    """An encoding with some programs blocked up front (the completeness certificate's solver)."""

    def __init__(self, base: Encoding, excluded: Sequence[Program]):
        self.base = base
        self.excluded = tuple(excluded)
        self.problem, self.max_len, self.context = base.problem, base.max_len, base.context
        self.name, self.logic, self.batch_refine = base.name, base.logic, base.batch_refine

    def new_solver(self) -> z3.Solver:
        return self.base.new_solver()

    def declare(self, solver: z3.Solver) -> None:
        self.base.record_queries = self.record_queries
        self.base.declare(solver)
        for p in self.excluded:
            solver.add(self.base.blocking_clause(p))

    def length_assumptions(self, length: int) -> list[z3.BoolRef]:
        return self.base.length_assumptions(length)

    def decode(self, model: z3.ModelRef) -> Program:
        return self.base.decode(model)

    def blocking_clause(self, program: Program) -> z3.BoolRef:
        return self.base.blocking_clause(program)

    def refine(self, solver: z3.Solver, program: Program, timeout_ms: int | None = None) -> Refinement:
        return self.base.refine(solver, program, timeout_ms)

    def refine_many(self, solver, programs, timeout_ms=None) -> list[Refinement]:
        return self.base.refine_many(solver, programs, timeout_ms)

    def queries(self):
        return self.base.queries()

    def statistics(self) -> dict[str, Any]:
        return self.base.statistics()


class Representative:
    """The size-reduction wrapper on one problem and the hierarchy it was built from (None: fall back)."""

    def __init__(
        self,
        problem: SynthesisProblem,
        hierarchy: SynthesisHierarchy | None,
        max_len: int,
        options: RepresentativeOptions,
        *,
        timeout_ms: int | None = None,
        sink: Smt2Sink | None = None,
        extra_dirs: Iterable[str | Path] = (),
    ):
        if options.inner == "representative":
            raise P2Error("encoding 'representative': the inner encoding cannot be 'representative'")
        self.problem, self.hierarchy, self.max_len, self.options = problem, hierarchy, max_len, options
        self.inner = load_encoding(options.inner, extra_dirs)
        self.inner.parse_options(options.inner_options)  # bad inner options fail before any solving
        self.found: list[Program] = []
        self.unknown = False
        self.timeout_ms = options.inner_timeout_ms or timeout_ms
        self.sink = sink or Smt2Sink(None, "representative")
        self._checker: PlanChecker | None = None
        self._terminal = goal_is_terminal(problem)
        self.stats: dict[str, Any] = {
            "real_check": self.check_mode(),
            "rounds": [],
            "size_refinements": 0,
            "fallback": None,
        }

    def check_mode(self) -> str:
        """The real-size check this run uses: "z3" or "recheck" ("inner" once a fallback happened)."""
        mode = self.options.real_check
        if mode == "auto":
            return "z3" if self.problem.num_devices <= self.options.z3_check_max_devices else "recheck"
        return mode

    # ------------------------------------------------------------------ the search

    def _run_inner(self, enc: Encoding, scope: str) -> EngineResult:
        return run_encoding(enc, self.max_len, timeout_ms=self.timeout_ms, sink=self.sink.scoped(scope))

    def _solve(self, prob: SynthesisProblem) -> tuple[str, tuple[Program, ...], dict[str, Any]]:
        res = self._run_inner(self.inner.create(prob, self.max_len, self.options.inner_options), "inner")
        return res.status, res.programs, res.stats

    def _check(self, programs: Sequence[Program]) -> list[bool]:
        """Z3's verdict on each program at the real size (raises Unknown when the solver gives up)."""
        if self._checker is None:
            exact = load_encoding("bool-matrix").create(self.problem, self.max_len)
            self._checker = exact.proof_checker()
            if self.timeout_ms is not None:
                self._checker.solver.set("timeout", int(self.timeout_ms))
        chk = self._checker
        chk.record = self.sink.active
        try:
            fails = chk.failures(list(programs), terminal_goal=self._terminal)
        finally:
            for kind, text in chk.log if self.sink.active else ():
                self.sink.write_text(f"check-{kind}", text)
        return [f is None for f in fails]

    def _plan(self) -> tuple[list[tuple[int, ...]], str | None]:
        """The size vectors of the rounds, or (no rounds, the reason for falling back)."""
        h = self.hierarchy
        if h is None:
            return [], "no synthesis hierarchy was given"
        if h.kind != "d" or len(self.problem.goal_groups) != 1:
            return [], f"hierarchy ({h.kind}) is not the collapsed reduction hierarchy with one goal group"
        real = h.sizes
        first = tuple(s if s == 1 else min(s, self.options.size) for s in real)
        if self.stats["real_check"] == "recheck":
            return [first], None
        rounds = []
        for r in range(self.options.max_rounds - 1):
            step = tuple(s if s == 1 else min(s, self.options.size + r) for s in real)
            if step not in rounds:
                rounds.append(step)
            if step == real:
                break
        if real not in rounds:
            rounds.append(real)
        return rounds, None

    def _search(self) -> None:
        rounds, fallback = self._plan()
        real = self.problem
        if fallback is not None:
            self.stats["fallback"] = fallback
            self.stats["real_check"] = "inner"
            t0 = time.perf_counter()
            status, programs, stats = self._solve(real)
            self.unknown = status is not SolveStatus.COMPLETE
            self.found = list(programs)
            self.stats["rounds"].append(
                {"sizes": None, "status": status, "programs": len(programs),
                 "solve_seconds": round(time.perf_counter() - t0, 6)}
            )
            return
        h = self.hierarchy
        accepted: set[Program] = set()
        verdicts: dict[Program, bool] = {}
        z3_check = self.stats["real_check"] == "z3"
        for sizes in rounds:
            t0 = time.perf_counter()
            small = real if sizes == h.sizes else make_problem(resized(h, sizes), real.require_progress)
            mapping = match(small, real) if small is not real else tuple(range(len(real.candidates)))
            if isinstance(mapping, str):
                raise P2Error(f"encoding 'representative': sizes {list(sizes)}: {mapping}")
            status, programs, stats = self._solve(small)
            mapped = [tuple(mapping[c] for c in p) for p in programs]
            t1 = time.perf_counter()
            record = {
                "sizes": list(sizes),
                "status": status,
                "programs": len(programs),
                "inner_solver_calls": stats.get("solver_calls"),
                "solve_seconds": round(t1 - t0, 6),
            }
            self.stats["rounds"].append(record)
            if status is not SolveStatus.COMPLETE:
                self.unknown = True
                break
            if not z3_check:
                accepted.update(mapped)
                break
            todo = [p for p in dict.fromkeys(mapped) if p not in verdicts]
            try:
                verdicts.update(zip(todo, self._check(todo)))
            except Unknown as err:
                self.unknown = True
                record["check"] = f"unknown: {err}"
                break
            finally:
                record["check_seconds"] = round(time.perf_counter() - t1, 6)
            failed = [p for p in mapped if not verdicts[p]]
            accepted.update(p for p in mapped if verdicts[p])
            record["failed_at_real_size"] = len(failed)
            self.stats["size_refinements"] += len(failed)
            if not failed:
                break
        self.found = canonical_order(accepted)

    def _certify(self) -> None:
        """The exact bool-matrix synthesizer at the real size, found programs blocked: unsat per length."""
        opt = self.options.certify
        k = self.problem.num_devices
        last = self.stats["rounds"][-1] if self.stats["rounds"] else {}
        h = self.hierarchy
        if not self.unknown and (h is None or last.get("sizes") in (None, list(h.sizes))):
            self.stats["completeness"] = "exact"  # the inner encoding solved the real problem itself
            return
        if opt == "never" or (opt == "auto" and k > self.options.certify_max_devices) or self.unknown:
            self.stats["completeness"] = "unknown" if self.unknown else "conjectured"
            if not self.unknown:
                self.stats["rests_on"] = CONJECTURE
            return
        t0 = time.perf_counter()
        exact = load_encoding("bool-matrix").create(self.problem, self.max_len)
        res = self._run_inner(Excluding(exact, self.found), "certificate")
        self.unknown = res.status is not SolveStatus.COMPLETE
        self.found = canonical_order(set(self.found) | set(res.programs))
        self.stats["certificate_additions"] = len(res.programs)
        self.stats["certificate_solver_calls"] = res.stats.get("solver_calls")
        self.stats["certificate_seconds"] = round(time.perf_counter() - t0, 6)
        self.stats["completeness"] = "unknown" if self.unknown else "certified"

    def run(self) -> EngineResult:
        """The search, then the certificate: every program found, in canonical order."""
        start = time.perf_counter()
        self._search()
        self._certify()
        self.stats["programs"] = len(self.found)
        self.stats["candidates"] = len(self.problem.candidates)
        self.stats["verified_at_real_size"] = self.stats["real_check"] != "recheck"
        self.stats["search_seconds"] = round(time.perf_counter() - start, 6)
        self.stats["refinement_rounds"] = max(0, len(self.stats["rounds"]) - 1)
        if self._checker is not None:
            self.stats["checker_calls"] = self._checker.calls
        stats = {"encoding": "representative", **self.stats, "seconds": round(time.perf_counter() - start, 6)}
        if self.sink.active:
            stats["smt2_files"] = self.sink.count
        status = SolveStatus.UNKNOWN if self.unknown else SolveStatus.COMPLETE
        return EngineResult(status, tuple(canonical_order(self.found)), stats)


def solve(problem, hierarchy, max_len, options, timeout_ms=None, sink=None, extra_dirs=()) -> EngineResult:
    """The wrapper strategy's entry point (``base.Wrapper``), as ``enumerate_z3`` calls it."""
    return Representative(
        problem, hierarchy, max_len, options, timeout_ms=timeout_ms, sink=sink, extra_dirs=extra_dirs
    ).run()
