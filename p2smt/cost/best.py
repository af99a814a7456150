"""Cost-guided search: the N cheapest valid programs per placement under the cost model, found and proved
with Z3 by the bound strategy of ``cost.bound`` (its docstring describes the bound, the lookahead and the
order of ties: ``rank``'s, so ``best`` returns what ranking the complete program set would).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from p2smt.cost.bound import TIE_TOLERANCE, CostBound, RankedProgram
from p2smt.cost.rank import check_request
from p2smt.cost.rank import sort_key as rank_key
from p2smt.errors import InternalError, P2Error
from p2smt.model.goal import Goal, GoalKind, Sharding
from p2smt.model.hierarchy import HierarchyKind, MasterScope, SynthesisHierarchy, synthesis_hierarchy
from p2smt.model.placement import Matrix
from p2smt.model.request import Request
from p2smt.model.status import SolveStatus
from p2smt.model.system import System, load_system
from p2smt.smt.budget import DEFAULT_PROOF_BUDGET, UNITS
from p2smt.synth.config import MAX_LEN_LIMIT
from p2smt.synth.driver import CERTIFY_LIMIT, placements_for

__all__ = ["BOUNDS", "METHODS", "TIE_TOLERANCE", "BestProof", "BestResult", "MatrixBest", "RankedProgram", "best", "best_on_hierarchy"]

BOUNDS = ("clauses", "sum")
METHODS = ("search", "z3")


class BestProof(StrEnum):
    """What certifies the branch and bound's list (``method="search"``): ``certificate`` (the state-graph
    certificate, its cheapest goal paths recomputed), ``bound`` (one Z3 bound query seeded with the list),
    ``none`` (the exhaustive search alone), ``auto`` (``proof_for``)."""

    AUTO = "auto"
    CERTIFICATE = "certificate"
    BOUND = "bound"
    NONE = "none"

"""``search`` (default): the branch and bound of ``cost.branch`` on the bitmatrix state (exhaustive, up to
``branch.MAX_DEVICES``), its list then proved (``BestProof``: the state-graph certificate or one Z3 bound
query); ``z3``: the bound strategy of ``cost.bound`` alone (Z3 finds and proves)."""


@dataclass(frozen=True)
class MatrixBest:
    """One placement: its cheapest programs (rank order) and whether that is proved.

    ``status``: "optimal" (no valid program of at most ``max_len`` steps that is missing from the list
    is cheaper than its last entry), "infeasible" (no valid program of at most ``max_len`` steps), or
    "unknown" (a solver call gave up: the programs are the cheapest found, valid, not proved cheapest).
    """

    matrix: Matrix
    hierarchy: SynthesisHierarchy
    programs: tuple[RankedProgram, ...]
    status: SolveStatus
    seconds: float
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def certified(self) -> bool:
        """Whether the status rests on a solver's proof (the state-graph certificate, the bound query, Z3's own
        search), not on the exhaustive search alone."""
        return self.status is not SolveStatus.UNKNOWN and bool(self.stats.get("certified"))

    def to_json(self) -> dict[str, Any]:
        return {
            "matrix": [list(r) for r in self.matrix],
            "synthesis_hierarchy": [[n, s] for n, s in self.hierarchy.levels],
            "programs": [p.to_json() for p in self.programs],
            "status": self.status,
            "certified": self.certified,
            "stats": {**{"search_seconds" if k == "seconds" else k: v for k, v in self.stats.items()
                         if k != "certified"}, "seconds": round(self.seconds, 6)},
        }


@dataclass(frozen=True)
class BestResult:
    system: str
    axes: tuple[int, ...]
    reduction_axes: tuple[int, ...]
    algo: str
    bytes_per_device: float
    max_len: int
    top: int
    matrices: tuple[MatrixBest, ...]
    seconds: float
    goal: Goal | None = None  # a sharded goal (docs/semantics.md §6); None: AllReduce

    @property
    def certified(self) -> bool:
        """Whether every placement's status rests on a solver's proof (``MatrixBest.certified``)."""
        return bool(self.matrices) and all(m.certified for m in self.matrices)

    @property
    def status(self) -> SolveStatus:
        """Optimal when every placement is proved (or has no program), else unknown."""
        unknown = any(m.status is SolveStatus.UNKNOWN for m in self.matrices)
        return SolveStatus.UNKNOWN if unknown else SolveStatus.OPTIMAL

    @property
    def best(self) -> tuple[MatrixBest, RankedProgram] | None:
        """The cheapest program over all placements (ties: program text, then matrix, as ``rank``)."""
        firsts = [(m, m.programs[0]) for m in self.matrices if m.programs]
        if not firsts:
            return None
        return min(firsts, key=lambda mp: rank_key(mp[1].seconds, mp[1].text) + ([list(r) for r in mp[0].matrix],))

    def to_json(self) -> dict[str, Any]:
        best = self.best
        return {
            "status": self.status,
            "system": self.system,
            "axes": list(self.axes),
            "reduce": list(self.reduction_axes),
            **({"goal": self.goal.to_json()} if self.goal is not None and self.goal.sharded else {}),
            "bytes_per_device": self.bytes_per_device,
            "algo": self.algo,
            "max_len": self.max_len,
            "top": self.top,
            "certified": self.certified,
            "matrices": [m.to_json() for m in self.matrices],
            "best": None if best is None else {"matrix": [list(r) for r in best[0].matrix], **best[1].to_json()},
            "stats": {"seconds": round(self.seconds, 6)},
        }


def _check_options(max_len: int, timeout_ms: int | None, bound: str, method: str = "search",
                   proof: str = "auto") -> None:
    if not 1 <= max_len <= MAX_LEN_LIMIT:
        raise P2Error(f"--max-len must be between 1 and {MAX_LEN_LIMIT}, got {max_len}")
    if timeout_ms is not None and timeout_ms <= 0:
        raise P2Error(f"--timeout must be positive, got {timeout_ms} ms")
    if bound not in BOUNDS:
        raise P2Error(f"unknown bound {bound!r}; choose one of {', '.join(BOUNDS)}")
    if method not in METHODS:
        raise P2Error(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    if proof not in set(BestProof):
        raise P2Error(f"unknown proof {proof!r}; choose one of {', '.join(p.value for p in BestProof)}")


def best_on_hierarchy(system: System, h: SynthesisHierarchy, *, max_len: int = 8, top: int = 1, algo: str = "ring",
                      bytes_per_device: float | None = None, timeout_ms: int | None = None,
                      encoding: str = "bool-matrix", encoding_options: dict[str, Any] | None = None,
                      require_progress: bool = True, bound: str = "clauses", matrix: Matrix = (),
                      lookahead: bool = True, method: str = "search", proof: BestProof | str = BestProof.AUTO,
                      proof_budget: int = DEFAULT_PROOF_BUDGET, sharding: Sharding | None = None) -> MatrixBest:
    """The ``top`` cheapest valid programs of at most ``max_len`` steps on one synthesis hierarchy.

    ``stats["rests_on"]`` says what the optimality rests on: the exhaustive branch and bound and its proof
    (``proof``: the state-graph certificate, the Z3 bound query, or none) or Z3's own search (``method="z3"``)."""
    b = check_request(system, algo, bytes_per_device, top)
    _check_options(max_len, timeout_ms, bound, method, proof)
    start = time.perf_counter()
    chosen = proof_for(BestProof(proof), h.num_devices)
    if sharding is not None and (method != "search" or chosen is not BestProof.CERTIFICATE):
        raise P2Error(f"the {sharding.kind.value} goal is searched only by --method search with the state-graph "
                      "certificate (--proof certificate, the default up to "
                      f"{BEST_CERTIFICATE_UP_TO} synthesis devices): the branch and bound and the bound query state "
                      "the allreduce goal")
    if method == "search":
        from p2smt.cost.branch import BranchAndBound

        figures = None
        if chosen is BestProof.CERTIFICATE and h.num_devices <= CERTIFY_LIMIT:
            proved, figures = _graph_paths(system, h, max_len=max_len, top=top, algo=algo, bytes_per_device=b,
                                           require_progress=require_progress,
                                           units=proof_budget * UNITS if proof_budget else None,
                                           timeout_ms=timeout_ms, sharding=sharding)
            if figures["certified"]:
                cert = figures["certificate"]
                beyond = (f"; {cert['unexpanded']} states beyond the cost bound left unexpanded, every path "
                          "within it checked to run on proved rows" if cert["unexpanded"] else "")
                if sharding is not None:
                    n = figures["positions_dropped"]
                    beyond += (f"; each program within the bound also run in XLA/NCCL buffer positions, {n} "
                               f"dropped (a permuted result)" if n else "; each program within the bound also "
                               "run in XLA/NCCL buffer positions, none dropped")
                stats = {"method": "search", "proof": figures, "certified": True, "rests_on": (
                    f"the cheapest goal paths of a state-graph certificate ({cert['states']} states, {cert['steps']} "
                    f"steps closed by the independent checker, {cert['lemmas']} distinct steps proved by Z3 "
                    f"against §4{beyond}): no valid program of at most {max_len} steps is cheaper, each priced "
                    "from its certified states")}
                status = SolveStatus.OPTIMAL if proved else SolveStatus.INFEASIBLE
                stats["search_seconds"] = round(time.perf_counter() - start, 6)  # search and proof are one
                return MatrixBest(matrix, h, tuple(proved), status, time.perf_counter() - start, stats)
            if sharding is not None:  # no branch and bound of this goal to fall back on
                stats = {"method": "search", "proof": figures, "rests_on": (
                    f"nothing: the state-graph certificate is not finished ({figures['why_not']}), and only it "
                    f"searches the {sharding.kind.value} goal")}
                stats["search_seconds"] = round(time.perf_counter() - start, 6)
                return MatrixBest(matrix, h, (), SolveStatus.UNKNOWN, time.perf_counter() - start, stats)
        ranked, stats = BranchAndBound(system, h, algo=algo, bytes_per_device=b, max_len=max_len, top=top,
                                       require_progress=require_progress).run()
        status = SolveStatus.OPTIMAL if ranked else SolveStatus.INFEASIBLE
        stats["search_seconds"] = round(time.perf_counter() - start, 6)
        if figures is not None:  # the certificate ran out (budget, --timeout): the search's list, not certified
            stats["proof"] = figures
            stats["rests_on"] = (f"the exhaustive branch and bound; the state-graph certificate is not finished "
                                 f"({figures['why_not']}), so optimality is not certified")
            return MatrixBest(matrix, h, tuple(ranked), SolveStatus.UNKNOWN, time.perf_counter() - start, stats)
        status = _certify(system, h, ranked, status, stats, proof=BestProof(proof), max_len=max_len, top=top,
                          algo=algo, bytes_per_device=b, timeout_ms=timeout_ms, encoding=encoding,
                          encoding_options=encoding_options, require_progress=require_progress, bound=bound,
                          lookahead=lookahead, proof_budget=proof_budget)
        return MatrixBest(matrix, h, tuple(ranked), status, time.perf_counter() - start, stats)
    if h.num_devices > CERTIFY_LIMIT:  # the Z3 encodings' limit, as for the z3 and certified engines
        raise P2Error(f"{h.num_devices:,} devices: more than the Z3 encodings take on ({CERTIFY_LIMIT}); use "
                      "--method search (the exact branch and bound, no solver)")
    search = CostBound(system, h, algo=algo, bytes_per_device=b, max_len=max_len, top=top, timeout_ms=timeout_ms,
                     encoding=encoding, options=encoding_options, require_progress=require_progress, bound=bound,
                     lookahead=lookahead)
    status, ranked, stats = search.run()
    stats["certified"] = status is not SolveStatus.UNKNOWN
    stats["rests_on"] = ("Z3's bound strategy (found and proved by the solver, each program re-checked)"
                         if status is not SolveStatus.UNKNOWN else "Z3's bound strategy, which gave up: the "
                         "programs listed are valid and the cheapest found, not proved cheapest")
    return MatrixBest(matrix, h, tuple(ranked), status, time.perf_counter() - start, stats)


