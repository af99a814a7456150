"""The one solver loop every Z3 strategy runs on: one incremental solver, the problem declared once.

A strategy (``smt.strategy``; by default every valid program, lengths in increasing order through
assumption literals) poses the queries; each accepted model is reported and then excluded by a clause
over the choice variables only. The result is ``complete`` only when every query ended in ``unsat``.
Encodings that confirm candidates (``batch_refine``) get them in batches: each decoded candidate is
excluded at once by its blocking clause and reported only when the batch's proof accepts it; a
strategy with ``implied`` also excludes and confirms the candidates each accepted program implies
(``Encoding.implied``), which then cost no model of their own. Timeouts bound each solver call;
``--emit-smt2`` writes every query as SMT-LIB2. A memory cap (``smt.memory``) bounds Z3's solver: past it
the run ends unknown and says why, and ``enumerate_z3`` refuses up front a size whose estimate exceeds it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import z3

from p2smt.errors import InternalError, P2Error
from p2smt.model.hierarchy import SynthesisHierarchy
from p2smt.model.problem import SynthesisProblem, canonical_order
from p2smt.model.status import SolveStatus
from p2smt.smt.base import Encoding, EncodingSpec, Program
from p2smt.smt.budget import ResourceBudget
from p2smt.smt.memory import MEMORY_MESSAGES, MemoryCap, memory_reason
from p2smt.smt.registry import SHARDED_ENCODINGS, available_encodings, load_encoding
from p2smt.smt.statistics import statistics
from p2smt.smt.strategy import Enumerate, Phase, Strategy

DEFAULT_ENCODING = "bool-matrix"


@dataclass(frozen=True)
class EngineResult:
    """``status``: complete (every query exhausted) or unknown (a solver call gave up)."""

    status: SolveStatus
    programs: tuple[Program, ...]
    stats: dict[str, Any] = field(default_factory=dict)


class Smt2Sink:
    """Writes each solver query as SMT-LIB2 (assertions plus ``check-sat-assuming``) into ``folder``
    (nothing when it is None), numbered in the order asked; ``scoped`` views share the numbering and
    prefix their kinds (a wrapper strategy's inner runs, checks and certificate)."""

    flag = "--emit-smt2"

    def __init__(self, folder: Path | None, tag: str, prefix: str = "", counter: list[int] | None = None):
        self.folder = folder
        self.tag = tag
        self.prefix = prefix
        self._counter = counter if counter is not None else [0]
        if folder is not None and counter is None:
            if folder.exists() and not folder.is_dir():
                raise P2Error(f"{self.flag} {folder} exists and is not a folder")
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise P2Error(f"cannot create {self.flag} folder {folder}: {err.strerror}") from None

    @property
    def active(self) -> bool:
        return self.folder is not None

    @property
    def count(self) -> int:
        return self._counter[0]

    def scoped(self, prefix: str) -> Smt2Sink:
        return Smt2Sink(self.folder, self.tag, f"{self.prefix}{prefix}-", self._counter)

    def write(self, kind: str, solver: z3.Solver, assumptions: Iterable[z3.ExprRef]) -> None:
        if self.folder is None:
            return
        lits = " ".join(a.sexpr() for a in assumptions)
        self.write_text(kind, solver.sexpr() + f"(check-sat-assuming ({lits}))\n")

    def write_text(self, kind: str, text: str) -> None:
        if self.folder is None:
            return
        self._counter[0] += 1
        (self.folder / f"{self.tag}-{self.count:05d}-{self.prefix}{kind}.smt2").write_text(text)


class _Mirrored:
    """A solver that also keeps every assertion in a plain solver, whose text is the query as asserted
    (a QF_FD solver prints nothing before its first check, and its internal clauses after)."""

    def __init__(self, solver: z3.Solver, ctx: z3.Context):
        self._solver = solver
        self.mirror = z3.Solver(ctx=ctx)

    def add(self, *formulas) -> None:
        self._solver.add(*formulas)
        self.mirror.add(*formulas)

    def sexpr(self) -> str:
        return self.mirror.sexpr()

    def __getattr__(self, name: str):
        return getattr(self._solver, name)


SOLVER_FIGURES = ("conflicts", "decisions", "propagations", "memory", "max memory")


def _figure_key(key: str) -> bool:
    """A statistic ``solver_figures`` sums or copies (the SAT core's propagations come in kinds)."""
    return key.removeprefix("sat ") in SOLVER_FIGURES or key.startswith("sat propagations")


def solver_figures(solver: z3.Solver) -> dict[str, float]:
    """Conflicts, decisions, propagations and memory of a solver, whichever core answered (SMT or SAT)."""
    stats = statistics(solver, _figure_key)
    out: dict[str, float] = {}
    for name in ("conflicts", "decisions"):
        found = [v for k, v in stats.items() if k in (name, f"sat {name}")]
        if found:
            out[name] = sum(found)
    props = [v for k, v in stats.items() if k == "propagations" or k.startswith("sat propagations")]
    if props:
        out["propagations"] = sum(props)
    for key in ("memory", "max memory"):
        if key in stats:
            out[key] = stats[key]
    return out


def run_encoding(
    enc: Encoding,
    max_len: int,
    *,
    timeout_ms: int | None = None,
    emit_smt2: Path | None = None,
    tag: str = "query",
    strategy: Strategy | None = None,
    sink: Smt2Sink | None = None,
    budget: ResourceBudget | None = None,
    memory: MemoryCap | None = None,
) -> EngineResult:
    """The one solver loop: declare once, then for each of the strategy's phases check, decode, admit,
    confirm (alone or in batches), record and block until unsat; ``unknown`` ends the run.

    Queries go to ``sink`` when given, else to a new one writing into ``emit_smt2`` as ``tag``; ``budget``
    bounds the Z3 work of every check (once spent, the run ends ``unknown``), ``memory`` the loop solver's
    memory (past it the run ends ``unknown``, ``stats["reason_unknown"]`` saying so)."""
    start = time.perf_counter()
    strategy = strategy or Enumerate()
    solver = enc.new_solver()
    for key, value in strategy.solver_params(enc).items():
        solver.set(key, value)
    if timeout_ms is not None:
        if timeout_ms <= 0:
            raise P2Error(f"--timeout must be positive, got {timeout_ms} ms")
        solver.set("timeout", int(timeout_ms))
    if memory is not None:
        memory.arm(solver)
    emitter = sink or Smt2Sink(emit_smt2, tag)
    enc.record_queries = emitter.active
    if emitter.active:
        solver = _Mirrored(solver, enc.context)
    enc.declare(solver)
    if enc.logic is None:
        solver.push()  # keeps Z3's default solver in incremental mode (no re-solving from scratch)
    strategy.begin(enc, solver)
    declared = time.perf_counter() - start
    programs: list[Program] = []
    seen: set[Program] = set()
    status = SolveStatus.COMPLETE
    why_unknown: str | None = None
    calls = 0
    solving = 0.0  # in the loop's own checks (a confirming checker keeps its own figure)
    refused: dict[str, int] = {}
    per_length: dict[Any, dict[str, Any]] = {}
    batching = enc.batch_refine and strategy.batch
    batch = 2  # candidates confirmed per refine_many call; doubles while all are accepted
    proposed: set[Program] = set()  # every candidate excluded so far (decoded or implied)
    implied: list[Program] = []  # implied by accepted programs, excluded, not yet confirmed
    implied_total = 0

    def emit_queries(phase: Phase) -> None:
        for kind, text in enc.queries():
            emitter.write_text(f"{phase.name}-{kind}", text)

    def record(program: Program, verdict, phase: Phase) -> None:
        """Report an accepted program (each at most once) or count the kind of refusal; queue the
        candidates it implies."""
        nonlocal implied_total
        if not verdict.accepted:
            refused[verdict.kind] = refused.get(verdict.kind, 0) + 1
            return
        if program in seen:
            raise InternalError(f"{enc.name}: program {program} was found twice")
        seen.add(program)
        programs.append(program)
        key = len(program) if phase.length else phase.name  # a per-length phase counts programs by length
        per_length.setdefault(key, {"programs": 0})["programs"] += 1
        if not batching:
            solver.add(enc.blocking_clause(program))
        strategy.accepted(solver, program)
        if batching and strategy.implied:
            for other in enc.implied(program):
                if other not in proposed:
                    proposed.add(other)
                    solver.add(enc.blocking_clause(other))
                    implied.append(other)
                    implied_total += 1

    def confirm(pending: list[Program], phase: Phase) -> bool:
        """Refine the pending candidates, then those the accepted ones imply; False when a check gave up."""
        while pending:
            if not confirm_batch(pending, phase):
                return False
            pending.extend(implied[:256])
            del implied[:256]
        return True

    def confirm_batch(pending: list[Program], phase: Phase) -> bool:
        """Refine the pending candidates; False when a check gave up."""
        nonlocal batch
        if not pending:
            return True
        verdicts = enc.refine_many(solver, pending, timeout_ms)
        emit_queries(phase)
        ok = True
        for program, verdict in zip(pending, verdicts):
            if verdict.unknown:
                ok = False
            else:
                record(program, verdict, phase)
        batch = min(batch * 2, 256) if all(v.accepted for v in verdicts) else 1
        pending.clear()
        return ok

    for phase in strategy.phases(enc, max_len):
        t0, calls0 = time.perf_counter(), calls
        conflicts0 = solver_figures(solver).get("conflicts", 0)
        per_length.setdefault(phase.length or phase.name, {"programs": 0})["seconds"] = 0.0
        pending: list[Program] = []
        while True:
            assumptions = phase.assumptions()
            emitter.write(f"{phase.name}-synth", solver, assumptions)
            if budget is not None and not budget.arm(solver):
                status = SolveStatus.UNKNOWN
                break
            checking = time.perf_counter()
            result, why_unknown = _check(solver, assumptions, memory)
            solving += time.perf_counter() - checking
            if budget is not None:
                budget.note(solver)
            calls += 1
            if result == z3.unsat:
                break
            if result == z3.unknown:
                status = SolveStatus.UNKNOWN
                break
            model = solver.model()
            program = enc.decode(model)
            if phase.length is not None and len(program) != phase.length:
                raise InternalError(f"{enc.name}: decoded {program} under the length-{phase.length} assumptions")
            if not strategy.admit(solver, model, program):
                continue
            if batching:
                # excluded at once (exactly); reported only once proved, with the others pending
                solver.add(enc.blocking_clause(program))
                proposed.add(program)
                pending.append(program)
                if len(pending) >= batch and not confirm(pending, phase):
                    status = SolveStatus.UNKNOWN
                    break
                continue
            verdict = enc.refine(solver, program, timeout_ms)
            emit_queries(phase)
            if verdict.unknown:
                status = SolveStatus.UNKNOWN
                break
            record(program, verdict, phase)
        if not confirm(pending, phase):
            status = SolveStatus.UNKNOWN
        per_length[phase.length or phase.name] |= {
            "seconds": round(time.perf_counter() - t0, 6),
            "queries": calls - calls0,
            "conflicts": solver_figures(solver).get("conflicts", 0) - conflicts0,
        }
        if status is SolveStatus.UNKNOWN:
            break
    stats: dict[str, Any] = {
        "encoding": enc.name,
        "solver_calls": calls,
        "refinements": refused,
        "implied": implied_total,
        "per_length": dict(sorted(per_length.items(), key=lambda kv: str(kv[0]).zfill(9))),
        "declare_seconds": round(declared, 6),
        "solver_seconds": round(solving, 6),
        "seconds": round(time.perf_counter() - start, 6),
        **solver_figures(solver),
        **enc.statistics(),
        **strategy.statistics(),
    }
    if status is SolveStatus.UNKNOWN and why_unknown:
        stats["reason_unknown"] = why_unknown
    if emitter.active:
        stats["smt2_files"] = emitter.count
    return EngineResult(status, tuple(canonical_order(programs)), stats)


def _check(solver: z3.Solver, assumptions: list[z3.ExprRef], memory: MemoryCap | None
           ) -> tuple[z3.CheckSatResult, str | None]:
    """One check and, when it gave no answer, Z3's reason in words. A solver past its memory cap answers
    unknown, or (in its preprocessing) raises Z3's memory message, which is an unknown here too; a process
    out of memory (a ulimit) raises "out of memory", likewise."""
    try:
        result = solver.check(*assumptions)
    except z3.Z3Exception as err:
        words = memory_reason(err.value)
        if words is None:
            raise
        return z3.unknown, _memory_words(words, memory)
    if result != z3.unknown:
        return result, None
    reason = solver.reason_unknown()
    words = memory_reason(reason)
    if words is not None:
        return result, _memory_words(words, memory)
    return result, f"Z3 gave no answer ({reason})" if reason else None


def _memory_words(words: str, memory: MemoryCap | None) -> str:
    """The cap's reason when Z3 says it passed ``max_memory``, else the process's limit (an allocation failed)."""
    if memory is not None and words == MEMORY_MESSAGES[0]:
        return memory.reason(words)
    return f"Z3 ran out of memory ({words}: the process's limit, e.g. ulimit -v, came first)"


def enumerate_z3(
    problem: SynthesisProblem,
    max_len: int,
    *,
    encoding: str = DEFAULT_ENCODING,
    options: dict[str, Any] | None = None,
    timeout_ms: int | None = None,
    emit_smt2: Path | None = None,
    extra_dirs: Iterable[str | Path] = (),
    hierarchy: SynthesisHierarchy | None = None,
    memory: MemoryCap | None = None,
) -> EngineResult:
    """Every valid program of 1..max_len steps under the named encoding, in canonical order.

    A wrapper strategy registered under an encoding name (``representative``) gets ``hierarchy``, the
    synthesis hierarchy the problem was built from (None: it solves the problem as it is). ``memory`` (default:
    ``MemoryCap.default()``, a share of the machine's RAM): a problem the encoding's estimate puts past it is
    refused (P2Error) before any term is built, and Z3's solver stops at it (the result is unknown)."""
    if max_len < 0:
        raise P2Error(f"max length must be non-negative, got {max_len}")
    spec = load_encoding(encoding, extra_dirs)
    if spec.name not in SHARDED_ENCODINGS:
        problem.refuse_sharded(f"the {spec.name} encoding")
    if spec.wrapper is not None:
        if timeout_ms is not None and timeout_ms <= 0:
            raise P2Error(f"--timeout must be positive, got {timeout_ms} ms")
        sink = Smt2Sink(emit_smt2, spec.name)
        return spec.wrapper(problem, hierarchy, max_len, spec.parse_options(options), timeout_ms, sink, extra_dirs)
    memory = memory or MemoryCap.default()
    refuse_past(memory, spec, problem, max_len, options, extra_dirs)
    enc = spec.create(problem, max_len, options)
    return run_encoding(enc, max_len, timeout_ms=timeout_ms, emit_smt2=emit_smt2, tag=spec.name, memory=memory)


def refuse_past(memory: MemoryCap, spec: EncodingSpec, problem: SynthesisProblem, max_len: int,
                options: dict[str, Any] | None, extra_dirs: Iterable[str | Path] = ()) -> None:
    """Refuses (P2Error) a run of ``spec`` whose estimate exceeds ``memory``, naming what fits instead: the
    default certified engine (an explicit search, its proof bounded by --proof-budget) and every other
    encoding that declares an estimate (default options) and fits it."""
    estimate = spec.estimate(problem, max_len, options)
    if estimate is None or estimate <= memory.bytes:
        return
    fits = [other.name for other in available_encodings(extra_dirs)
            if other.name != spec.name and (problem.sharding is None or other.name in SHARDED_ENCODINGS)
            and (estimate_of := other.estimate(problem, max_len)) is not None and estimate_of <= memory.bytes]
    instead = ["the default certified engine (no --engine)", *[f"--encoding {name}" for name in fits]]
    memory.check(spec.name, estimate, problem.num_devices, max_len, instead)
