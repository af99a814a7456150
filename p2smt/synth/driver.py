"""Synthesis driver: placements → synthesis hierarchies → an engine → programs re-checked by the interpreter."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from p2smt.errors import InternalError, P2Error
from p2smt.model.dsl import Instruction, Program, candidate_instructions, problem
from p2smt.model.goal import ALLREDUCE, Goal, Sharding
from p2smt.model.hierarchy import SynthesisHierarchy, synthesis_hierarchy
from p2smt.model.placement import Matrix, Placement, matrices
from p2smt.model.problem import SynthesisProblem
from p2smt.model.request import Request
from p2smt.model.status import SolveStatus
from p2smt.model.system import System
from p2smt.semantics.dense import execute_all
from p2smt.synth.config import Engine, EngineConfig, Proof
from p2smt.synth.partial import FirstStepPrograms
from p2smt.synth.pieces import SEARCH_LIMIT
from p2smt.synth.positions_check import permuted, positions_stats, positions_words
from p2smt.synth.proofstore import ProofStore, Spent
from p2smt.synth.recheck import INTERPRETERS, PIECES_ABOVE, RECHECK_LIMIT, checker, dropped_stats, recheck
from p2smt.synth.search import FirstStepReport
from p2smt.timings import split_timings

EngineOptions = EngineConfig  # the solver options engines read travel in the one engine configuration


@dataclass(frozen=True)
class EngineOutcome:
    """What an engine returns: status, programs as candidate-index tuples (canonical order), stats."""

    status: str
    programs: tuple[tuple[int, ...], ...]
    stats: dict[str, Any] = field(default_factory=dict)


def _enumerative(prob: SynthesisProblem, max_len: int, opts: EngineOptions, h=None, *,
                 on_first_step: FirstStepReport | None = None) -> EngineOutcome:
    from p2smt.synth.enumerative import enumerate_programs

    return EngineOutcome("complete", tuple(enumerate_programs(prob, max_len, on_first_step)))


def _pieces(prob: SynthesisProblem, max_len: int, opts: EngineOptions, h=None, *,
            on_first_step: FirstStepReport | None = None) -> EngineOutcome:
    from p2smt.synth.pieces import SEARCH_LIMIT, enumerate_programs

    if prob.num_devices > SEARCH_LIMIT:
        raise P2Error(f"{prob.num_devices:,} devices: more than the exact search (engines pieces and auto, "
                      f"--proposer pieces) takes on ({SEARCH_LIMIT:,}); use --engine symmetric (a search on the "
                      "generic instance, every program checked at the real size), which the default certified "
                      "engine switches to beyond it")
    return EngineOutcome("complete", tuple(enumerate_programs(prob, max_len, on_first_step)))


def _z3(prob: SynthesisProblem, max_len: int, opts: EngineOptions, h: SynthesisHierarchy | None = None, *,
        on_first_step: FirstStepReport | None = None) -> EngineOutcome:
    from pathlib import Path

    from p2smt.smt.engine import DEFAULT_ENCODING, enumerate_z3
    from p2smt.smt.memory import MemoryCap
    from p2smt.smt.registry import load_encoding

    name = opts.encoding or DEFAULT_ENCODING
    if prob.num_devices > CERTIFY_LIMIT and load_encoding(name).wrapper is None:
        wrapper = "" if opts.encoding == "values" else (" or --encoding representative (Z3 on the generic size-2 "
                                                           "instance)")
        raise P2Error(f"{prob.num_devices:,} devices: more than the Z3 encodings take on ({CERTIFY_LIMIT}); use "
                      f"--engine certified (an explicit search, certified by Z3 where it can be){wrapper}")
    res = enumerate_z3(
        prob,
        max_len,
        encoding=name,
        options=opts.encoding_options,
        timeout_ms=opts.timeout_ms,
        emit_smt2=Path(opts.emit_smt2) if opts.emit_smt2 else None,
        hierarchy=h,
        memory=MemoryCap.of(opts.memory_gib),  # an estimate past it is refused; Z3 stops at it (unknown)
    )
    stats = dict(res.stats)
    conjectured = res.status is SolveStatus.COMPLETE and stats.get("completeness") == "conjectured"
    if conjectured and stats.get("encoding") == "representative":
        proved = _representative_completeness(prob, max_len, h, tuple(res.programs), stats)
        if proved is not None:
            return proved
    return EngineOutcome(SolveStatus.CONJECTURED if conjectured else res.status, tuple(res.programs), stats)


def _representative_completeness(prob: SynthesisProblem, max_len: int, h: SynthesisHierarchy | None,
                                 programs: tuple[tuple[int, ...], ...], stats: dict[str, Any]
                                 ) -> EngineOutcome | None:
    """representative's size 2 proved safe at the real size (docs/symmetry.md, Theorem 3'): where the symmetric
    engine runs that proof by default (``symmetric.INCLUSION_DEVICES``: two levels up to 16,384 devices,
    three up to 4,096), every program valid at the real size is valid at size 2, so its
    first round (every size-2 program, each checked at the real size) is exact. A program the exploration
    finds valid here and invalid at size 2 within ``max_len`` steps: the exact search at the real size
    instead. None when not run or not decided (the result stays conjectured)."""
    from p2smt.synth.lockstep import generic_completeness
    from p2smt.synth.symmetric import INCLUSION_PAIRS, inclusion_proved, proof_by_default

    if h is None or not proof_by_default(h, prob.num_devices):
        return None
    proof = generic_completeness(prob, h, 2, INCLUSION_PAIRS)
    if proof is None:
        return None
    if proof.missed_within(max_len):
        programs, rests_on = proof.searched(prob, max_len, "size 2")
        return EngineOutcome(SolveStatus.COMPLETE, tuple(programs), stats | {
            "rests_on": rests_on, "real_check": "search", "inclusion_pairs": proof.pairs})
    if not proof.proved:  # undecided, or a missed program longer than max_len
        return None
    return EngineOutcome(SolveStatus.COMPLETE, programs, stats | {
        "completeness": "proved", "rests_on": inclusion_proved("size 2", proof.pairs), "inclusion_pairs": proof.pairs})


def _z3_cegis(
    prob: SynthesisProblem, max_len: int, opts: EngineOptions, h: SynthesisHierarchy | None = None, *,
    on_first_step: FirstStepReport | None = None,
) -> EngineOutcome:
    """``z3`` with the ``values`` encoding (CEGIS over counterexample inputs)."""
    return _z3(prob, max_len, replace(opts, engine=Engine.Z3, encoding="values"), h)


def _symmetric(prob: SynthesisProblem, max_len: int, opts: EngineOptions,
               h: SynthesisHierarchy | None = None, *, on_first_step: FirstStepReport | None = None) -> EngineOutcome:
    from p2smt.synth.symmetric import synthesize

    programs, stats = synthesize(prob, max_len, h, on_first_step=on_first_step, inclusion_pairs=opts.inclusion_pairs)
    status = SolveStatus.CONJECTURED if stats.get("completeness") == "conjectured" else SolveStatus.COMPLETE
    return EngineOutcome(status, tuple(programs), stats)


CERTIFY_LIMIT = 256  # devices; above this the Z3 encoding is out of reach and the result says so
DEFAULT_PROPOSER = Engine.PIECES  # the certified engine's: 2.3x faster than enumerative on P²'s grid


def proposer_of(opts: EngineOptions) -> Engine:
    """The explicit engine whose programs the certified engine proves (``--proposer``, else pieces)."""
    return opts.proposer if opts.proposer is not None else DEFAULT_PROPOSER


def resolved(config: EngineConfig) -> EngineConfig:
    """``auto`` is the fastest exact explicit engine at every size measured, pieces (with its re-check: 2.6-2.9x
    faster than enumerative on P²'s 42 requests, 4.8x on the superpod's four-level placements of 16 devices)."""
    if config.engine != Engine.AUTO:
        return config
    return replace(config, engine=Engine.PIECES)


def _auto(prob: SynthesisProblem, max_len: int, opts: EngineOptions,
          h: SynthesisHierarchy | None = None, *, on_first_step: FirstStepReport | None = None) -> EngineOutcome:
    return run_engine(prob, resolved(opts), h, on_first_step=on_first_step)


def _certified(prob: SynthesisProblem, max_len: int, opts: EngineOptions,
               h: SynthesisHierarchy | None = None, *, on_first_step: FirstStepReport | None = None) -> EngineOutcome:
    """The proposer's programs, proved valid and complete by Z3; a disagreement is an InternalError."""
    from pathlib import Path

    from p2smt.smt.budget import UNITS
    from p2smt.smt.certify import certify
    from p2smt.smt.parallel import threads

    proposer = proposer_of(opts)
    if prob.num_devices > SEARCH_LIMIT and opts.proposer is None and opts.proof is not Proof.CERTIFICATE:
        return _beyond_the_search(prob, max_len, opts, h, on_first_step)
    if proof_of(opts, prob) is Proof.CERTIFICATE:
        return _state_graph(prob, max_len, opts, on_first_step)
    start = time.perf_counter()
    proposed = run_engine(prob, opts.proposing(proposer), h, on_first_step=on_first_step)
    stats: dict[str, Any] = {"proposer": proposer.value, "proposer_seconds": round(time.perf_counter() - start, 6)}
    if prob.num_devices > CERTIFY_LIMIT:
        reason = f"{prob.num_devices} devices: above the Z3 certificate's limit of {CERTIFY_LIMIT}"
        return EngineOutcome(proposed.status, proposed.programs, stats | {"certified": False, "why_not": reason})
    budget = opts.proof_budget * UNITS if opts.proof_budget else None
    jobs = threads(opts.jobs)
    store = ProofStore(opts.proof_store) if opts.proof_store and not opts.certificate else None
    t0 = time.perf_counter()
    entry = store.get(prob, max_len) if store is not None else None
    if entry is not None and entry.answers(set(proposed.programs), budget, jobs):
        figures = entry.certificate | {"reused": entry.key, "seconds": round(time.perf_counter() - t0, 6)}
        if entry.spent is not None:
            answer = {"certified": False, "certificate": figures, "why_not": entry.spent.why_not}
        else:
            answer = {"certified": True, "certificate": figures, "rests_on": certified_words(
                prob.num_devices, max_len, figures) + "; the proof reused from the proof store"}
        return EngineOutcome(proposed.status, proposed.programs, stats | answer)
    cert = certify(prob, max_len, proposed.programs, timeout_ms=opts.timeout_ms,
                   certificate=Path(opts.certificate) if opts.certificate else None, jobs=jobs, budget=budget)
    if cert.refuted or cert.missed:
        raise InternalError(disagreement(prob, proposer, cert))
    stats |= {"certified": cert.certified, "certificate": cert.stats}
    if not cert.certified:
        stats["why_not"] = cert.reason
        if store is not None and cert.spent and budget is not None and cert.reason is not None:
            store.put(prob, max_len, (), cert.stats, Spent(budget, jobs, cert.reason))
    else:
        stats["rests_on"] = certified_words(prob.num_devices, max_len, cert.stats)
        if store is not None:
            store.put(prob, max_len, proposed.programs, cert.stats)
            if entry is not None and entry.fits(budget):  # another set (edited by hand?), now replaced
                stats["certificate"] = cert.stats | {"replaced": entry.key}
    return EngineOutcome(proposed.status, proposed.programs, stats)


