"""Certified synthesis: Z3 proves a proposer's program set valid and complete (the ``certified`` engine).

A proposer (an explicit search) supplies candidate programs. Z3 then proves (a) every candidate valid
at the real size, in batches, with the encoding's exact checker, and (b) completeness: the
counterexample-guided encoding of every length 1..``max_len`` at once (STOP padding) with every
candidate blocked (by a trie over the step choices: one literal per distinct prefix, not one clause per
program) has no model the checker accepts, i.e. ends ``unsat``. Both sides are independent formalizations of the Hoare rules of the P²
paper (§4), so a refuted candidate or a valid program the proposer missed is reported, never merged.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import z3

from p2smt.errors import InternalError, P2Error
from p2smt.interrupts import interrupted_reason, stop_if_received
from p2smt.model.problem import SynthesisProblem, canonical_order
from p2smt.model.status import SolveStatus
from p2smt.smt.base import Encoding, Program
from p2smt.smt.budget import ResourceBudget
from p2smt.smt.check import Unknown
from p2smt.smt.engine import DEFAULT_ENCODING, EngineResult, Smt2Sink, run_encoding, solver_figures
from p2smt.smt.parallel import run_units
from p2smt.smt.registry import load_encoding
from p2smt.smt.strategy import Enumerate, Phase

VALIDITY_BATCH = 512  # candidates proved per checker query (a failing batch is split by the checker)
PARALLEL_FROM = 256
"""Proposed programs from which ``jobs`` > 1 splits the proof over threads. Each thread builds and
preprocesses its own encoding: ≈ 0.3 s on a placement of P²'s grid (at most 235 programs, its whole
completeness proof ≈ 0.6 s; over the grid two threads took twice the CPU of one), ≈ 1 s on BlueConnect's
hierarchy at length 5 (1,635 programs; its units run one after another cost the CPU of the one proof)."""


@dataclass(frozen=True)
class Refuted:
    """A proposed program Z3 proves invalid: the first failing ``step`` (None: the goal) and ``rule``."""

    program: Program
    step: int | None
    rule: str


@dataclass(frozen=True)
class Certificate:
    """Z3's verdict on a proposed set: ``status`` complete when every query was answered.

    ``certified`` only when the set is proved valid and complete; ``refuted`` and ``missed`` name the
    disagreements (each is an error of one of the two formalizations); ``reason`` says why a
    certificate is missing."""

    status: SolveStatus
    refuted: tuple[Refuted, ...]
    missed: tuple[Program, ...]
    stats: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None
    spent: bool = False  # unfinished because the resource budget ran out (deterministic, unlike a timeout)

    @property
    def certified(self) -> bool:
        return self.status is SolveStatus.COMPLETE and not self.refuted and not self.missed


class Trie:
    """The proposed programs as a prefix trie of Boolean literals: ``node[p]`` is forced true when the
    model's first steps are ``p``; a program ending at ``p`` forbids STOP right after it.

    The clauses are written as SMT-LIB2 and parsed by Z3 at once (a fraction of the cost of building
    them one z3py call at a time)."""

    def __init__(self, programs: Sequence[Program]):
        self.programs = list(programs)
        self.size = 0  # clauses of the last ``clauses`` call

    def clauses(self, choices, ctx: z3.Context) -> list[z3.BoolRef | z3.AstVector]:
        """The trie's clauses: the parsed SMT-LIB2 (one vector) after any selector definitions."""
        named, decls, text = self._text(choices, ctx)
        return [*named, z3.parse_smt2_string(text, decls=decls, ctx=ctx)]

    def assert_into(self, solver: z3.Solver, choices, ctx: z3.Context) -> None:
        """Assert the clauses into ``solver``: the SMT-LIB2 parsed by the solver itself (a third of the cost
        of asserting the parsed vector from Python, element by element). Every selector is a Boolean
        constant, and a constant declared again by name and sort in the text is the same term."""
        named, decls, text = self._text(choices, ctx)
        solver.add(*named)
        solver.from_string("".join(f"(declare-const |{name}| Bool)\n" for name in decls) + text)

    def _text(self, choices, ctx: z3.Context) -> tuple[list[z3.BoolRef], dict[str, z3.ExprRef], str]:
        """(selector definitions, the constants the text names, the SMT-LIB2 of the clauses)."""
        decls: dict[str, z3.ExprRef] = {}
        named: list[z3.BoolRef] = []  # a selector that is no variable (index choices) gets one
        names: dict[tuple[int, int], str] = {}
        node: dict[Program, str] = {}
        lines: list[str] = []

        def literal(t: int, j: int) -> str:
            if (t, j) not in names:
                lit = choices.select(t, j)
                name = lit.decl().name() if z3.is_const(lit) else f"cert_select_{t}_{j}"
                decls[name] = lit if z3.is_const(lit) else z3.Bool(name, ctx)
                if decls[name] is not lit:
                    named.append(decls[name] == lit)
                names[t, j] = f"|{name}|"
            return names[t, j]

        for prog in self.programs:
            for t in range(1, len(prog) + 1):
                p = prog[:t]
                if p in node:
                    continue
                node[p] = lit = f"cert_{'_'.join(map(str, p))}"
                lines.append(f"(declare-const {lit} Bool)")
                step = literal(t - 1, p[-1])
                guard = step if t == 1 else f"(and {node[p[:-1]]} {step})"
                lines.append(f"(assert (=> {guard} {lit}))")
            end = node[prog] if prog else "true"
            if len(prog) < choices.steps:
                lines.append(f"(assert (not (and {end} {literal(len(prog), choices.n)})))")
            else:
                lines.append(f"(assert (not {end}))")
        self.size = len(named) + sum(line.startswith("(assert") for line in lines)
        return named, decls, "\n".join(lines)


