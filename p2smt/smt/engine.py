"""Enumerate every valid program up to a length bound with one incremental Z3 solver.

Lengths are taken in increasing order through assumption literals (the unrolled problem is
declared once); each accepted model is reported and then excluded by a clause over the choice
variables only. The result is ``complete`` only when every length ended in ``unsat``. Encodings that
confirm candidates (``batch_refine``) get them in batches: each decoded candidate is excluded at
once by its blocking clause and reported only when the batch's proof accepts it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import z3

from p2smt.errors import InternalError, P2Error
from p2smt.model.problem import SynthesisProblem, canonical_order
from p2smt.smt.base import Encoding, Program
from p2smt.smt.registry import load_encoding

DEFAULT_ENCODING = "bool-matrix"


@dataclass(frozen=True)
class EngineResult:
    """``status``: "complete" (every length exhausted) or "unknown" (a solver call gave up)."""

    status: str
    programs: tuple[Program, ...]
    stats: dict[str, Any] = field(default_factory=dict)


class _Emitter:
    """Writes each solver query as SMT-LIB2 (assertions plus ``check-sat-assuming``)."""

    def __init__(self, folder: Path | None, tag: str):
        self.folder = folder
        self.tag = tag
        self.count = 0
        if folder is not None:
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise P2Error(f"cannot create --emit-smt2 folder {folder}: {err.strerror}") from None

    def write(self, kind: str, solver: z3.Solver, assumptions: Iterable[z3.ExprRef]) -> None:
        if self.folder is None:
            return
        lits = " ".join(a.sexpr() for a in assumptions)
        self.write_text(kind, solver.sexpr() + f"(check-sat-assuming ({lits}))\n")

    def write_text(self, kind: str, text: str) -> None:
        if self.folder is None:
            return
        self.count += 1
        (self.folder / f"{self.tag}-{self.count:05d}-{kind}.smt2").write_text(text)


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


def solver_figures(solver: z3.Solver) -> dict[str, float]:
    """Conflicts, decisions, propagations and memory of a solver, whichever core answered (SMT or SAT)."""
    stats = {key: value for key, value in solver.statistics()}
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
) -> EngineResult:
    """Drive an encoding object: declare once, then enumerate lengths 1..max_len."""
    start = time.perf_counter()
    solver = enc.new_solver()
    if timeout_ms is not None:
        if timeout_ms <= 0:
            raise P2Error(f"--timeout must be positive, got {timeout_ms} ms")
        solver.set("timeout", int(timeout_ms))
    enc.record_queries = emit_smt2 is not None
    if emit_smt2 is not None:
        solver = _Mirrored(solver, enc.context)
    enc.declare(solver)
    if enc.logic is None:
        solver.push()  # keeps Z3's default solver in incremental mode (no re-solving from scratch)
    declared = time.perf_counter() - start
    emitter = _Emitter(emit_smt2, tag)
    programs: list[Program] = []
    seen: set[Program] = set()
    status = "complete"
    calls = 0
    refused: dict[str, int] = {}
    totals: dict[str, float] = {}
    per_length: dict[int, dict[str, Any]] = {}
    batch = 2  # candidates confirmed per refine_many call; doubles while all are accepted

    def emit_queries(length: int) -> None:
        for kind, text in enc.queries():
            emitter.write_text(f"len{length}-{kind}", text)

    def record(program: Program, verdict, length: int) -> None:
        """Report an accepted program (each at most once) or count the kind of refusal."""
        if not verdict.accepted:
            refused[verdict.kind] = refused.get(verdict.kind, 0) + 1
            return
        if program in seen:
            raise InternalError(f"{enc.name}: program {program} was found twice")
        seen.add(program)
        programs.append(program)
        per_length[length]["programs"] += 1

    def confirm(pending: list[Program], length: int) -> bool:
        """Refine the pending candidates; False when a check gave up."""
        nonlocal batch
        if not pending:
            return True
        verdicts = enc.refine_many(solver, pending, timeout_ms)
        emit_queries(length)
        ok = True
        for program, verdict in zip(pending, verdicts):
            if verdict.unknown:
                ok = False
            else:
                record(program, verdict, length)
        batch = min(batch * 2, 256) if all(v.accepted for v in verdicts) else 1
        pending.clear()
        return ok

    for length in range(1, max_len + 1):
        t0 = time.perf_counter()
        per_length[length] = {"seconds": 0.0, "programs": 0}
        pending: list[Program] = []
        while True:
            assumptions = enc.length_assumptions(length)
            emitter.write(f"len{length}-synth", solver, assumptions)
            result = solver.check(*assumptions)
            calls += 1
            if result == z3.unsat:
                break
            if result == z3.unknown:
                status = "unknown"
                break
            program = enc.decode(solver.model())
            if len(program) != length:
                raise InternalError(f"{enc.name}: decoded {program} under the length-{length} assumptions")
            if enc.batch_refine:
                # excluded at once (exactly); reported only once proved, with the others pending
                solver.add(enc.blocking_clause(program))
                pending.append(program)
                if len(pending) >= batch and not confirm(pending, length):
                    status = "unknown"
                    break
                continue
            verdict = enc.refine(solver, program, timeout_ms)
            emit_queries(length)
            if verdict.unknown:
                status = "unknown"
                break
            record(program, verdict, length)
            if verdict.accepted:
                solver.add(enc.blocking_clause(program))
        if not confirm(pending, length):
            status = "unknown"
        per_length[length]["seconds"] = round(time.perf_counter() - t0, 6)
        if status == "unknown":
            break
    totals.update(solver_figures(solver))
    stats: dict[str, Any] = {
        "encoding": enc.name,
        "solver_calls": calls,
        "refinements": refused,
        "per_length": per_length,
        "declare_seconds": round(declared, 6),
        "seconds": round(time.perf_counter() - start, 6),
        **totals,
        **enc.statistics(),
    }
    if emit_smt2 is not None:
        stats["smt2_files"] = emitter.count
    return EngineResult(status, tuple(canonical_order(programs)), stats)


def enumerate_z3(
    problem: SynthesisProblem,
    max_len: int,
    *,
    encoding: str = DEFAULT_ENCODING,
    options: dict[str, Any] | None = None,
    timeout_ms: int | None = None,
    emit_smt2: Path | None = None,
    extra_dirs: Iterable[str | Path] = (),
) -> EngineResult:
    """Every valid program of 1..max_len steps under the named encoding, in canonical order."""
    if max_len < 0:
        raise P2Error(f"max length must be non-negative, got {max_len}")
    spec = load_encoding(encoding, extra_dirs)
    enc = spec.create(problem, max_len, options)
    return run_encoding(enc, max_len, timeout_ms=timeout_ms, emit_smt2=emit_smt2, tag=spec.name)
