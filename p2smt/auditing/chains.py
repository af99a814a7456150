"""The chain half of the audit: each chain of collectives proved against its own reduction groups, priced,
and compared with the cheapest program for the same groups and bytes on the mesh's placement.

A chain's intent is what its collectives reduce over together: the devices its groups connect. Its goal is
P²'s (every device of a group ends with the group's whole sum), or, for a chain that ends sharded (a
reduce-scatter left standing, HSDP) or gathers shards (FSDP's all-gathers), the sharded goal its collectives
state under JAX's tiled semantics (docs/semantics.md §6); either is proved with Z3 and re-checked by the
interpreters, positions included. A chain whose shards no goal of p2smt's describes says why.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from p2smt.auditing.meshaxes import Mesh, axes_of_groups
from p2smt.errors import P2Error
from p2smt.frontend.hlo import hlo_plan
from p2smt.frontend.hlo_program import HloProgram
from p2smt.frontend.reading import ModuleReading, ReadCollective
from p2smt.model.collectives import Collective, ExplicitPlan, Group
from p2smt.model.goal import GoalKind, Sharding
from p2smt.model.placement import Placement
from p2smt.model.system import System

__all__ = ["ChainAudit", "ChainVerdict", "ShardedGoal", "audit_chains", "mesh_placement", "read_goal"]

_NAMES = {Collective.ALL_REDUCE: "all-reduce", Collective.REDUCE_SCATTER: "reduce-scatter",
          Collective.ALL_GATHER: "all-gather"}


class ChainVerdict(str, Enum):
    """A chain's verdict against its own reduction groups."""

    PROVED = "proved"
    COUNTEREXAMPLE = "counterexample"
    SHARDED_GOAL = "sharded goal: not one p2smt states"
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
    goal: str = "allreduce"

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
                "best_seconds": self.best_seconds, "speedup": self.speedup, "best_note": self.best_note,
                **({"goal": self.goal} if self.goal != "allreduce" else {})}


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


@dataclass(frozen=True)
class ShardedGoal:
    """A chain's sharded goal as JAX's tiled collectives leave it: the kind, the shard axes T (major first) and
    each system device's shard (its row-major mesh coordinates over T, in T's order)."""

    kind: GoalKind
    axes: tuple[str, ...]
    sharding: Sharding

    def describe(self) -> str:
        """``reduce-scatter over (node, gpu), shard = rank in that order``."""
        return f"{self.kind.value} over ({', '.join(self.axes)}), shard = rank in that order"


def read_goal(cs: Sequence[ReadCollective], mesh: Mesh | None, xla_id: dict[int, int],
              axes: tuple[str, ...] | None) -> ShardedGoal | str | None:
    """The chain's goal: None for P²'s (the chain ends unsharded), a ShardedGoal, or why it is neither.

    A reduce-scatter over ordered mesh axes A shards the result further (A appended to the shard axes, major
    first); an all-gather over A undoes the last such scatter (A must end the shard axes); an all-reduce keeps
    them. A chain of all-gathers alone starts from shards: the last gather's axes are the major ones."""
    kinds = [c.collective for c in cs]
    if Collective.REDUCE_SCATTER not in kinds and Collective.ALL_GATHER not in kinds:
        return None
    if mesh is None:
        return "its result is sharded and the module declares no mesh to name the shards by"
    gathers = all(k is Collective.ALL_GATHER for k in kinds)
    stack: list[str] = []
    for t, c in enumerate(cs, start=1):
        if c.collective is Collective.ALL_REDUCE:
            continue
        over = axes_of_groups(mesh, c.groups, ordered=True)
        if over is None:
            return f"step {t}'s {_NAMES[c.collective]} groups are no mesh axes in order: its shards have no mesh order"
        if not over:  # over axes of one device: no step
            continue
        if c.collective is Collective.REDUCE_SCATTER:
            stack.extend(over)
        elif gathers:
            stack[:0] = over
        elif not stack:
            return (f"step {t} gathers shards over ({', '.join(over)}) that no reduce-scatter of the chain made: it "
                    "starts from shards and also reduces, a goal p2smt does not state")
        elif tuple(stack[-len(over):]) != over:
            return (f"step {t} gathers over ({', '.join(over)}) but the chain's shards are over "
                    f"({', '.join(stack)}), major first: a gather of these is not a goal p2smt states")
        else:
            del stack[-len(over):]
    if not stack:
        return None
    if len(set(stack)) != len(stack):
        return f"it shards twice over one mesh axis ({', '.join(stack)}): not a goal p2smt states"
    if axes is None or not set(stack) <= set(axes):
        return "its groups are no union of mesh axes holding its shard axes"
    sizes = dict(mesh.axes)
    coords = mesh.coordinates()
    if set(coords) != set(xla_id.values()):
        return "the mesh does not hold every device once"
    rank = [0] * len(xla_id)
    for d, x in xla_id.items():
        for a in stack:
            rank[d] = rank[d] * sizes[a] + coords[x][a]
    kind = GoalKind.ALL_GATHER if gathers else GoalKind.REDUCE_SCATTER
    return ShardedGoal(kind, tuple(stack), Sharding(kind, tuple(rank), math.prod(sizes[a] for a in stack)))