class Complete(Enumerate):
    """Enumerate with the proposed programs blocked up front: every accepted program is one the
    proposer missed (collected, not merged); the queries, conflicts and seconds are kept."""

    implied = False  # the programs a missed one implies may be proposed ones (blocked, not missed)

    def __init__(self, proposed: Sequence[Program], cubes: bool = True, firsts: Sequence[int] | None = None):
        """``firsts``: the first instructions whose cubes are asked (None: every one); only the proposed
        programs starting with one of them are blocked (a cube fixes the first step: the others cannot
        be its models)."""
        if firsts is not None and not cubes:
            raise InternalError("a subset of the completeness cubes without cubes")
        chosen = None if firsts is None else set(firsts)
        self.trie = Trie([p for p in proposed if chosen is None or (p and p[0] in chosen)])
        self.cubes = cubes
        self.firsts = list(firsts) if firsts is not None else None
        self.missed: list[Program] = []
        self.blocks = 0

    def begin(self, enc: Encoding, solver: z3.Solver) -> None:
        if hasattr(solver, "mirror"):  # a written certificate: the mirror must see every clause
            solver.add(*self.trie.clauses(enc.choices, enc.context))
        else:
            self.trie.assert_into(solver, enc.choices, enc.context)
        self.blocks = self.trie.size

    def phases(self, enc: Encoding, max_len: int) -> Iterator[Phase]:
        """Every length 1..max_len at once (STOP padding): one query, or with ``cubes`` one query per first
        instruction (every non-empty program starts with one candidate, so the cubes cover the query).
        Measured: a query per length -> one for all lengths, 25% less solving on P²'s 64-device problems;
        one query -> a cube per first step, 14% less over P²'s grid and 40% / 18% less on BlueConnect's
        hierarchy at lengths 5 / 6 (cubes over the first two steps: no further gain). A written
        certificate has a file per cube: the proof is the same with or without one, so a set certified
        without ``--certificate`` is certified with it."""
        if max_len < 1:
            return
        if not self.cubes:
            yield Phase(f"len1-{max_len}", None, lambda: [z3.Not(enc.choices.stop(0))])
            return
        for c in self.firsts if self.firsts is not None else range(len(enc.problem.candidates)):
            yield Phase(f"len1-{max_len}-first{c + 1}", None, lambda c=c: enc.choices.prefix_literals((c,)))

    def accepted(self, solver: z3.Solver, program: Program) -> None:
        self.missed.append(program)

    def statistics(self) -> dict[str, Any]:
        return {"trie_clauses": self.blocks}