CERTIFICATE_UP_TO = 32
"""Most synthesis devices for which ``--proof auto`` takes the state-graph certificate: its Z3 query
grows with the k²-bit device states, the BMC proof's per-cell counts do not (docs/certified.md, crossover)."""


def proof_of(opts: EngineOptions, prob: SynthesisProblem) -> Proof:
    """The certified engine's proof for ``prob``: ``--proof``, else (auto) the state-graph certificate up to
    ``CERTIFICATE_UP_TO`` devices with the pieces proposer and the progress rule, unless an option only the
    BMC proof reads is given (``--proof-store``: the store keeps BMC proofs; ``--jobs`` other than 1: the
    BMC proof's threads); BMC otherwise."""
    if opts.proof is not Proof.AUTO:
        return opts.proof
    fits = prob.num_devices <= CERTIFICATE_UP_TO and prob.require_progress and proposer_of(opts) is Engine.PIECES
    return Proof.CERTIFICATE if fits and not opts.proof_store and opts.jobs == 1 else Proof.BMC


def _state_graph(prob: SynthesisProblem, max_len: int, opts: EngineOptions,
                 on_first_step: FirstStepReport | None) -> EngineOutcome:
    """The certified engine on the state-graph proof (``synth.certproof``)."""
    from p2smt.smt.budget import UNITS
    from p2smt.synth.certproof import certificate_proof, certificate_words

    if not prob.require_progress:
        raise P2Error("--proof certificate: not with --allow-noop (the checker states the progress rule); "
                      "use --proof bmc")
    if prob.num_devices > SEARCH_LIMIT:
        raise P2Error(f"--proof certificate: {prob.num_devices:,} devices, more than the search takes on "
                      f"({SEARCH_LIMIT:,})")
    units = opts.proof_budget * UNITS if opts.proof_budget else None
    programs, stats = certificate_proof(prob, max_len, units=units, folder=opts.certificate,
                                        on_first_step=on_first_step, timeout_ms=opts.timeout_ms)
    stats = {"proposer": Engine.PIECES.value, "proposer_seconds": stats["certificate"]["search_seconds"]} | stats
    if stats["certified"]:
        stats["rests_on"] = certificate_words(prob.num_devices, max_len, stats["certificate"])
    return EngineOutcome(SolveStatus.COMPLETE, programs, stats)


