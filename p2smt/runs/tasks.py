"""Sweep tasks: a grid expanded in a fixed order, each task keyed, and the one sweep-row computation.

A task is one (system, nodes, axes, reduction, algorithm, message size) with the grid's engine settings
and goal; it builds the typed ``Request`` and ``EngineConfig`` it runs with. Its key is the sha256 of its canonical
JSON together with p2smt's version.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

from p2smt import __version__
from p2smt.errors import P2Error
from p2smt.model.goal import ALLREDUCE, Goal
from p2smt.model.request import Request
from p2smt.runs.gridfile import Grid
from p2smt.smt.budget import DEFAULT_PROOF_BUDGET
from p2smt.synth.config import EngineConfig

STATUSES = ("ok", "conjectured", "unknown", "timeout", "error", "skipped")
"""Statuses of a result line: synthesis complete / every program valid but completeness not proved (the
``symmetric`` engine, ``representative`` above its certified size) / engine gave up / killed at the hard
limit / failed (message in ``error``) / not runnable on that system (reason in ``reason``)."""
FAILURES = ("error", "lost")
"""Statuses that make a sweep unsuccessful ("lost": the task's execution failed outside the task)."""
BEATS = 1 - 1e-3
"""A program beats AllReduce when its predicted time is at least 0.1 % below AllReduce's. Closer times are
ties of the model, not wins: a flat ReduceScatter then AllGather over AllReduce's own ring is NCCL's ring
AllReduce taken apart, and the model prices it up to 0.005 % under it on P²'s sizes."""


@dataclass(frozen=True)
class Task:
    """One unit of a sweep. ``axes`` are resolved (an unresolvable "auto" stays "auto"); ``nodes`` is the
    concrete node count; ``bytes`` is bytes per device or "default". ``skip`` (not part of the key) is the
    reason the task cannot run on its system, or None."""

    system: str
    nodes: int
    axes: tuple[int | str, ...]
    reduce: tuple[int, ...]
    algo: str
    bytes: float | str
    engine: str
    encoding: str | None
    max_len: int
    timeout_s: float
    proof_budget: int = DEFAULT_PROOF_BUDGET  # the certified engine's Z3 work per placement (millions of units)
    goal: Goal = ALLREDUCE  # what every device ends with (docs/semantics.md §6), bound to ``reduce``
    skip: str | None = field(default=None, compare=False)
    proof_store: str | None = field(default=None, compare=False)  # where proofs are shared; no part of the key

    def request(self) -> Request:
        """The synthesis request (every placement of the axes on the resized system)."""
        return Request(self.system, self.axes, self.reduce, nodes=self.nodes, goal=self.goal)

    def engine_config(self) -> EngineConfig:
        """The engine configuration: the solver gets ``timeout_s`` before the hard limit kills it."""
        return EngineConfig(engine=self.engine, max_len=self.max_len,
                            timeout_ms=max(1, int(self.timeout_s * 1000)), encoding=self.encoding,
                            proof_budget=self.proof_budget,
                            proof_store=self.proof_store)

    @property
    def bytes_per_device(self) -> float | None:
        return None if self.bytes == "default" else float(self.bytes)

    def to_json(self) -> dict[str, Any]:
        """The canonical fields (everything but ``skip``); ``goal`` only when sharded, so an AllReduce task's JSON,
        and hence its key, is what it was before sweeps took a goal."""
        return {
            "system": self.system, "nodes": self.nodes, "axes": list(self.axes), "reduce": list(self.reduce),
            "algo": self.algo, "bytes": self.bytes, "engine": self.engine, "encoding": self.encoding,
            "max_len": self.max_len, "timeout_s": self.timeout_s, "proof_budget": self.proof_budget,
            **({"goal": self.goal.to_json()} if self.goal.sharded else {}),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], skip: str | None = None) -> Task:
        goal = data.get("goal")
        return cls(
            system=data["system"], nodes=int(data["nodes"]), axes=tuple(data["axes"]),
            reduce=tuple(data["reduce"]), algo=data["algo"], bytes=data["bytes"], engine=data["engine"],
            encoding=data.get("encoding"), max_len=int(data["max_len"]), timeout_s=float(data["timeout_s"]),
            proof_budget=int(data.get("proof_budget", DEFAULT_PROOF_BUDGET)),
            goal=ALLREDUCE if goal is None else Goal.of(goal["kind"], goal["shard_axes"], data["reduce"]), skip=skip,
            proof_store=data.get("proof_store"),
        )

    def payload(self) -> dict[str, Any]:
        """What a task's child process receives: the canonical fields and the proof store, if any."""
        return self.to_json() | ({"proof_store": self.proof_store} if self.proof_store else {})