class CertificateSink(Smt2Sink):
    """Writes the queries a finished proof rests on as standard SMT-LIB2 (``set-logic ALL``, cardinality
    constraints as clauses, assumptions asserted, ``check-sat``) with Z3's answer as its expected
    ``:status``, for a second solver to re-check. Queries are queued and written by ``publish`` once the
    proof is complete, so a failure leaves no partial certificate. ``units`` bounds Z3's work on each
    standard form (None: unlimited)."""

    flag = "--certificate"

    def __init__(self, folder: Path | None, tag: str, prefix: str = "", counter: list[int] | None = None,
                 units: int | None = None, queued: list | None = None):
        super().__init__(folder, tag, prefix, counter)
        self.units = units
        self._queued: list[tuple[bool, str, list[z3.BoolRef]]] = [] if queued is None else queued

    def scoped(self, prefix: str) -> CertificateSink:
        return CertificateSink(self.folder, self.tag, f"{self.prefix}{prefix}-", self._counter, self.units,
                               self._queued)

    def write(self, kind: str, solver: z3.Solver, assumptions: Iterable[z3.ExprRef]) -> None:
        if self.folder is not None:
            source = getattr(solver, "mirror", solver)
            self._queued.append((True, f"{self.prefix}{kind}", [*source.assertions(), *assumptions]))

    def write_text(self, kind: str, text: str) -> None:
        if self.folder is not None:
            ctx = z3.Context()
            self._queued.append((False, f"{self.prefix}{kind}", list(z3.parse_smt2_string(text, ctx=ctx))))

    def publish(self) -> None:
        """Write the queued queries the proof rests on: every checker query and the last query of each run of
        the solver loop's phase (its ``unsat``). The earlier ones of a phase gave a model the loop refined:
        they prove nothing, and their standard forms, solved from scratch, cost more than the whole
        proof (BlueConnect's hierarchy: 93 M units for one, past the default budget of 100 M)."""
        queued = self._queued
        kept = [(kind, formulas) for i, (loop, kind, formulas) in enumerate(queued)
                if not (loop and i + 1 < len(queued) and queued[i + 1][:2] == (True, kind))]
        texts = [(f"{self.tag}-{n:05d}-{kind}.smt2", self._standard(kind, formulas))
                 for n, (kind, formulas) in enumerate(kept, self.count + 1)]
        written: list[Path] = []
        try:
            for name, text in texts:
                written.append(self.folder / name)
                written[-1].write_text(text)
        except OSError as err:
            for path in written:
                path.unlink(missing_ok=True)
            raise P2Error(f"--certificate: cannot write {written[-1]}: {err.strerror}") from None
        self._counter[0] += len(texts)
        queued.clear()

    def _standard(self, kind: str, formulas: list[z3.BoolRef]) -> str:
        ctx = formulas[0].ctx
        goal = z3.Goal(ctx=ctx)
        goal.add(*formulas)
        plain = z3.Solver(ctx=ctx)
        for sub in z3.Tactic("card2bv", ctx)(goal):
            plain.add(sub.as_expr())
        body = plain.sexpr()  # before the check, which adds Z3's own model-conversion commands
        plain.set("rlimit", self.units or 0)
        answer = plain.check()
        if answer == z3.unknown:
            within = (f" within its budget of {self.units:,} Z3 resource units (--proof-budget raises it; 0: no limit)"
                      if self.units else "")
            raise P2Error(f"--certificate: Z3 gives no answer on the standard form of a {kind} query{within}")
        if "(_ at-most" in body or "(_ pbeq" in body or "(_ pble" in body or "(_ pbge" in body:
            raise InternalError(f"--certificate: a {kind} query keeps a Z3-only cardinality constraint")
        return (f"(set-info :smt-lib-version 2.6)\n(set-logic ALL)\n(set-info :status {answer})\n"
                f"{body}(check-sat)\n(exit)\n")


