"""Synthesis driver: placements → synthesis hierarchies → an engine → programs re-checked by the interpreter."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from p2smt.errors import InternalError, P2Error
from p2smt.model.dsl import Instruction, Program, candidate_instructions, problem
from p2smt.model.hierarchy import HierarchyKind, MasterScope, SynthesisHierarchy, synthesis_hierarchy
from p2smt.model.placement import Matrix, Placement, matrices
from p2smt.model.problem import SynthesisProblem
from p2smt.model.system import System
from p2smt.semantics.dense import execute_all

MAX_LEN_LIMIT = 12


@dataclass(frozen=True)
class EngineOutcome:
    """What an engine returns: status, programs as candidate-index tuples (canonical order), stats."""

    status: str
    programs: tuple[tuple[int, ...], ...]
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EngineOptions:
    """Options every engine accepts; engine-specific ones travel in ``encoding_options``."""

    timeout_ms: int | None = None
    encoding: str | None = None
    encoding_options: dict[str, Any] | None = None
    emit_smt2: str | None = None


def _enumerative(prob: SynthesisProblem, max_len: int, opts: EngineOptions, h=None) -> EngineOutcome:
    from p2smt.synth.enumerative import enumerate_programs

    return EngineOutcome("complete", tuple(enumerate_programs(prob, max_len)))


def _pieces(prob: SynthesisProblem, max_len: int, opts: EngineOptions, h=None) -> EngineOutcome:
    from p2smt.synth.pieces import enumerate_programs

    return EngineOutcome("complete", tuple(enumerate_programs(prob, max_len)))


def _z3(prob: SynthesisProblem, max_len: int, opts: EngineOptions, h: SynthesisHierarchy | None = None) -> EngineOutcome:
    from pathlib import Path

    from p2smt.smt.engine import DEFAULT_ENCODING, enumerate_z3

    res = enumerate_z3(
        prob,
        max_len,
        encoding=opts.encoding or DEFAULT_ENCODING,
        options=opts.encoding_options,
        timeout_ms=opts.timeout_ms,
        emit_smt2=Path(opts.emit_smt2) if opts.emit_smt2 else None,
        hierarchy=h,
    )
    return EngineOutcome(res.status, tuple(res.programs), dict(res.stats))


def _z3_cegis(
    prob: SynthesisProblem, max_len: int, opts: EngineOptions, h: SynthesisHierarchy | None = None
) -> EngineOutcome:
    """``z3`` with the ``values`` encoding (CEGIS over counterexample inputs)."""
    from dataclasses import replace

    return _z3(prob, max_len, replace(opts, encoding="values"), h)


Engine = Callable[[SynthesisProblem, int, EngineOptions, SynthesisHierarchy | None], EngineOutcome]
"""(problem, max_len, options, the synthesis hierarchy the problem was built from or None) -> outcome."""
ENGINES: dict[str, tuple[str, Engine]] = {
    "enumerative": ("P²'s enumerative search pruned by the preconditions", _enumerative),
    "pieces": ("P²'s search on pieces.py's compressed state: exact at any number of devices", _pieces),
    "z3": ("Z3 over an SMT encoding of the Hoare rules (enumerates all models)", _z3),
    "z3-cegis": ("Z3 CEGIS over symbolic data values", _z3_cegis),
}


@dataclass(frozen=True)
class MatrixResult:
    matrix: Matrix
    hierarchy: SynthesisHierarchy
    programs: tuple[Program, ...]
    status: str
    seconds: float
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SynthesisResult:
    system: str
    axes: tuple[int, ...]
    reduction_axes: tuple[int, ...]
    engine: str
    max_len: int
    matrices: tuple[MatrixResult, ...]
    seconds: float

    @property
    def status(self) -> str:
        return "complete" if all(m.status == "complete" for m in self.matrices) else "unknown"

    @property
    def total_programs(self) -> int:
        return sum(len(m.programs) for m in self.matrices)

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "system": self.system,
            "axes": list(self.axes),
            "reduce": list(self.reduction_axes),
            "engine": self.engine,
            "max_len": self.max_len,
            "total_programs": self.total_programs,
            "seconds": round(self.seconds, 6),
            "matrices": [
                {
                    "matrix": [list(r) for r in m.matrix],
                    "synthesis_hierarchy": [[n, s] for n, s in m.hierarchy.levels],
                    "status": m.status,
                    "seconds": round(m.seconds, 6),
                    "programs": [str(p) for p in m.programs],
                    **({"same_problem_as": m.stats["same_problem_as"]} if "same_problem_as" in m.stats else {}),
                }
                for m in self.matrices
            ],
        }


def run_engine(
    engine: str,
    prob: SynthesisProblem,
    max_len: int,
    opts: EngineOptions | None = None,
    hierarchy: SynthesisHierarchy | None = None,
) -> EngineOutcome:
    """Run one engine on one problem (no re-check; see ``synthesize_hierarchy``)."""
    if engine not in ENGINES:
        raise P2Error(f"unknown engine {engine!r}; engines: {', '.join(ENGINES)}")
    if not 1 <= max_len <= MAX_LEN_LIMIT:
        raise P2Error(f"--max-len must be between 1 and {MAX_LEN_LIMIT}, got {max_len}")
    return ENGINES[engine][1](prob, max_len, opts or EngineOptions(), hierarchy)


PIECES_ABOVE = 128  # devices; above this the compressed interpreter re-checks (the k^3 one costs GiBs)


def rechecked_by(engine: str, k: int) -> str | None:
    """The interpreter that re-checks ``engine``'s programs on ``k`` devices ("numpy": the k×k×k one,
    up to ``PIECES_ABOVE``; "pieces" above), or None for an engine that is that interpreter itself."""
    if engine == "enumerative":
        return None
    if k <= PIECES_ABOVE:
        return "numpy"
    return None if engine == "pieces" else "pieces"


def recheck(prob: SynthesisProblem, programs, engine: str) -> None:
    """Every engine's program must be valid in an independent concrete interpreter; else fail loudly.

    Up to ``PIECES_ABOVE`` devices that is the k×k×k interpreter (``semantics.py``); above, the
    compressed one (``pieces.py``), exact at any size. Neither shares code with the encodings.
    """
    cands = prob.candidates
    if prob.num_devices > PIECES_ABOVE:
        from p2smt.semantics.pieces import check_programs

        for prog, verdict in zip(programs, check_programs(prob, programs), strict=True):
            if not verdict.proved:
                why = f"step {verdict.step}: {verdict.rule}" if verdict.step is not None else verdict.rule
                raise InternalError(
                    f"engine {engine!r} returned {prob.label(prog)!r}, which the interpreter rejects: {why}"
                )
        return
    runs = execute_all(
        prob.num_devices,
        [[(cands[i].collective, cands[i].groups) for i in prog] for prog in programs],
        prob.goal_groups,
        prob.require_progress,
    )
    for prog, run in zip(programs, runs, strict=True):
        if not run.valid:
            why = run.violation.message if run.violation else "the goal is not reached"
            raise InternalError(
                f"engine {engine!r} returned {prob.label(prog)!r}, which the interpreter rejects: {why}"
            )


def synthesize_hierarchy(
    h: SynthesisHierarchy,
    *,
    max_len: int = 5,
    engine: str = "enumerative",
    require_progress: bool = True,
    opts: EngineOptions | None = None,
    prune: str = "none",
) -> tuple[tuple[Program, ...], EngineOutcome, float]:
    """Synthesize on one hierarchy; programs are re-checked unless the engine is the interpreter itself."""
    start = time.perf_counter()
    prob = problem(h, require_progress)
    outcome, indices = _solve(prob, max_len, engine, opts, prune, h)
    return _programs(h, indices), outcome, time.perf_counter() - start


def _solve(
    prob: SynthesisProblem, max_len: int, engine: str, opts: EngineOptions | None, prune: str,
    h: SynthesisHierarchy | None = None,
) -> tuple[EngineOutcome, tuple[tuple[int, ...], ...]]:
    """The engine's outcome and its programs (candidate indices) after the re-check and pruning."""
    outcome = run_engine(engine, prob, max_len, opts, h)
    programs = list(outcome.programs)
    if rechecked_by(engine, prob.num_devices):
        recheck(prob, programs, engine)
    if prune != "none":
        from p2smt.synth.pruning import apply_pruning

        programs = apply_pruning(prune, prob, programs)
    return outcome, tuple(programs)