def _nth(top: int) -> str:
    return "cheapest" if top == 1 else f"{top}th cheapest"


BEST_CERTIFICATE_UP_TO = 64
"""Most synthesis devices for which ``--proof auto`` takes the certificate: grown only as far as the cost
bound, it beat the bound query at 64 devices (superpod, four levels, length 5: 20.6 s against 60 s); at 256
its k²-bit states keep Z3 past 600 s even at length 2 (docs/certified.md)."""


def proof_for(proof: BestProof, devices: int) -> BestProof:
    """``auto``: the certificate up to ``BEST_CERTIFICATE_UP_TO`` synthesis devices, the bound query up to
    ``CERTIFY_LIMIT``, none beyond (the search alone, said in the result)."""
    if proof is not BestProof.AUTO:
        return proof
    if devices <= BEST_CERTIFICATE_UP_TO:
        return BestProof.CERTIFICATE
    return BestProof.BOUND if devices <= CERTIFY_LIMIT else BestProof.NONE


def _certify(system: System, h: SynthesisHierarchy, ranked: list[RankedProgram], status: SolveStatus,
             stats: dict[str, Any], *, proof: BestProof, max_len: int, top: int, algo: str, bytes_per_device: float,
             timeout_ms: int | None, encoding: str, encoding_options: dict[str, Any] | None,
             require_progress: bool, bound: str, lookahead: bool, proof_budget: int) -> SolveStatus:
    """Prove the branch and bound's list by the bound query (``stats`` gets its figures and ``rests_on``); the
    status becomes unknown when the query gave up, and two exact searches that disagree are an internal error."""
    chosen = proof_for(proof, h.num_devices)
    search = "the exhaustive branch and bound" + (
        f" on the {stats['interpreter']} interpreter at the real size" if "interpreter" in stats else "")
    if chosen is BestProof.NONE:
        why = "--proof none" if proof is BestProof.NONE else (
            f"{h.num_devices:,} synthesis devices, more than the Z3 encodings take on ({CERTIFY_LIMIT})")
        stats["rests_on"] = f"{search} alone (no proof: {why})"
        stats["certified"] = False
        return status
    if h.num_devices > CERTIFY_LIMIT:
        raise P2Error(f"--proof {chosen.value}: {h.num_devices:,} synthesis devices, more than the Z3 encodings "
                      f"take on ({CERTIFY_LIMIT}); use --proof none (the exhaustive search alone)")
    status, stats["proof"] = _bound_query(system, h, ranked, max_len=max_len, top=top, algo=algo,
                                          bytes_per_device=bytes_per_device, timeout_ms=timeout_ms,
                                          encoding=encoding, encoding_options=encoding_options,
                                          require_progress=require_progress, bound=bound, lookahead=lookahead)
    stats["certified"] = status is not SolveStatus.UNKNOWN
    stats["rests_on"] = (
        f"{search}; its optimality proved by one Z3 bound query (no other valid program of at most {max_len} "
        f"steps costs at most the {_nth(top)} found)" if status is not SolveStatus.UNKNOWN else
        f"{search}; the Z3 bound query gave up, so optimality is not certified")
    return status