def _beyond_the_search(prob: SynthesisProblem, max_len: int, opts: EngineOptions, h: SynthesisHierarchy | None,
                       on_first_step: FirstStepReport | None) -> EngineOutcome:
    """Above the exact search's limit the default engine takes the symmetric engine's programs instead of
    refusing: not certified by Z3, and the result says what it rests on (its completeness proved at the real
    size or conjectured)."""
    sym = _symmetric(prob, max_len, opts, h, on_first_step=on_first_step)
    why = (f"{prob.num_devices:,} devices: above the exact search's limit of {SEARCH_LIMIT:,}; the programs are the "
           "symmetric engine's")
    return replace(sym, stats=sym.stats | {"proposer": Engine.SYMMETRIC.value, "certified": False, "why_not": why})


def certified_words(k: int, max_len: int, stats: dict[str, Any]) -> str:
    """What a certified result rests on, with the proof's size (its seconds are in the certificate)."""
    queries = stats["validity"]["queries"] + stats["completeness"]["queries"]
    return (f"Z3-certified at the real size ({k} devices): every program proved valid and no other program "
            f"of length ≤ {max_len} exists ({queries} Z3 queries)")


def disagreement(prob: SynthesisProblem, proposer: Engine, cert) -> str:
    """Each program Z3 and the proposer disagree on, with the rule each side names."""
    lines = [f"Z3 refutes {prob.label(r.program)!r} from the {proposer.value} proposer: "
             f"{'the goal' if r.step is None else f'step {r.step}'} breaks rule {r.rule}" for r in cert.refuted]
    if cert.missed:
        cands = prob.candidates
        runs = execute_all(prob.num_devices, [[(cands[i].collective, cands[i].groups) for i in p] for p in cert.missed],
                           prob.goal_groups, prob.require_progress, keep_states=False, sharding=prob.sharding)
        for prog, run in zip(cert.missed, runs, strict=True):
            why = run.violation.message if run.violation else ("valid" if run.valid else "the goal is not reached")
            lines.append(f"Z3 proves {prob.label(prog)!r} valid, which the {proposer.value} proposer missed "
                         f"(the interpreter says: {why})")
    return "certified synthesis: Z3 and the proposer disagree: " + "; ".join(lines)