def _programs(h: SynthesisHierarchy, indices) -> tuple[Program, ...]:
    instrs: list[Instruction] = [ins for ins, _ in candidate_instructions(h)]
    return tuple(Program(tuple(instrs[i] for i in p)) for p in indices)


def placements_for(system: System, axes: tuple[int, ...], matrix: Matrix | None) -> list[Placement]:
    if matrix is not None:
        return [Placement(system.sizes, tuple(axes), matrix)]
    return [Placement(system.sizes, tuple(axes), m) for m in matrices(system.sizes, axes)]


def synthesize(
    system: System,
    axes: tuple[int, ...],
    reduction_axes: tuple[int, ...],
    *,
    matrix: Matrix | None = None,
    max_len: int = 5,
    engine: str = "enumerative",
    hierarchy_kind: HierarchyKind = "d",
    master_scope: MasterScope = "per-ancestor",
    require_progress: bool = True,
    prune: str = "none",
    opts: EngineOptions | None = None,
) -> SynthesisResult:
    """All valid programs up to ``max_len`` for every placement (or one ``matrix``) of ``axes``.

    Placements whose synthesis problems are equal (same devices, goal and candidate instructions,
    e.g. matrices that differ only in the non-reduced axes) are solved once; the others report
    ``stats["same_problem_as"]``, the matrix that was solved, and their own (small) seconds.
    """
    start = time.perf_counter()
    results = []
    solved: dict[SynthesisProblem, tuple[Matrix, EngineOutcome, tuple[tuple[int, ...], ...]]] = {}
    for placement in placements_for(system, tuple(axes), matrix):
        t0 = time.perf_counter()
        h = synthesis_hierarchy(placement, tuple(reduction_axes), system.level_names, hierarchy_kind, master_scope)
        prob = problem(h, require_progress)
        if prob in solved:
            first, outcome, indices = solved[prob]
            stats: dict[str, Any] = {"same_problem_as": [list(r) for r in first]}
        else:
            outcome, indices = _solve(prob, max_len, engine, opts, prune, h)
            solved[prob] = (placement.matrix, outcome, indices)
            stats = dict(outcome.stats)
        progs = _programs(h, indices)
        secs = time.perf_counter() - t0
        results.append(MatrixResult(placement.matrix, h, progs, outcome.status, secs, stats))
    return SynthesisResult(
        system.name,
        tuple(axes),
        placements_for(system, tuple(axes), matrix)[0].check_axes(tuple(reduction_axes)),
        engine,
        max_len,
        tuple(results),
        time.perf_counter() - start,
    )