def prove_valid(enc, programs: Sequence[Program], timeout_ms: int | None, sink: Smt2Sink,
                budget: ResourceBudget | None = None) -> tuple[list[Refuted], dict[str, Any], bool]:
    """The encoding's exact checker on every candidate (batches), its checks within ``budget`` (which it
    keeps for the completeness run's refinements); (refuted, stats, answered)."""
    start = time.perf_counter()
    chk = enc.checker()
    chk.record = sink.active
    chk.budget = budget
    if timeout_ms is not None:
        chk.solver.set("timeout", int(timeout_ms))
    refuted: list[Refuted] = []
    answered = True
    for i in range(0, len(programs), VALIDITY_BATCH):
        batch = list(programs[i: i + VALIDITY_BATCH])
        try:
            fails = chk.failures(batch, terminal_goal=enc.terminal)
        except Unknown:
            answered = False
            break
        for kind, text in chk.log:
            sink.write_text(f"validity-{kind}", text)
        refuted += [Refuted(p, f.step, f.rule) for p, f in zip(batch, fails) if f is not None]
    stats = {"programs": len(programs), "queries": chk.calls, "seconds": round(time.perf_counter() - start, 6),
             "solver_seconds": round(chk.solver_seconds, 6),
             **{k: v for k, v in solver_figures(chk.solver).items() if k == "conflicts"}}
    return refuted, stats, answered


def certify(
    problem: SynthesisProblem,
    max_len: int,
    proposed: Sequence[Program],
    *,
    timeout_ms: int | None = None,
    certificate: Path | None = None,
    encoding: str = DEFAULT_ENCODING,
    jobs: int = 1,
    budget: int | None = None,
) -> Certificate:
    """Z3's proof that ``proposed`` is exactly the set of valid programs of 1..max_len steps, within
    ``budget`` Z3 resource units (None: unlimited); with ``jobs`` > 1, no written certificate and at least
    ``PARALLEL_FROM`` programs, on that many threads (``certify_parallel``)."""
    if jobs > 1 and certificate is None and len(proposed) >= PARALLEL_FROM:
        return certify_parallel(problem, max_len, proposed, timeout_ms=timeout_ms, encoding=encoding, jobs=jobs,
                                budget=budget)
    start = time.perf_counter()
    spec = load_encoding(encoding)
    digest = hashlib.sha256(repr((problem, max_len)).encode()).hexdigest()[:10]
    sink = CertificateSink(certificate, f"certificate-{digest}", units=budget)
    enc = spec.create(problem, max_len, None)
    spend = ResourceBudget(budget)
    refuted, validity, answered = prove_valid(enc, proposed, timeout_ms, sink, spend)
    stats: dict[str, Any] = {"validity": validity}
    if not answered:
        stats |= {"resource_units": spend.used, "seconds": round(time.perf_counter() - start, 6)}
        return Certificate(SolveStatus.UNKNOWN, tuple(refuted), (), stats, unfinished("validity", spend),
                           spend.exhausted)
    strategy = Complete(proposed)
    res = run_encoding(enc, max_len, timeout_ms=timeout_ms, strategy=strategy, sink=sink.scoped("completeness"),
                       budget=spend)
    stats["completeness"] = completeness_stats(res, strategy, max_len, validity["solver_seconds"])
    stats |= {"resource_units": spend.used, "seconds": round(time.perf_counter() - start, 6)}
    reason = None if res.status is SolveStatus.COMPLETE else unfinished("completeness", spend)
    if reason is None and not refuted and not strategy.missed:
        sink.publish()  # written only now: an unfinished or failed proof leaves no partial certificate
    return Certificate(res.status, tuple(refuted), tuple(strategy.missed), stats, reason,
                       res.status is not SolveStatus.COMPLETE and spend.exhausted)


def unfinished(proof: str, spend: ResourceBudget) -> str:
    """Why a proof gave no answer: its resource budget spent, or a query's timeout; a check cancelled by a
    stop signal (Ctrl-C, SIGTERM) is neither: ``Interrupted`` is raised instead."""
    stop_if_received()
    if spend.reason is not None and interrupted_reason(spend.reason):
        raise KeyboardInterrupt(f"a {proof} query was interrupted ({spend.reason})")
    if spend.exhausted:
        return (f"the {proof} proof spent its budget of {spend.units:,} Z3 resource units before it finished "
                "(--proof-budget raises it; 0: no limit)")
    return f"a {proof} query timed out"