EngineFn = Callable[..., EngineOutcome]
"""(problem, max_len, options, the synthesis hierarchy the problem was built from or None, *,
on_first_step: the explicit searches' report of each finished first step, or None) -> outcome."""
ENGINES: dict[Engine, tuple[str, EngineFn]] = {
    Engine.AUTO: ("the fastest exact explicit engine: pieces, re-checked", _auto),
    Engine.ENUMERATIVE: ("P²'s enumerative search pruned by the preconditions", _enumerative),
    Engine.PIECES: ("P²'s search on pieces.py's compressed state: exact at any number of devices", _pieces),
    Engine.Z3: ("Z3 over an SMT encoding of the Hoare rules (enumerates all models)", _z3),
    Engine.Z3_CEGIS: ("Z3 CEGIS over symbolic data values (the values encoding)", _z3_cegis),
    Engine.CERTIFIED: (("a proposer's programs (pieces by default) proved valid and "
                       "complete by Z3 (the default)"), _certified),
    Engine.SYMMETRIC: (("P²'s search on the generic size-2 copy of the hierarchy, each program then checked at "
                        "the real size; completeness proved at the real size with two levels up to 16,384 devices and "
                        "three up to 4,096, conjectured beyond (docs/symmetry.md)"), _symmetric),
}