def _prove_sharded(n: int, plan: ExplicitPlan, groups: tuple[Group, ...],
                   goal: ShardedGoal) -> tuple[ChainVerdict, str, str]:
    """Z3's proof of the chain against the sharded goal read from it, worded by the interpreter and checked in
    XLA/NCCL buffer positions (a permuted shard order is a counterexample naming device, position and block)."""
    from p2smt.model.status import ProofStatus
    from p2smt.semantics.positions import execute_positions
    from p2smt.synth.sharded import prove_sharded, with_positions

    steps = [(s.collective, s.groups) for s in plan]
    k = len(groups[0])
    read = f"the goal read from the chain ({goal.describe()})"
    try:
        chunk_proof = prove_sharded(n, steps, groups, goal.sharding, chunks=k)
        proof = with_positions(chunk_proof, execute_positions(n, steps, groups, k, goal.sharding), len(steps))
    except P2Error as err:
        return ChainVerdict.SHARDED_GOAL, f"{read}: {err}", "not proved"
    if proof.status is ProofStatus.UNKNOWN:
        return ChainVerdict.UNKNOWN, "the solver gave up", f"Z3 (unknown) against {read}"
    if proof.status is not ProofStatus.PROVED:
        by = ("the XLA/NCCL positions interpreter (the chunk semantics, which Z3 proves, cannot see the order)"
              if chunk_proof.status is ProofStatus.PROVED else "Z3, confirmed by the interpreter")
        return ChainVerdict.COUNTEREXAMPLE, proof.message or "the goal does not hold", \
            f"counterexample against {read}: {by}"
    held = ("its shard of its group's sum" if goal.kind is GoalKind.REDUCE_SCATTER else
            "every shard of its group, in order")
    return ChainVerdict.PROVED, f"every device ends with {held} ({goal.describe()})", \
        f"Z3 proof against {read}, re-checked by the interpreter and in XLA/NCCL positions"


