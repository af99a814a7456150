"""representative: synthesize on the hierarchy with every non-trivial level of size 2, check at the real size.

Hierarchy (d) (one goal group of all devices): every level of size > 1 is set to ``size`` (2 by
default; never above the real size), levels of size 1 stay 1. The candidates of both hierarchies are
matched by DSL label; the match is checked (same labels, same collectives, same pattern of which
labels share groups), and a problem that does not match (other hierarchy kinds, or no hierarchy)
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
  above 128 devices, the numpy interpreter below), which raises an InternalError on any failing
  program. There is no refinement in this mode: a failure is an error, not a new round.
* ``"auto"`` (default): ``"z3"`` up to ``z3_check_max_devices`` devices, ``"recheck"`` above.

Completeness. A program valid at the real size but invalid at size 2 would be missed. The sizes
enter the Hoare rules only through numbers: ReduceScatter's divisibility and block boundaries, and
AllGather's equal sizes; the groups themselves have the same level structure at every size >= 2 (a
group varies a fixed set of levels; Master fixes the same levels at 0). In every valid execution
observed, the chunks a device holds are the chunks whose mixed-radix digits for the levels already
scattered equal its own coordinates (its "layout"), and a ReduceScatter over levels V is only
applicable when no member's chunks or contributions already depend on a level of V; then block
i of the n chunks is exactly the chunks whose V-digits equal member i's coordinates, n is divisible
by |V|'s product at every size, and every rule compares layouts level by level, which does not
depend on the sizes. We have not proved that every valid execution stays in this layout form, so
the argument is a conjecture backed by exhaustive comparisons (every problem of the paper grid and
random hierarchies: identical sets, see tests/test_representative.py). ``certify`` makes the result
exact regardless: the ``bool-matrix`` synthesizer runs at the real size with the found programs
blocked and must answer unsat for every length (a program it finds is added and counted in
``certificate_additions``); ``certify="auto"`` does so up to ``certify_max_devices`` devices. It is
skipped, and the result called ``exact``, when the inner encoding solved the real problem itself
(real sizes of 2, a last refinement round at the real size, or a fallback).

Engine interface. All the work happens in the first ``refine``: the engine's solver only holds the
choice variables, its first model is an arbitrary one-step program, and ``refine`` runs the search,
then restricts the engine's solver to the found set (the first model is refused with kind
"not-found" when it is not in it). Doing it there rather than in ``declare`` lets ``--emit-smt2``
write every auxiliary query (inner solves, real-size checks, certificate) in the order it was asked.
"""

from __future__ import annotations

import re
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import z3
from pydantic import Field

from p2smt.errors import P2Error
from p2smt.model.dsl import problem as make_problem
from p2smt.model.hierarchy import SynthesisHierarchy
from p2smt.model.problem import SynthesisProblem, canonical_order
from p2smt.smt.base import ACCEPTED, Encoding, EncodingOptions, EncodingSpec, Program, Refinement
from p2smt.smt.check import PlanChecker, Unknown
from p2smt.smt.engine import run_encoding
from p2smt.smt.lazy import goal_is_terminal
from p2smt.smt.registry import load_encoding

NOT_FOUND = Refinement(False, "not-found")
UNKNOWN = Refinement(False, "unknown")


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


_LENGTH = re.compile(r"^len\d+$")


def run_recorded(enc: Encoding, max_len: int, timeout_ms: int | None, record: bool, prefix: str):
    """``run_encoding`` and, when ``record``, its queries as (kind, SMT-LIB2 text) in the order asked.

    The engine's own ``--emit-smt2`` writer produces them (into a temporary folder read back here), so
    they are exactly what it would emit; kinds lose their length part and gain ``prefix``."""
    if not record:
        return run_encoding(enc, max_len, timeout_ms=timeout_ms, tag="q"), []
    with tempfile.TemporaryDirectory(prefix="p2smt-representative-") as folder:
        res = run_encoding(enc, max_len, timeout_ms=timeout_ms, emit_smt2=Path(folder), tag="q")
        log = []
        for path in sorted(Path(folder).glob("q-*.smt2")):
            parts = path.stem.split("-")[2:]  # q, count, then [lenN,] kind words
            kind = "-".join(p for p in parts if not _LENGTH.match(p)) or "query"
            log.append((f"{prefix}-{kind}", path.read_text()))
    return res, log