DROPPED_KEYS = ("dropped_at_real_size", "dropped_example", "inclusion_pairs", "generic_misses", "positions_dropped",
                "positions_example")
"""The symmetric engine's keys of a placement's JSON: how many generic-instance programs the real-size
check rejected, and the shortest of them; the pairs of states its completeness proof explored (the status
says whether it proved it), and a program the generic instance misses (longer than the maximum length)."""

CERTIFICATE_KEYS = ("proposer", "certified", "why_not", "certificate")
"""The certified engine's keys of a placement's JSON: its proposer, whether Z3 certified the set
(else why not), and the per-length statistics of the proof."""


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
    goal: Goal = ALLREDUCE

    @property
    def status(self) -> SolveStatus:
        statuses = {m.status for m in self.matrices}
        if statuses <= {SolveStatus.COMPLETE}:
            return SolveStatus.COMPLETE
        return SolveStatus.CONJECTURED if statuses <= {SolveStatus.COMPLETE, SolveStatus.CONJECTURED} \
            else SolveStatus.UNKNOWN

    @property
    def certified(self) -> bool | None:
        """Whether Z3 certified every placement's set (None: not the certified engine)."""
        flags = [m.stats.get("certified") for m in self.matrices]
        return None if not flags or any(f is None for f in flags) else all(flags)

    def certification(self, seconds: bool = False) -> str | None:
        """Whether Z3 certified the programs, or why not, in words (None: not the certified engine); with
        ``seconds``, how long the proofs took (left out of JSON, which stays the same run to run)."""
        if self.certified is None:
            return None
        proofs = [m.stats["certificate"] for m in self.matrices if "certificate" in m.stats]
        if self.certified:
            reused = sum("reused" in p for p in proofs)
            again = f", {reused} reused from the proof store" if reused else ""
            took = f", {self.proof_seconds:.3f} s" if seconds else ""
            return (f"certified by Z3: every program proved valid and no other program of length ≤ {self.max_len} "
                    f"exists ({len(proofs)} proof{'' if len(proofs) == 1 else 's'}{again}{took})")
        why = sorted({m.stats["why_not"] for m in self.matrices if m.stats.get("why_not")})
        return f"NOT certified by Z3: {'; '.join(why)} (programs from the proposer, re-checked)"

    @property
    def proof_seconds(self) -> float:
        """Seconds of Z3's certificates over every placement (0 under another engine)."""
        return sum(m.stats["certificate"]["seconds"] for m in self.matrices if "certificate" in m.stats)

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
            **({"goal": self.goal.to_json()} if self.goal.sharded else {}),  # the AllReduce goal's JSON unchanged
            "total_programs": self.total_programs,
            **({"certified": self.certified} if self.certified is not None else {}),
            "matrices": [_matrix_json(m) for m in self.matrices],
            "stats": {"seconds": round(self.seconds, 6)},
        }