def _prove(n: int, plan: ExplicitPlan, goal: tuple[Group, ...]) -> tuple[ChainVerdict, str, str]:
    """Z3's proof of the chain against its goal, checked against the interpreter (positions included)."""
    from p2smt.semantics.positions import execute_positions
    from p2smt.semantics.verdict import judge
    from p2smt.smt.verify import prove_plan
    from p2smt.synth.agree import agree

    steps = [(s.collective, s.groups) for s in plan]
    chunks = len(goal[0])
    verdict = judge(n, steps, goal, chunks, False, layout=False)
    proof = agree(prove_plan(n, steps, goal, chunks=chunks), verdict)
    if proof.status == "unknown":
        return ChainVerdict.UNKNOWN, "the solver gave up", "Z3 (unknown)"
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
        goal = read_goal(cs, mesh, xla_id, axes)
        if len({len(g) for g in groups}) != 1 or isinstance(goal, str):
            why = "its groups differ in size" if len({len(g) for g in groups}) != 1 else goal
            out.append(ChainAudit(**common, verdict=ChainVerdict.SHARDED_GOAL, message=why,
                                  rests_on="not proved", seconds=None, plan=plan))
            continue
        k = len(groups[0])
        if goal is None:
            verdict, message, rests = _prove(n, plan, groups)
            nbytes, sharding = max(cs[0].bytes, 1), None
        else:
            verdict, message, rests = _prove_sharded(n, plan, groups, goal)
            # an all-gather chain reads a shard: its whole buffer is the last result (k shards of one block)
            nbytes = max(cs[0].bytes, 1) if goal.kind is GoalKind.REDUCE_SCATTER else \
                max(cs[-1].result_bytes, cs[0].bytes * k, 1)
            sharding = goal.sharding
        seconds, best_program, best_seconds, note = None, None, None, ""
        if verdict is ChainVerdict.PROVED:
            seconds = explicit_plan_seconds(system, plan, k, float(nbytes), algo, sharding)
            best_program, best_seconds, note = _best(system, placement, mesh, axes, nbytes, algo, best_len,
                                                     best_cache, goal)
        out.append(ChainAudit(**common, verdict=verdict, message=message, rests_on=rests, seconds=seconds,
                              best_program=best_program, best_seconds=best_seconds, best_note=note, plan=plan,
                              goal="allreduce" if goal is None else goal.describe()))
    return out


def _best(system: System, placement: Placement | None, mesh: Mesh | None, axes: tuple[str, ...] | None,
          nbytes: int, algo: str, max_len: int, cache: dict,
          goal: ShardedGoal | None = None) -> tuple[str | None, float | None, str]:
    """The cheapest program for the chain's axes (and sharded goal) on the mesh's placement (exact branch and
    bound, or the state-graph certificate for a sharded goal, its optimality proved as ``best`` proves it)."""
    if placement is None:
        return None, None, ("the module declares no mesh" if mesh is None else
                            "the mesh is no placement of the system's levels (see --device-order)")
    if not axes:
        return None, None, "its groups are no union of mesh axes"
    shard = () if goal is None else tuple(mesh.names.index(a) for a in goal.axes)
    if list(shard) != sorted(shard):
        return None, None, "best: not searched (shard order is not the mesh's)"
    key = (axes, nbytes, None if goal is None else goal.kind, shard)
    if key not in cache:
        from p2smt.cost.best import best
        from p2smt.model.request import Request

        red = tuple(sorted(mesh.names.index(a) for a in axes))
        sharded = {} if goal is None else {"goal": {"kind": goal.kind, "shard_axes": shard}}
        # a sharded goal over axes split over the same levels is searched over hierarchy (c) (§6)
        refused: P2Error | None = None
        for kind in ("d",) if goal is None else ("d", "c"):
            try:
                request = Request.for_system(system, placement.axes, red, matrix=placement.matrix, hierarchy=kind,
                                             **sharded)
                result = best(request, max_len=max_len, algo=algo, bytes_per_device=float(nbytes), method="search")
                break
            except P2Error as err:
                if goal is None:
                    raise
                refused = err
        else:
            cache[key] = (None, None, f"best: not searched ({refused})")
            return cache[key]
        found = result.best
        if found is None:
            cache[key] = (None, None, f"no program up to length {max_len}")
        else:
            certified = result.status == "optimal" and all(m.stats.get("proof", {}).get("certified")
                                                             for m in result.matrices)
            over = " over hierarchy (c)" if kind == "c" else ""
            cache[key] = (found[1].text, found[1].seconds, f"exact branch-and-bound search{over}, each program re-checked"
                          + (", optimality certified by a state-graph certificate" if certified else
                             "; optimality not certified: " + result.matrices[0].stats.get("rests_on", "")))
    return cache[key]
