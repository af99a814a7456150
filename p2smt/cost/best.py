"""Cost-guided search: the N cheapest valid programs per placement under the cost model, found and proved
with Z3 by the bound strategy of ``cost.bound`` (its docstring describes the bound, the lookahead and the
order of ties: ``rank``'s, so ``best`` returns what ranking the complete program set would).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from p2smt.cost.bound import TIE_TOLERANCE, CostBound, RankedProgram
from p2smt.cost.rank import check_request
from p2smt.cost.rank import sort_key as rank_key
from p2smt.errors import P2Error
from p2smt.model.hierarchy import HierarchyKind, MasterScope, SynthesisHierarchy, synthesis_hierarchy
from p2smt.model.placement import Matrix
from p2smt.model.status import SolveStatus
from p2smt.model.system import System, load_system
from p2smt.synth.config import MAX_LEN_LIMIT
from p2smt.synth.driver import CERTIFY_LIMIT, placements_for

__all__ = ["BOUNDS", "METHODS", "TIE_TOLERANCE", "BestResult", "MatrixBest", "RankedProgram", "best", "best_on_hierarchy"]

BOUNDS = ("clauses", "sum")
METHODS = ("z3", "search")
"""``z3``: the bound strategy of ``cost.bound`` (proved by Z3); ``search``: the branch and bound of
``cost.branch`` on the bitmatrix state (exhaustive, no solver; up to ``branch.MAX_DEVICES``)."""


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

    def to_json(self) -> dict[str, Any]:
        return {
            "matrix": [list(r) for r in self.matrix],
            "synthesis_hierarchy": [[n, s] for n, s in self.hierarchy.levels],
            "programs": [p.to_json() for p in self.programs],
            "status": self.status,
            "stats": {**{"search_seconds" if k == "seconds" else k: v for k, v in self.stats.items()},
                      "seconds": round(self.seconds, 6)},
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
            "bytes_per_device": self.bytes_per_device,
            "algo": self.algo,
            "max_len": self.max_len,
            "top": self.top,
            "matrices": [m.to_json() for m in self.matrices],
            "best": None if best is None else {"matrix": [list(r) for r in best[0].matrix], **best[1].to_json()},
            "stats": {"seconds": round(self.seconds, 6)},
        }


def _check_options(max_len: int, timeout_ms: int | None, bound: str, method: str = "z3") -> None:
    if not 1 <= max_len <= MAX_LEN_LIMIT:
        raise P2Error(f"--max-len must be between 1 and {MAX_LEN_LIMIT}, got {max_len}")
    if timeout_ms is not None and timeout_ms <= 0:
        raise P2Error(f"--timeout must be positive, got {timeout_ms} ms")
    if bound not in BOUNDS:
        raise P2Error(f"unknown bound {bound!r}; choose one of {', '.join(BOUNDS)}")
    if method not in METHODS:
        raise P2Error(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")


def best_on_hierarchy(system: System, h: SynthesisHierarchy, *, max_len: int = 8, top: int = 1, algo: str = "ring",
                      bytes_per_device: float | None = None, timeout_ms: int | None = None,
                      encoding: str = "bool-matrix", encoding_options: dict[str, Any] | None = None,
                      require_progress: bool = True, bound: str = "clauses", matrix: Matrix = (),
                      lookahead: bool = True, method: str = "z3") -> MatrixBest:
    """The ``top`` cheapest valid programs of at most ``max_len`` steps on one synthesis hierarchy."""
    b = check_request(system, algo, bytes_per_device, top)
    _check_options(max_len, timeout_ms, bound, method)
    start = time.perf_counter()
    if method == "search":
        from p2smt.cost.branch import BranchAndBound

        ranked, stats = BranchAndBound(system, h, algo=algo, bytes_per_device=b, max_len=max_len, top=top,
                                       require_progress=require_progress).run()
        status = SolveStatus.OPTIMAL if ranked else SolveStatus.INFEASIBLE
        return MatrixBest(matrix, h, tuple(ranked), status, time.perf_counter() - start, stats)
    if h.num_devices > CERTIFY_LIMIT:  # the Z3 encodings' limit, as for the z3 and certified engines
        raise P2Error(f"{h.num_devices:,} devices: more than the Z3 encodings take on ({CERTIFY_LIMIT}); use "
                      "--method search (the exact branch and bound, no solver)")
    search = CostBound(system, h, algo=algo, bytes_per_device=b, max_len=max_len, top=top, timeout_ms=timeout_ms,
                     encoding=encoding, options=encoding_options, require_progress=require_progress, bound=bound,
                     lookahead=lookahead)
    status, ranked, stats = search.run()
    return MatrixBest(matrix, h, tuple(ranked), status, time.perf_counter() - start, stats)


def best(system: System | str, axes: Sequence[int], reduction_axes: Sequence[int], *, matrix: Matrix | None = None,
         max_len: int = 8, top: int = 1, algo: str = "ring", bytes_per_device: float | None = None,
         timeout_ms: int | None = None, encoding: str = "bool-matrix",
         encoding_options: dict[str, Any] | None = None, hierarchy_kind: HierarchyKind = "d",
         master_scope: MasterScope = "per-ancestor", require_progress: bool = True,
         bound: str = "clauses", lookahead: bool = True, method: str = "z3",
         report: Callable[[MatrixBest], None] | None = None) -> BestResult:
    """The ``top`` cheapest programs per placement (or one ``matrix``) and overall, proved with Z3.

    Same order, ties and seconds as ``rank.rank_result`` over the complete program set up to
    ``max_len``; ``timeout_ms`` bounds each solver call (a placement whose call gives up is "unknown").
    ``method="search"`` finds the same list by ``cost.branch``'s branch and bound instead of Z3.
    ``report`` receives each placement's result as it is finished (progress, partial results).
    ``system``: a System or a shipped system's name (``p2smt topologies``) or system file.

    >>> best("v100-2x8", (16,), (0,), max_len=3, method="search").best[1].text
    '(node, InsideGroup, ReduceScatter); (node, Parallel(root), AllReduce); (node, InsideGroup, AllGather)'
    """
    system = load_system(system)
    b = check_request(system, algo, bytes_per_device, top)
    _check_options(max_len, timeout_ms, bound, method)
    start = time.perf_counter()
    placements = placements_for(system, tuple(axes), matrix)
    red = placements[0].check_axes(tuple(reduction_axes))
    results = []
    for placement in placements:
        h = synthesis_hierarchy(placement, red, system.level_names, hierarchy_kind, master_scope)
        results.append(best_on_hierarchy(system, h, max_len=max_len, top=top, algo=algo, bytes_per_device=b,
                                         timeout_ms=timeout_ms, encoding=encoding,
                                         encoding_options=encoding_options, require_progress=require_progress,
                                         bound=bound, matrix=placement.matrix, lookahead=lookahead,
                                         method=method))
        if report is not None:
            report(results[-1])
    return BestResult(system.name, tuple(axes), tuple(red), algo, float(b), max_len, top, tuple(results),
                      time.perf_counter() - start)