def _matrix_json(m: MatrixResult) -> dict[str, Any]:
    """One placement's programs and certificate; its wall-clock figures under ``stats``."""
    certificate, timed = split_timings({key: m.stats[key] for key in CERTIFICATE_KEYS if key in m.stats})
    return {
        "matrix": [list(r) for r in m.matrix],
        "synthesis_hierarchy": [[n, s] for n, s in m.hierarchy.levels],
        "status": m.status,
        "programs": [str(p) for p in m.programs],
        **({"same_problem_as": m.stats["same_problem_as"]} if "same_problem_as" in m.stats else {}),
        **({"rests_on": m.stats["rests_on"]} if "rests_on" in m.stats else {}),
        **({"reason_unknown": m.stats["reason_unknown"]} if "reason_unknown" in m.stats else {}),
        **{key: m.stats[key] for key in DROPPED_KEYS if key in m.stats},
        **certificate,
        "stats": {"seconds": round(m.seconds, 6), **timed},
    }


def run_engine(prob: SynthesisProblem, config: EngineConfig, hierarchy: SynthesisHierarchy | None = None, *,
               on_first_step: FirstStepReport | None = None) -> EngineOutcome:
    """Run one engine on one problem (no re-check; see ``synthesize_hierarchy``); ``on_first_step``: the
    explicit searches (and the certified engine's proposer) report each finished first step's programs
    (passed only when given: an engine function may take just the four positional arguments)."""
    extra = {} if on_first_step is None else {"on_first_step": on_first_step}
    return ENGINES[config.engine][1](prob, config.max_len, config, hierarchy, **extra)


def rechecked_by(engine: str, k: int, proposer: str | None = None) -> str | None:
    """The interpreter that re-checks ``engine``'s programs on ``k`` devices ("numpy": the k×k×k one,
    up to ``PIECES_ABOVE``; "pieces" above, "vectorized" above ``VECTORIZED_ABOVE``), or None for an engine that is that interpreter itself or
    runs the same check on its candidates itself (symmetric); the certified engine's programs are its
    proposer's."""
    if engine == Engine.CERTIFIED:
        return rechecked_by(proposer or proposer_of(EngineConfig()), k)
    if engine in ("enumerative", "symmetric"):  # symmetric: its own check of every program is ``recheck``
        return None
    if k <= PIECES_ABOVE:
        return "numpy"
    if engine == "pieces":
        return None
    return checker(k)


def rests_on(engine: str, k: int, outcome: EngineOutcome) -> str:
    """What a result rests on, in words: the re-check at the real size, the interpreter's own search,
    or (symmetric) the engine's own statement of its conjecture; a certified engine's Z3 certificate,
    or why there is none."""
    if engine == Engine.CERTIFIED:
        proposer = outcome.stats["proposer"]
        if outcome.stats["certified"]:
            return outcome.stats["rests_on"]
        return f"NOT certified ({outcome.stats['why_not']}); {rests_on(proposer, k, outcome)}"
    checked = rechecked_by(engine, k)
    own = outcome.stats.get("rests_on")
    if engine == Engine.SYMMETRIC:
        return own or ""
    if checked:
        validity = f"every program re-checked by {INTERPRETERS[checked]} at the real size ({k} devices)"
    elif engine in (Engine.ENUMERATIVE, Engine.PIECES):
        which = INTERPRETERS["numpy" if engine == Engine.ENUMERATIVE else "pieces"]
        return f"the exhaustive search of {which} itself at the real size ({k} devices)"
    else:
        validity = f"no re-check above {RECHECK_LIMIT} devices"
    return f"{validity}; completeness: {own}" if own else validity