class RepresentativeEncoding(Encoding):
    name = "representative"

    def __init__(self, problem: SynthesisProblem, max_len: int, options: RepresentativeOptions):
        super().__init__(problem, max_len)
        if options.inner == "representative":
            raise P2Error("encoding 'representative': the inner encoding cannot be 'representative'")
        self.options = options
        self.inner = load_encoding(options.inner)
        self.inner.parse_options(options.inner_options)  # bad inner options fail now, not in refine
        n = len(problem.candidates)
        ctx = self.context
        self.x = [[z3.Bool(f"r_x_{t}_{c}", ctx) for c in range(n)] for t in range(max_len)]
        self.stop = [z3.Bool(f"r_stop_{t}", ctx) for t in range(max_len)]
        self.found: list[Program] | None = None  # None until the first refine ran the search
        self.unknown = False
        self.timeout_ms: int | None = None
        self._checker: PlanChecker | None = None
        self._terminal = goal_is_terminal(problem)
        self._log: list[tuple[str, str]] = []
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

    def _solve(self, prob: SynthesisProblem) -> tuple[str, tuple[Program, ...], dict[str, Any]]:
        enc = self.inner.create(prob, self.max_len, self.options.inner_options)
        res, log = run_recorded(enc, self.max_len, self.timeout_ms, self.record_queries, "inner")
        self._log += log
        return res.status, res.programs, res.stats

    def _check(self, programs: Sequence[Program]) -> list[bool]:
        """Z3's verdict on each program at the real size (raises Unknown when the solver gives up)."""
        if self._checker is None:
            exact = load_encoding("bool-matrix").create(self.problem, self.max_len)
            self._checker = exact.proof_checker()
            if self.timeout_ms is not None:
                self._checker.solver.set("timeout", int(self.timeout_ms))
        chk = self._checker
        chk.record = self.record_queries
        try:
            fails = chk.failures(list(programs), terminal_goal=self._terminal)
        finally:
            if self.record_queries:
                self._log += [(f"check-{kind}", text) for kind, text in chk.log]
        return [f is None for f in fails]

    def _plan(self) -> tuple[list[tuple[int, ...]], str | None]:
        """The size vectors of the rounds, or (no rounds, the reason for falling back)."""
        h = self.problem.hierarchy
        if h is None:
            return [], "the problem carries no synthesis hierarchy"
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
            self.unknown = status != "complete"
            self.found = list(programs)
            self.stats["rounds"].append(
                {"sizes": None, "status": status, "programs": len(programs),
                 "solve_seconds": round(time.perf_counter() - t0, 6)}
            )
            return
        h = real.hierarchy
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
            if status != "complete":
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
        h = self.problem.hierarchy
        if not self.unknown and (h is None or last.get("sizes") in (None, list(h.sizes))):
            self.stats["completeness"] = "exact"  # the inner encoding solved the real problem itself
            return
        if opt == "never" or (opt == "auto" and k > self.options.certify_max_devices) or self.unknown:
            self.stats["completeness"] = "unknown" if self.unknown else "conjectured"
            return
        t0 = time.perf_counter()
        exact = load_encoding("bool-matrix").create(self.problem, self.max_len)
        res, log = run_recorded(
            Excluding(exact, self.found), self.max_len, self.timeout_ms, self.record_queries, "certificate"
        )
        self._log += log
        self.unknown = res.status != "complete"
        self.found = canonical_order(set(self.found) | set(res.programs))
        self.stats["certificate_additions"] = len(res.programs)
        self.stats["certificate_solver_calls"] = res.stats.get("solver_calls")
        self.stats["certificate_seconds"] = round(time.perf_counter() - t0, 6)
        self.stats["completeness"] = "unknown" if self.unknown else "certified"

    def _run(self, solver: z3.Solver) -> None:
        """The search, the certificate, then the engine's solver restricted to the found programs."""
        start = time.perf_counter()
        self._search()
        self._certify()
        if not self.unknown:  # unknown: any model, so the engine meets an unproved one and says "unknown"
            allowed = [z3.And(self._literals(p)) for p in self.found]
            solver.add(z3.Or(allowed) if allowed else z3.BoolVal(False, self.context))
        self._set = set(self.found)
        self.stats["programs"] = len(self.found)
        self.stats["verified_at_real_size"] = self.stats["real_check"] != "recheck"
        self.stats["search_seconds"] = round(time.perf_counter() - start, 6)

    # ------------------------------------------------------------------ engine interface

    def declare(self, solver: z3.Solver) -> None:
        for t in range(self.max_len):
            solver.add(z3.PbEq([(v, 1) for v in (*self.x[t], self.stop[t])], 1))
            if t + 1 < self.max_len:
                solver.add(z3.Implies(self.stop[t], self.stop[t + 1]))
        self.stats["candidates"] = len(self.problem.candidates)

    def _literals(self, program: Program) -> list[z3.BoolRef]:
        lits = [self.x[t][c] for t, c in enumerate(program)]
        if len(program) < self.max_len:
            lits.append(self.stop[len(program)])
        return lits

    def length_assumptions(self, length: int) -> list[z3.BoolRef]:
        out = [z3.Not(self.stop[length - 1])] if length >= 1 else []
        if length < self.max_len:
            out.append(self.stop[length])
        return out

    def decode(self, model: z3.ModelRef) -> Program:
        program = []
        for t in range(self.max_len):
            if z3.is_true(model.eval(self.stop[t], model_completion=True)):
                break
            program.append(next(c for c, v in enumerate(self.x[t]) if z3.is_true(model.eval(v))))
        return tuple(program)

    def blocking_clause(self, program: Program) -> z3.BoolRef:
        return z3.Not(z3.And(self._literals(program)))

    def refine(self, solver: z3.Solver, program: Program, timeout_ms: int | None = None) -> Refinement:
        self._log = []
        if self.found is None:
            self.timeout_ms = self.options.inner_timeout_ms or timeout_ms
            self._run(solver)
        if program in self._set:
            return ACCEPTED
        return UNKNOWN if self.unknown else NOT_FOUND

    def queries(self) -> Sequence[tuple[str, str]]:
        return list(self._log)

    def statistics(self) -> dict[str, Any]:
        out = dict(self.stats)
        out["refinement_rounds"] = max(0, len(self.stats["rounds"]) - 1)
        if self._checker is not None:
            out["checker_calls"] = self._checker.calls
        return out


ENCODING = EncodingSpec(
    name="representative",
    description="solves with every level of size 2, checks each program at the real size, refines sizes",
    options=RepresentativeOptions,
    factory=lambda problem, max_len, options: RepresentativeEncoding(problem, max_len, options),
)
