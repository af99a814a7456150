"""The chain half of the audit: each chain of collectives proved against its own reduction groups, priced,
and compared with the cheapest program for the same groups and bytes on the mesh's placement.

A chain's intent is what its collectives reduce over together: the devices its groups connect. Its goal is
P²'s (every device of a group ends with the group's whole sum), proved with Z3 and re-checked by the
interpreter; a chain that ends sharded (a reduce-scatter left standing, an all-gather of parameters) has a
sharded goal that p2smt does not prove yet, and says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from p2smt.auditing.meshaxes import Mesh, axes_of_groups
from p2smt.errors import InternalError, P2Error
from p2smt.frontend.hlo import hlo_plan
from p2smt.frontend.hlo_program import HloProgram
from p2smt.frontend.reading import ModuleReading, ReadCollective
from p2smt.model.collectives import Collective, ExplicitPlan, Group
from p2smt.model.placement import Placement
from p2smt.model.system import System

__all__ = ["ChainAudit", "ChainVerdict", "audit_chains", "mesh_placement"]

_NAMES = {Collective.ALL_REDUCE: "all-reduce", Collective.REDUCE_SCATTER: "reduce-scatter",
          Collective.ALL_GATHER: "all-gather"}


class ChainVerdict(str, Enum):
    """A chain's verdict against its own reduction groups."""

    PROVED = "proved"
    COUNTEREXAMPLE = "counterexample"
    SHARDED_GOAL = "sharded reduction: goal not supported yet"
    UNSUPPORTED = "not in p2smt's model"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class ChainAudit:
    """One chain (``count`` identical chains: a pytree's leaves) with its verdict, price and best program."""

    index: int
    lines: tuple[int, ...]
    steps: tuple[str, ...]
    axes: tuple[str, ...] | None
    groups: tuple[Group, ...]
    bytes: int
    count: int
    runs: str
    verdict: ChainVerdict
    message: str
    rests_on: str
    seconds: float | None
    best_program: str | None = None
    best_seconds: float | None = None
    best_note: str = ""
    plan: ExplicitPlan = ()

    @property
    def per_step(self) -> int:
        """How many times a step runs this chain, for totals (a loop's trip count; 1 where unknown)."""
        return int(self.runs.split()[0]) if self.runs.endswith("times") else 1

    @property
    def speedup(self) -> float | None:
        if self.seconds is None or not self.best_seconds:
            return None
        return self.seconds / self.best_seconds

    def to_json(self) -> dict[str, Any]:
        return {"chain": self.index, "lines": list(self.lines), "steps": list(self.steps),
                "axes": list(self.axes) if self.axes is not None else None,
                "groups": [list(g) for g in self.groups], "bytes_per_device": self.bytes, "count": self.count,
                "runs_per_step": self.runs, "verdict": self.verdict.value, "message": self.message,
                "rests_on": self.rests_on, "seconds": self.seconds, "best_program": self.best_program,
                "best_seconds": self.best_seconds, "speedup": self.speedup, "best_note": self.best_note}


def mesh_placement(system: System, mesh: Mesh, device_order: Sequence[int]) -> Placement | None:
    """The placement whose JAX mesh is ``mesh`` on ``system`` (XLA device i is system device
    ``device_order[i]``), or None when the mesh is no placement of P²'s (its axes do not follow the levels)."""
    from p2smt.model.request import Request

    sizes = tuple(s for _, s in mesh.axes)
    physical = tuple(device_order[i] for i in mesh.device_ids)
    try:
        candidates = Request.for_system(system, sizes, (0,)).placements(system)
    except P2Error:
        return None
    return next((p for p in candidates if tuple(p.mesh_order()) == physical), None)


def _sharded_end(kinds: Sequence[Collective]) -> bool:
    """Whether a chain leaves its buffer sharded, or starts from shards (its goal is not P²'s)."""
    depth = 0
    for k in kinds:
        if k is Collective.REDUCE_SCATTER:
            depth += 1
        elif k is Collective.ALL_GATHER:
            depth -= 1
            if depth < 0:
                return True
    return depth != 0


def _prove(n: int, plan: ExplicitPlan, goal: tuple[Group, ...]) -> tuple[ChainVerdict, str, str]:
    """Z3's proof of the chain against its goal, checked against the interpreter (positions included)."""
    from p2smt.semantics.positions import execute_positions
    from p2smt.semantics.verdict import judge
    from p2smt.smt.verify import prove_plan

    steps = [(s.collective, s.groups) for s in plan]
    chunks = len(goal[0])
    verdict = judge(n, steps, goal, chunks, False, layout=False)
    proof = prove_plan(n, steps, goal, chunks=chunks)
    if proof.status == "unknown":
        return ChainVerdict.UNKNOWN, "the solver gave up", "Z3 (unknown)"
    if (proof.status == "proved") != verdict.execution.valid:
        raise InternalError(f"Z3 says {proof.status} but the interpreter says "
                            f"{'valid' if verdict.execution.valid else 'invalid'}")
    if proof.status != "proved":
        v = proof.violation
        return ChainVerdict.COUNTEREXAMPLE, v.message if v is not None else "the goal does not hold", \
            "Z3 counterexample, confirmed by the interpreter"
    layout = execute_positions(n, steps, goal, chunks)
    if not layout.valid:
        return ChainVerdict.COUNTEREXAMPLE, layout.counterexample().get("message", "blocks out of place"), \
            "positions interpreter"
    return ChainVerdict.PROVED, "every device ends with its group's whole sum", \
        "Z3 proof, re-checked by the interpreter"