def synthesize_hierarchy(
    h: SynthesisHierarchy, config: EngineConfig | None = None, *, require_progress: bool = True,
    sharding: Sharding | None = None,
) -> tuple[tuple[Program, ...], EngineOutcome, float]:
    """Synthesize on one hierarchy; programs are re-checked unless the engine is the interpreter itself."""
    start = time.perf_counter()
    prob = problem(h, require_progress, sharding)
    outcome, indices = _solve(prob, config or EngineConfig(), h)
    return _programs(h, indices), outcome, time.perf_counter() - start


def _solve(prob: SynthesisProblem, config: EngineConfig, h: SynthesisHierarchy | None = None,
           on_first_step: FirstStepReport | None = None) -> tuple[EngineOutcome, tuple[tuple[int, ...], ...]]:
    """The engine's outcome and its programs (candidate indices) after the re-check and pruning."""
    config = resolved(config)
    outcome = run_engine(prob, config, h, on_first_step=on_first_step)
    programs = list(outcome.programs)
    # a certified set already rests on two independent formalizations: the proposer's interpreter found
    # every program and Z3's encodings proved each valid; a third run of the programs adds nothing
    certified = outcome.stats.get("certified") is True
    if not certified and rechecked_by(config.engine, prob.num_devices, outcome.stats.get("proposer")):
        drop = outcome.stats.get("real_check") == "recheck"  # representative: size-2 candidates, unchecked
        rejected = recheck(prob, programs, config.engine, drop=drop, sizes=h.sizes if h is not None else None)
        if drop:
            gone = set(rejected)
            programs = [p for p in programs if p not in gone]
            outcome.stats.update(dropped_stats(prob, rejected))
    if prob.sharding is not None:  # the chunk semantics cannot see an AllGather's order: positions can (§6)
        dropped = permuted(prob, programs)
        programs = [p for p in programs if p not in dropped]
        outcome.stats.update(positions_stats(prob, dropped))
    if config.prune != "none":
        from p2smt.synth.pruning import apply_pruning

        programs = apply_pruning(config.prune, prob, programs)
    return outcome, tuple(programs)


def _programs(h: SynthesisHierarchy, indices) -> tuple[Program, ...]:
    instrs: list[Instruction] = [ins for ins, _ in candidate_instructions(h)]
    return tuple(Program(tuple(instrs[i] for i in p)) for p in indices)


def placements_for(system: System, axes: tuple[int, ...], matrix: Matrix | None) -> list[Placement]:
    if matrix is not None:
        return [Placement(system.sizes, tuple(axes), matrix)]
    return [Placement(system.sizes, tuple(axes), m) for m in matrices(system.sizes, axes)]


SEARCHES = {
    Engine.ENUMERATIVE: "the dense interpreter's exhaustive search at the real size",
    Engine.PIECES: "the compressed interpreter's exhaustive search at the real size",
    Engine.SYMMETRIC: ("the symmetric engine's search (on the generic instance where the problem allows, each "
                       "program checked at the real size; completeness proved at the real size with two levels "
                       "up to 16,384 devices and three up to 4,096, conjectured beyond, docs/symmetry.md)"),
}


def explicit_search(config: EngineConfig) -> Engine | None:
    """The explicit search whose finished first steps a run of ``config`` reports (None: a Z3 engine's)."""
    engine = resolved(config).engine
    searcher = proposer_of(config) if engine == Engine.CERTIFIED else engine
    return searcher if searcher in SEARCHES else None


def partial_rests_on(config: EngineConfig, k: int) -> str:
    """What the programs of an unfinished placement rest on: the search that found them, and the re-check
    or Z3 certificate the finished placement would have had but these did not reach (only explicit searches
    report partial programs: ``explicit_search`` is not None)."""
    engine = resolved(config).engine
    searcher = explicit_search(config)
    found = SEARCHES[searcher]
    words = [f"partial (the search stopped before its end): not every program; each found by {found} ({k} devices)"]
    checked = rechecked_by(engine, k, searcher.value)
    if checked:
        words.append(f"not re-checked by {INTERPRETERS[checked]} ({k} devices)")
    if engine == Engine.CERTIFIED:
        words.append("the Z3 certificate was not reached")
    return "; ".join(words)