def _graph_paths(system: System, h: SynthesisHierarchy, *, max_len: int, top: int, algo: str,
                 bytes_per_device: float, require_progress: bool, units: int | None,
                 timeout_ms: int | None, sharding: Sharding | None = None
                 ) -> tuple[list[RankedProgram], dict[str, Any]]:
    """The state-graph certificate of the hierarchy's problem, grown as far as the cost bound needs
    (``cost.graphbest``), proved, and its cheapest goal paths."""
    from p2smt.cost.graphbest import cheapest_paths, grow
    from p2smt.cost.program import Prices
    from p2smt.model.dsl import candidate_instructions, problem
    from p2smt.model.topology import build_topology
    from p2smt.synth.certproof import graph_proof

    prob = problem(h, require_progress, sharding)
    instructions = [ins for ins, _ in candidate_instructions(h)]
    prices = Prices(instructions, build_topology(system), h, algo=algo, bytes_per_device=bytes_per_device,
                    k=prob.num_devices)
    keep = None
    if sharding is not None:  # the chunk semantics cannot see an AllGather's order: positions can (§6)
        from p2smt.synth.positions_check import permuted

        def keep(program: tuple[int, ...]) -> bool:
            return not permuted(prob, [program])
    bound: list[float] = []
    doc, closed, figures = graph_proof(prob, max_len, units=units, timeout_ms=timeout_ms,
                                       grow=lambda builder: bound.append(grow(builder, prices, max_len, top, keep)))
    if not figures["certified"]:
        return [], figures
    started = time.perf_counter()
    passed: list[tuple[int, ...]] = []
    paths = cheapest_paths(doc, closed, instructions, prices, max_len=max_len, top=top, bound=bound[0], keep=keep,
                           passed=passed)
    if sharding is not None:
        figures["positions_dropped"] = len(passed)
        if passed:
            first = min(passed, key=lambda p: (len(p), p))
            figures["positions_example"] = prob.label(first) + ": " + permuted(prob, [first])[first]
    figures["certificate"]["paths_seconds"] = round(time.perf_counter() - started, 6)
    figures["certificate"]["bound_seconds"] = bound[0] if math.isfinite(bound[0]) else None
    return paths, figures