def completeness_stats(res: EngineResult, strategy: Complete, max_len: int, validity_solving: float = 0.0
                       ) -> dict[str, Any]:
    """One completeness run's figures: its seconds (and those in Z3's checks: the loop's and its checker's,
    less ``validity_solving`` when the validity proof used the same checker), queries, conflicts, trie size
    and spurious models."""
    phases = res.stats["per_length"].values()
    solving = res.stats["solver_seconds"] + res.stats.get("checker_solver_seconds", 0.0) - validity_solving
    return {
        "seconds": res.stats["seconds"],
        "solver_seconds": round(solving, 6),
        "lengths": f"1-{max_len}",
        "queries": sum(p["queries"] for p in phases),
        "conflicts": sum(p["conflicts"] for p in phases),
        "trie_clauses": strategy.blocks,
        "spurious": res.stats.get("refinements", {}),
    }


def certify_parallel(problem: SynthesisProblem, max_len: int, proposed: Sequence[Program], *,
                     timeout_ms: int | None, encoding: str, jobs: int, budget: int | None = None) -> Certificate:
    """``certify`` with the completeness cubes dealt round-robin (first instruction i to share i mod
    jobs) to ``jobs`` threads and the validity proof alongside on one more (it is an eighth to a quarter
    of the work on BlueConnect's hierarchy and P²'s grid: on a pool of ``jobs`` it would delay a share).
    Each unit builds its own encoding in its own Z3 context, with its own ``budget`` of resource units. The
    disagreements come in canonical order, the figures summed (each share's under ``workers``); the
    completeness seconds are wall time."""
    start = time.perf_counter()
    spec = load_encoding(encoding)
    shares = [share for w in range(jobs) if (share := list(range(w, len(problem.candidates), jobs)))]

    spends = [ResourceBudget(budget) for _ in range(len(shares) + 1)]

    def validity() -> tuple[list[Refuted], dict[str, Any], bool]:
        return prove_valid(spec.create(problem, max_len, None), proposed, timeout_ms, CertificateSink(None, ""),
                           spends[0])

    def completeness(w: int, share: list[int]) -> Callable[[], tuple[EngineResult, Complete]]:
        def unit() -> tuple[EngineResult, Complete]:
            strategy = Complete(proposed, firsts=share)
            return run_encoding(spec.create(problem, max_len, None), max_len, timeout_ms=timeout_ms,
                                strategy=strategy, budget=spends[w + 1]), strategy
        return unit

    proof, *done = run_units([validity, *(completeness(w, share) for w, share in enumerate(shares))],
                             len(shares) + 1)
    (refuted, valid_stats, answered), runs = proof.result, [d.result for d in done]
    figures = [completeness_stats(res, strategy, max_len) for res, strategy in runs]
    summed = ("queries", "conflicts", "trie_clauses")
    stats: dict[str, Any] = {"validity": valid_stats | {"cpu_seconds": proof.cpu_seconds}, "completeness": {
        "seconds": round(time.perf_counter() - start, 6),
        "solver_seconds": round(sum(f["solver_seconds"] for f in figures), 6),
        "lengths": f"1-{max_len}",
        **{key: sum(f[key] for f in figures) for key in summed},
        "spurious": dict(sorted(sum((Counter(f["spurious"]) for f in figures), Counter()).items())),
        "jobs": jobs,
        "workers": {str(w + 1): {"cubes": len(share), "seconds": f["seconds"], "cpu_seconds": d.cpu_seconds,
                                 **{key: f[key] for key in summed}}
                    for w, (share, f, d) in enumerate(zip(shares, figures, done))},
    }}
    stats |= {"resource_units": sum(s.used for s in spends), "seconds": round(time.perf_counter() - start, 6)}
    missed = tuple(canonical_order([p for _, strategy in runs for p in strategy.missed]))
    refuted.sort(key=lambda r: (len(r.program), r.program))
    status, reason, spent = SolveStatus.COMPLETE, None, False
    if not answered:
        status, reason, spent = SolveStatus.UNKNOWN, unfinished("validity", spends[0]), spends[0].exhausted
    elif unfinished_runs := [w for w, (res, _) in enumerate(runs) if res.status is not SolveStatus.COMPLETE]:
        first = spends[unfinished_runs[0] + 1]
        status, reason, spent = SolveStatus.UNKNOWN, unfinished("completeness", first), first.exhausted
    return Certificate(status, tuple(refuted), missed, stats, reason, spent)