def _first_step_reporter(matrix: Matrix, h: SynthesisHierarchy, prob: SynthesisProblem, config: EngineConfig,
                         on_partial: Callable[[FirstStepPrograms], None]) -> FirstStepReport:
    """The search's ``on_first_step`` that hands ``on_partial`` each first step's programs as DSL programs."""
    instrs: list[Instruction] = [ins for ins, _ in candidate_instructions(h)]
    words = partial_rests_on(config, prob.num_devices)

    def report(first: int, indices: list[tuple[int, ...]]) -> None:
        programs = tuple(Program(tuple(instrs[i] for i in p)) for p in indices)
        on_partial(FirstStepPrograms(matrix, h, first, len(instrs), tuple(indices), programs, words))

    return report


def synthesize(request: Request, config: EngineConfig | None = None, *,
               on_matrix: Callable[[MatrixResult], None] | None = None,
               on_partial: Callable[[FirstStepPrograms], None] | None = None) -> SynthesisResult:
    """All valid programs up to ``config.max_len`` for every placement (or the one ``matrix``) of a request.

    Placements whose synthesis problems are equal (same devices, goal and candidate instructions,
    e.g. matrices that differ only in the non-reduced axes) are solved once; the others report
    ``stats["same_problem_as"]``, the matrix that was solved, and their own (small) seconds.
    ``on_matrix`` receives each placement's result as it is found (progress, partial results);
    ``on_partial`` each finished first step of an explicit search (unpruned runs only: pruning needs the
    whole set), so a run stopped early keeps the programs an unfinished placement found so far.

    >>> r = synthesize(Request("a100-4x16", axes=(4, 16), reduce=(0,), matrix=((1, 4), (4, 4))))
    >>> r.status, r.total_programs
    (<SolveStatus.COMPLETE: 'complete'>, 3)
    """
    config = config or EngineConfig()
    start = time.perf_counter()
    system = request.load_system()
    placements = request.placements(system)
    reduction_axes = placements[0].check_axes(request.reduce)
    results = []
    solved: dict[SynthesisProblem, tuple[Matrix, EngineOutcome, tuple[tuple[int, ...], ...]]] = {}
    for placement in placements:
        t0 = time.perf_counter()
        h = synthesis_hierarchy(placement, reduction_axes, system.level_names, request.hierarchy,
                                request.master_scope)
        prob = problem(h, request.require_progress, request.sharding(placement, h))
        if prob in solved:
            first, outcome, indices = solved[prob]
            stats: dict[str, Any] = {"same_problem_as": [list(r) for r in first]}
            if "certified" in outcome.stats:
                stats["certified"] = outcome.stats["certified"]
            stats["rests_on"] = f"as for matrix {stats['same_problem_as']} (the same problem): {outcome.stats['rests_on']}"
        else:
            report = None
            if on_partial is not None and config.prune == "none" and explicit_search(config):
                report = _first_step_reporter(placement.matrix, h, prob, config, on_partial)
            outcome, indices = _solve(prob, config, h, report)
            engine = resolved(config).engine
            stats = dict(outcome.stats) | {"rests_on": rests_on(engine, prob.num_devices, outcome)
                                           + (positions_words(outcome.stats) if prob.sharding else "")}
            solved[prob] = (placement.matrix, replace(outcome, stats=stats), indices)
        progs = _programs(h, indices)
        secs = time.perf_counter() - t0
        results.append(MatrixResult(placement.matrix, h, progs, outcome.status, secs, stats))
        if on_matrix is not None:
            on_matrix(results[-1])
    return SynthesisResult(
        system.name, request.axes, reduction_axes, config.engine, config.max_len, tuple(results),
        time.perf_counter() - start, request.goal,
    )