def _same(ranked: Sequence[RankedProgram], proved: Sequence[RankedProgram], what: str) -> None:
    if [(p.text, p.seconds) for p in proved] != [(p.text, p.seconds) for p in ranked]:
        raise InternalError(f"best: the branch and bound returned {[p.text for p in ranked]}, {what} are "
                            f"{[p.text for p in proved]}")


def _bound_query(system: System, h: SynthesisHierarchy, ranked: Sequence[RankedProgram], *, max_len: int,
                 top: int, algo: str, bytes_per_device: float, timeout_ms: int | None, encoding: str,
                 encoding_options: dict[str, Any] | None, require_progress: bool, bound: str,
                 lookahead: bool) -> tuple[SolveStatus, dict[str, Any]]:
    """Certify the branch and bound's list: Z3, with the list blocked and U its N-th time, finds no other
    program within U (one bound query, refined lazily). A program it finds is a disagreement of two exact
    searches, an internal error, never silently merged."""
    query = CostBound(system, h, algo=algo, bytes_per_device=bytes_per_device, max_len=max_len, top=top,
                      timeout_ms=timeout_ms, encoding=encoding, options=encoding_options,
                      require_progress=require_progress, bound=bound, lookahead=lookahead, seed=ranked)
    status, proved, stats = query.run()
    if status is not SolveStatus.UNKNOWN:
        _same(ranked, proved, "Z3's bound query's")
    return status, stats