def task_key(task: Task) -> str:
    """sha256 (hex) of the task's canonical JSON together with p2smt's version."""
    text = json.dumps({"p2smt": __version__, "task": task.to_json()}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _resolve_axes(spec: tuple[int | str, ...], devices: int) -> tuple[tuple[int | str, ...], str | None]:
    fixed = math.prod(a for a in spec if a != "auto")
    if "auto" in spec:
        if devices % fixed:
            return spec, (f"the other axes (product {fixed}) do not divide the {devices} devices, "
                          f"so 'auto' has no size")
        spec = tuple(devices // fixed if a == "auto" else a for a in spec)
    if math.prod(spec) != devices:
        return spec, f"axes {list(spec)} (product {math.prod(spec)}) do not factor onto {devices} devices"
    return spec, None


def expand(grid: Grid) -> list[Task]:
    """All tasks of a grid, deterministically: block by block; in each, for each system (file order), each
    node count (the system's own if ``nodes`` is absent), each axes entry, each reduction, each algorithm,
    each message size. Combinations that cannot run (axes that do not factor, reduction axes out of
    range) are tasks with ``skip`` set; duplicates (same key) keep their first occurrence."""
    from p2smt.model.system import load_system

    tasks: list[Task] = []
    seen: set[str] = set()
    for block in grid.blocks:
        for name in block.systems:
            base = load_system(name)
            own = dict(zip(base.level_names, base.sizes, strict=True))[base.nodes_level]
            for nodes in block.nodes or (own,):
                system = base.with_nodes(nodes)
                where = f"{system.name} with {nodes} {system.nodes_level}s ({system.num_devices} devices)"
                for spec in block.axes:
                    axes, axes_skip = _resolve_axes(tuple(spec), system.num_devices)
                    for red in block.reductions:
                        skip = f"{where}: {axes_skip}" if axes_skip else None
                        bad = [r for r in red if r >= len(axes)]
                        if skip is None and bad:
                            skip = (f"reduction axis {bad[0]} is out of range for axes {list(axes)} "
                                    f"(0..{len(axes) - 1})")
                        for algo in block.algorithms:
                            for b in block.bytes:
                                task = Task(
                                    system=name, nodes=nodes, axes=axes, reduce=tuple(red), algo=algo,
                                    bytes=b if b == "default" else float(b), engine=grid.engine,
                                    encoding=grid.encoding, max_len=grid.max_len,
                                    timeout_s=float(grid.timeout_s), proof_budget=grid.proof_budget,
                                    goal=grid.goal_of(tuple(red)), skip=skip,
                                )
                                key = task_key(task)
                                if key not in seen:
                                    seen.add(key)
                                    tasks.append(task)
    return tasks


# ------------------------------------------------------------------------------------ the sweep row


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def row(task: Task, status: str, seconds: float, **fields: Any) -> dict[str, Any]:
    """A result line: key, version, the task, its status and seconds, and ``fields``."""
    return {"key": task_key(task), "p2smt": __version__, "task": task.to_json(), "status": status,
            "seconds": round(seconds, 6), **fields}


def ranked_fields(result, report: dict[str, Any]) -> dict[str, Any]:
    """The figures of a sweep row from a synthesis result and its rank report (all programs ranked).

    Per matrix: programs, how many beat AllReduce, AllReduce's time, the best program, its time and the
    speedup AllReduce / best; under a ReduceScatter or AllGather goal also the flat collective, its time and how
    many programs beat it. Overall: the best program (with its own matrix's AllReduce and speedup), the best
    placement's AllReduce time and ``speedup`` = that time / the best program's time (the goal is the task's).
    """
    per_matrix = []
    for m, ranked in zip(result.matrices, report["matrices"], strict=True):
        ar = ranked["allreduce_seconds"]
        progs = ranked["programs"]
        top = progs[0] if progs else None
        per_matrix.append({
            "matrix": ranked["matrix"], "status": m.status, "programs": len(m.programs),
            "certified": m.stats.get("certified"),
            "synthesis_seconds": round(m.seconds, 6), "allreduce_seconds": _finite(ar),
            "faster_than_allreduce": sum(1 for p in progs if p["seconds"] < ar * BEATS),
            "best_program": top["program"] if top else None,
            "best_seconds": _finite(top["seconds"]) if top else None,
            "speedup": _finite(ar / top["seconds"]) if top and top["seconds"] > 0 else None,
            **({"flat_collective": ranked["flat_collective"], "flat_seconds": _finite(ranked["flat_seconds"]),
                "faster_than_flat": sum(1 for p in progs if p["seconds"] < ranked["flat_seconds"] * BEATS)}
               if "flat_seconds" in ranked else {}),
        })
    best = report["best"]
    allreduce = min((m["allreduce_seconds"] for m in per_matrix if m["allreduce_seconds"] is not None),
                    default=None)
    speedup = None
    if best is not None:
        own_ar = next(m["allreduce_seconds"] for m in per_matrix if m["matrix"] == best["matrix"])
        best = {"matrix": best["matrix"], "program": best["program"], "seconds": _finite(best["seconds"]),
                "allreduce_seconds": own_ar,
                "speedup": _finite(own_ar / best["seconds"]) if own_ar and best["seconds"] > 0 else None}
        speedup = _finite(allreduce / best["seconds"]) if allreduce and best["seconds"] else None
    return {"bytes_per_device": report["bytes_per_device"], "matrices": len(result.matrices),
            "programs": result.total_programs, "certified": result.certified, "per_matrix": per_matrix, "best": best,
            "allreduce_seconds": allreduce, "speedup": speedup}


def evaluate(task: Task) -> dict[str, Any]:
    """Run one task in this process (no time limit): synthesize, rank, summarize as a result line."""
    if task.skip:
        return row(task, "skipped", 0.0, reason=task.skip)
    start = time.perf_counter()
    try:
        from p2smt.cost.rank import rank_result
        from p2smt.synth.driver import synthesize

        request = task.request()
        system = request.load_system()
        result = synthesize(Request.for_system(system, request.axes, request.reduce, goal=request.goal),
                            task.engine_config())
        report = rank_result(system, result, algo=task.algo, bytes_per_device=task.bytes_per_device)
    except P2Error as err:
        return row(task, "error", time.perf_counter() - start, error=str(err))
    except Exception as err:  # noqa: BLE001 - a task failure must become a result line, not a crash
        return row(task, "error", time.perf_counter() - start, error=f"{type(err).__name__}: {err}")
    status = {"complete": "ok", "conjectured": "conjectured"}.get(str(result.status), "unknown")
    return row(task, status, time.perf_counter() - start, **ranked_fields(result, report))


def evaluate_json(task: dict[str, Any]) -> dict[str, Any]:
    """``evaluate`` on a task's JSON form (the call a task's child process runs)."""
    return evaluate(Task.from_json(task))