def _step_text(c: ReadCollective, mesh: Mesh | None) -> str:
    axes = axes_of_groups(mesh, c.groups, ordered=c.collective is not Collective.ALL_REDUCE) if mesh else None
    over = "+".join(axes) if axes else f"{len(c.groups)} groups of {len(c.groups[0]) if c.groups else 0}"
    return f"{_NAMES[c.collective]}({over})"


def audit_chains(reading: ModuleReading, system: System, device_order: Sequence[int], mesh: Mesh | None, *,
                 algo: str = "auto", best_len: int = 6) -> list[ChainAudit]:
    """Every chain of ``reading`` (identical chains merged), proved, priced and compared with the best."""
    from p2smt.cost.rank import explicit_plan_seconds
    from p2smt.lower.target import connected_groups

    n = system.num_devices
    placement = mesh_placement(system, mesh, device_order) if mesh is not None else None
    xla_id = {d: i for i, d in enumerate(device_order)}
    merged: dict[tuple, list] = {}
    for chain in reading.chains:
        cs = [reading.collectives[i] for i in chain.steps]
        key = tuple((c.collective, c.groups, c.mode, c.dimension) for c in cs) + (cs[0].bytes,)
        key += (chain.runs,)
        merged.setdefault(key, [chain, cs, 0])[2] += 1
    out: list[ChainAudit] = []
    best_cache: dict[tuple, tuple[str | None, float | None, str]] = {}
    for index, (chain, cs, count) in enumerate(merged.values()):
        kinds = [c.collective for c in cs]
        lines = tuple(c.line for c in cs)
        steps = tuple(_step_text(c, mesh) for c in cs)
        runs = "once" if chain.runs == 1 else "unknown" if chain.runs is None else f"{chain.runs} times"
        program = HloProgram(reading.name, reading.dialect, reading.space, tuple(cs))
        try:
            plan = hlo_plan(program, n, device_order)
        except P2Error as err:  # a chain p2smt's model does not take (steps along two dimensions)
            out.append(ChainAudit(index, lines, steps, None, (), cs[0].bytes, count, runs,
                                  ChainVerdict.UNSUPPORTED, str(err), "not proved", None))
            continue
        groups = connected_groups(plan, n)
        axes = axes_of_groups(mesh, [tuple(sorted(xla_id[d] for d in g)) for g in groups],
                              ordered=False) if mesh is not None else None
        common = {"index": index, "lines": lines, "steps": steps, "axes": axes, "groups": groups,
                  "bytes": cs[0].bytes, "count": count, "runs": runs}
        if len({len(g) for g in groups}) != 1 or _sharded_end(kinds):
            why = ("its groups differ in size" if len({len(g) for g in groups}) != 1 else
                   "it ends sharded (or starts from shards): its goal is a sharded result")
            out.append(ChainAudit(**common, verdict=ChainVerdict.SHARDED_GOAL, message=why,
                                  rests_on="not proved", seconds=None, plan=plan))
            continue
        verdict, message, rests = _prove(n, plan, groups)
        seconds, best_program, best_seconds, note = None, None, None, ""
        if verdict is ChainVerdict.PROVED:
            seconds = explicit_plan_seconds(system, plan, len(groups[0]), float(max(cs[0].bytes, 1)), algo)
            best_program, best_seconds, note = _best(system, placement, mesh, axes, max(cs[0].bytes, 1), algo,
                                                     best_len, best_cache)
        out.append(ChainAudit(**common, verdict=verdict, message=message, rests_on=rests, seconds=seconds,
                              best_program=best_program, best_seconds=best_seconds, best_note=note, plan=plan))
    return out


def _best(system: System, placement: Placement | None, mesh: Mesh | None, axes: tuple[str, ...] | None,
          nbytes: int, algo: str, max_len: int, cache: dict) -> tuple[str | None, float | None, str]:
    """The cheapest program for the chain's axes on the mesh's placement (exact branch and bound, its optimality
    proved as ``best`` proves it)."""
    if placement is None:
        return None, None, ("the module declares no mesh" if mesh is None else
                            "the mesh is no placement of the system's levels (see --device-order)")
    if not axes:
        return None, None, "its groups are no union of mesh axes"
    key = (axes, nbytes)
    if key not in cache:
        from p2smt.cost.best import best

        red = tuple(sorted(mesh.names.index(a) for a in axes))
        result = best(system, placement.axes, red, matrix=placement.matrix, max_len=max_len, algo=algo,
                      bytes_per_device=float(nbytes), method="search")
        found = result.best
        if found is None:
            cache[key] = (None, None, f"no program up to length {max_len}")
        else:
            certified = result.status == "optimal" and all(m.stats.get("proof", {}).get("certified")
                                                             for m in result.matrices)
            cache[key] = (found[1].text, found[1].seconds, "exact branch-and-bound search, each program re-checked"
                          + (", optimality certified by a state-graph certificate" if certified else
                             "; optimality not certified: " + result.matrices[0].stats.get("rests_on", "")))
    return cache[key]