def best(request: Request | System | str, axes: Sequence[int] | None = None,
         reduction_axes: Sequence[int] | None = None, *, max_len: int = 8, top: int = 1, algo: str = "ring",
         bytes_per_device: float | None = None, timeout_ms: int | None = None, encoding: str = "bool-matrix",
         encoding_options: dict[str, Any] | None = None, bound: str = "clauses", lookahead: bool = True,
         method: str = "search", proof: BestProof | str = BestProof.AUTO, proof_budget: int = DEFAULT_PROOF_BUDGET,
         report: Callable[[MatrixBest], None] | None = None, matrix: Matrix | None = None,
         hierarchy_kind: HierarchyKind | None = None, master_scope: MasterScope | None = None,
         require_progress: bool | None = None, goal: GoalKind | str | None = None,
         shard_axes: Sequence[int] | None = None) -> BestResult:
    """The ``top`` cheapest programs per placement of ``request`` (or its one ``matrix``) and overall, proved
    (``p2smt best``); the request's hierarchy, master scope, progress rule and goal as ``rank`` reads them.

    Same order, ties and seconds as ``rank.rank_result`` over the complete program set up to
    ``max_len``; ``timeout_ms`` bounds each solver call (a placement whose call gives up is "unknown").
    ``method="search"`` (default) finds the list by ``cost.branch``'s branch and bound and certifies it
    (``proof``, ``BestProof``: by default the state-graph certificate, whose cheapest goal paths must be the
    list); ``method="z3"`` finds and proves it with Z3 alone. A sharded goal (``Request.goal``,
    docs/semantics.md §6) is searched by the state-graph certificate alone (its initial and goal states carry
    the shards, and each step is priced from the certified holdings, an AllGather's from its shards).
    ``report`` receives each placement's result as it is finished (progress, partial results).
    The older form ``best(system, axes, reduction_axes, matrix=..., hierarchy_kind=..., master_scope=...,
    require_progress=..., goal=..., shard_axes=...)`` builds that Request; beside a Request those are refused.

    >>> best(Request("v100-2x8", axes=(16,), reduce=(0,)), max_len=3).best[1].text
    '(node, InsideGroup, ReduceScatter); (node, Parallel(root), AllReduce); (node, InsideGroup, AllGather)'
    """
    request = _request_of(request, axes, reduction_axes, matrix=matrix, hierarchy=hierarchy_kind,
                          master_scope=master_scope, require_progress=require_progress, goal=goal,
                          shard_axes=shard_axes)
    system = request.load_system()
    b = check_request(system, algo, bytes_per_device, top)
    _check_options(max_len, timeout_ms, bound, method, proof)
    start = time.perf_counter()
    placements = placements_for(system, request.axes, request.matrix)
    red = placements[0].check_axes(request.reduce)
    results = []
    for placement in placements:
        h = synthesis_hierarchy(placement, red, system.level_names, request.hierarchy, request.master_scope)
        sharding = request.sharding(placement, h)
        results.append(best_on_hierarchy(system, h, max_len=max_len, top=top, algo=algo, bytes_per_device=b,
                                         timeout_ms=timeout_ms, encoding=encoding,
                                         encoding_options=encoding_options, require_progress=request.require_progress,
                                         bound=bound, matrix=placement.matrix, lookahead=lookahead,
                                         method=method, proof=proof, proof_budget=proof_budget,
                                         sharding=sharding))
        if report is not None:
            report(results[-1])
    return BestResult(system.name, request.axes, tuple(red), algo, float(b), max_len, top, tuple(results),
                      time.perf_counter() - start, request.goal)


def _request_of(request: Request | System | str, axes: Sequence[int] | None, reduction_axes: Sequence[int] | None,
                **given: Any) -> Request:
    """``best``'s Request: the one given, or the one its older form ``(system, axes, reduction_axes, ...)``
    describes; a Request with axes or request fields beside it is ambiguous and refused."""
    named = {k: v for k, v in given.items() if v is not None}
    if isinstance(request, Request):
        if axes is not None or reduction_axes is not None or named:
            extra = ["axes"] * (axes is not None) + ["reduction_axes"] * (reduction_axes is not None) + list(named)
            raise P2Error(f"best takes a Request alone; give {', '.join(extra)} in the Request")
        return request
    if axes is None or reduction_axes is None:
        raise P2Error("best takes a Request (or a system, axes and reduction axes)")
    shard_axes = named.pop("shard_axes", None)
    goal = Goal.of(named.pop("goal", GoalKind.ALLREDUCE), shard_axes, tuple(reduction_axes))
    return Request.for_system(load_system(request), tuple(axes), tuple(reduction_axes), goal=goal, **named)
