"""Ranking: every placement's synthesized programs ordered by predicted time, plus the overall best."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from p2smt.cost.model import (
    ALGOS,
    default_bytes_per_device,
    programs_seconds,
    step_time,
)
from p2smt.cost.volumes import held_fractions_of_programs, message_bytes
from p2smt.errors import P2Error
from p2smt.model.collectives import Collective
from p2smt.model.dsl import format_program, instruction_groups
from p2smt.model.goal import Goal, GoalKind
from p2smt.model.placement import Matrix, Placement
from p2smt.model.request import Request
from p2smt.model.system import System
from p2smt.model.topology import build_topology
from p2smt.synth.config import EngineConfig
from p2smt.synth.driver import SynthesisResult, synthesize

ALGO_SCOPE = {"tree": " for AllReduce steps, ring for the others",
              "nvls": (" for AllReduce steps within one NVSwitch domain, ring for the others (AllReduce across "
                       "domains included)")}
"""What a forced algorithm covers in a program: NCCL runs Tree and NVLS for AllReduce only, and NVLS only
over GPUs that share an NVSwitch (``cost --algo nvls`` refuses a collective it cannot run that way)."""


def sort_key(seconds: float, text: str) -> tuple[float, str]:
    """Sort key: time to 9 significant digits (so float noise never reorders), then the program text."""
    return (float(f"{seconds:.9g}"), text)


def allreduce_seconds(system: System, matrix: Matrix, axes: Sequence[int], reduction_axes: Sequence[int],
                      algo: str, bytes_per_device: float) -> float:
    """Predicted time of the default: one AllReduce over every reduction group of the placement."""
    groups = Placement(system.sizes, tuple(axes), matrix).reduction_groups(tuple(reduction_axes))
    topo = build_topology(system)
    return step_time(topo, Collective.ALL_REDUCE, groups, [float(bytes_per_device)] * len(groups), algo)


def flat_sharded_seconds(system: System, placement: Placement, reduction_axes: Sequence[int], goal: Goal, algo: str,
                         bytes_per_device: float) -> tuple[str, float] | None:
    """The flat collective of a ReduceScatter or AllGather goal (one step over every reduction group, members in
    rank order, docs/semantics.md §6) and its predicted time; None for the AllReduce and HSDP goals (whose flat
    baseline is the AllReduce, or no single collective)."""
    sharding = goal.sharding(placement)
    if sharding is None or tuple(goal.shard_axes) != tuple(sorted(reduction_axes)):
        return None
    groups = [tuple(sorted(g, key=sharding.rank.__getitem__)) for g in placement.reduction_groups(tuple(reduction_axes))]
    coll = Collective.REDUCE_SCATTER if goal.kind is GoalKind.REDUCE_SCATTER else Collective.ALL_GATHER
    held = float(bytes_per_device) if coll is Collective.REDUCE_SCATTER else float(bytes_per_device) / len(groups[0])
    sizes = [message_bytes(coll, [held] * len(g)) for g in groups]
    return coll.value, step_time(build_topology(system), coll, groups, sizes, algo)


def step_bytes(system: System, m, program, b: float, sharding) -> list[float]:
    """The message bytes of each step of a program (its largest group), from the holdings before the step."""
    fractions = held_fractions_of_programs(m.hierarchy, [program], checked=True, sharding=sharding)[program]
    out = []
    for ins, frac in zip(program.instructions, fractions):
        groups = instruction_groups(m.hierarchy, ins)
        out.append(max(message_bytes(ins.collective, [float(frac[d]) * b for d in g]) for g in groups))
    return out


def check_request(system: System, algo: str, bytes_per_device: float | None, top: int | None) -> float:
    if algo not in ALGOS:
        raise P2Error(f"unknown algorithm {algo!r}; choose one of {', '.join(ALGOS)}")
    if algo == "nvls":
        topo = build_topology(system)
        if topo.nvls_switch(tuple(range(min(2, topo.gpus_per_node)))) is None:
            raise P2Error(f"{system.name} has no NVLink SHARP switch: --algo nvls cannot run here; "
                          "use ring, tree or auto")
    if top is not None and top < 1:
        raise P2Error(f"--top must be at least 1, got {top}")
    b = default_bytes_per_device(system) if bytes_per_device is None else bytes_per_device
    if b <= 0:
        raise P2Error(f"--bytes must be positive, got {b}")
    return b


def rank_result(system: System, result: SynthesisResult, *, algo: str = "ring",
                bytes_per_device: float | None = None, top: int | None = None) -> dict[str, Any]:
    """Rank an existing synthesis result (see ``rank``); lets one synthesis serve several algorithms."""
    b = check_request(system, algo, bytes_per_device, top)
    matrices = []
    best = None
    goal = result.goal
    for m in result.matrices:
        placement = Placement(system.sizes, tuple(result.axes), m.matrix)
        bound = goal.sharding(placement)
        sharding = None if bound is None else bound.on_hierarchy(m.hierarchy)
        seconds = programs_seconds(system, m.hierarchy, m.programs, algo=algo, bytes_per_device=b, checked=True,
                                   sharding=sharding)
        scored = [(t, format_program(prog), prog) for t, prog in zip(seconds, m.programs)]
        scored.sort(key=lambda st: sort_key(*st[:2]))
        matrix = [list(r) for r in m.matrix]
        flat = flat_sharded_seconds(system, placement, result.reduction_axes, goal, algo, b) if goal.sharded else None
        matrices.append({
            "matrix": matrix,
            "allreduce_seconds": allreduce_seconds(system, m.matrix, result.axes, result.reduction_axes, algo, b),
            **({"flat_collective": flat[0], "flat_seconds": flat[1]} if flat else {}),
            "status": m.status,
            **({"rests_on": m.stats["rests_on"]} if "rests_on" in m.stats else {}),
            "programs": [{"program": text, "seconds": s,
                          **({"step_bytes": step_bytes(system, m, prog, b, sharding)} if goal.sharded else {})}
                         for s, text, prog in scored[:top]],
        })
        scored = [st[:2] for st in scored]
        if scored and (best is None or sort_key(*scored[0]) + (matrix,) < sort_key(best[0], best[1]) + (best[2],)):
            best = (scored[0][0], scored[0][1], matrix)
    return {
        "bytes_per_device": b,
        "algo": algo,
        **({"goal": goal.to_json()} if goal.sharded else {}),  # the AllReduce goal's report unchanged
        "engine": result.engine,
        "status": result.status,
        **({"certified": result.certified, "certification": result.certification()}
           if result.certified is not None else {}),
        "stats": {"synthesis_seconds": round(result.seconds, 6), "proof_seconds": round(result.proof_seconds, 6)},
        "matrices": matrices,
        "best": None if best is None else {"matrix": best[2], "program": best[1], "seconds": best[0]},
    }


def rank(request: Request, config: EngineConfig | None = None, *, algo: str = "ring",
         bytes_per_device: float | None = None, top: int | None = None) -> dict[str, Any]:
    """Synthesize every placement's programs and rank them by predicted time.

    Returns ``{"bytes_per_device", "algo", "engine", "status", "certified", "certification", "stats":
    {"synthesis_seconds", "proof_seconds"}, "matrices": [{"matrix", "allreduce_seconds", "status", "rests_on",
    "programs": [{"program", "seconds"}]}], "best": {"matrix", "program", "seconds"}}``; programs are
    sorted by predicted seconds, ties by program text;
    ``top`` keeps the first N per matrix. The default engine is ``certified``: Z3 proves every placement's set
    valid and complete (``certified``/``certification`` are there only under that engine).
    """
    system = request.load_system()
    check_request(system, algo, bytes_per_device, top)
    result = synthesize(Request.for_system(system, request.axes, request.reduce, matrix=request.matrix,
                                           hierarchy=request.hierarchy, master_scope=request.master_scope,
                                           require_progress=request.require_progress, goal=request.goal),
                        config or EngineConfig())
    return rank_result(system, result, algo=algo, bytes_per_device=bytes_per_device, top=top)


def flagged(words: str) -> str:
    """Proof words for a rich console: a missing proof ("NOT certified") in yellow."""
    return words.replace("NOT certified", "[yellow]NOT certified[/yellow]", 1)


def render_rank(report: dict[str, Any]):
    """Rich tables for a rank report: one table per matrix (rank, seconds, speedup over AllReduce)."""
    from rich.console import Group as RichGroup
    from rich.table import Table

    tables = []
    for m in report["matrices"]:
        flat = f"  flat {m['flat_collective']} {m['flat_seconds']:.6g} s" if "flat_seconds" in m else ""
        t = Table(title=f"matrix {m['matrix']}  AllReduce {m['allreduce_seconds']:.6g} s{flat}", show_lines=False)
        t.add_column("#", justify="right")
        t.add_column("seconds", justify="right")
        t.add_column("vs AllReduce", justify="right")
        if flat:
            t.add_column(f"vs {m['flat_collective']}", justify="right")
        t.add_column("program")
        for i, p in enumerate(m["programs"], 1):
            vs = [f"{m['flat_seconds'] / p['seconds']:.3f}x"] if flat else []
            text = p["program"] + (f"  [dim](MB per step: {', '.join(f'{v / 1e6:.4g}' for v in p['step_bytes'])})[/dim]"
                                   if "step_bytes" in p else "")
            t.add_row(str(i), f"{p['seconds']:.6g}", f"{m['allreduce_seconds'] / p['seconds']:.3f}x", *vs, text)
        tables.append(t)
    best = report.get("best")
    if best:
        scope = ALGO_SCOPE.get(report["algo"], "")
        t = Table(title=f"best ({report['algo']}{scope}, {report['bytes_per_device']} bytes per device)")
        t.add_column("matrix")
        t.add_column("seconds", justify="right")
        t.add_column("program")
        t.add_row(str(best["matrix"]), f"{best['seconds']:.6g}", best["program"])
        tables.append(t)
    if report.get("certification"):
        words = report["certification"]
        if report.get("certified"):
            words += f"; the proofs took {report['stats']['proof_seconds']:.3f} s"
        tables.append(flagged(words))
    return RichGroup(*tables)


def explicit_plan_seconds(system: System, plan, blocks: int, bytes_per_device: float, algo: str = "ring",
                          sharding=None) -> float:
    """Predicted time of an explicit plan: each step priced with the bytes every device holds before it,
    replayed on XLA/NCCL buffer positions (a device's share is its non-empty blocks out of ``blocks``; under the
    AllGather ``sharding`` each device starts with its shard)."""
    from p2smt.cost.model import plan_time
    from p2smt.semantics.positions import apply_group, initial_buffers

    topo = build_topology(system)
    buffers = initial_buffers(topo.num_devices, blocks, sharding)
    volumes = []
    for t, step in enumerate(plan, start=1):
        volumes.append({d: bytes_per_device * sum(c is not None for c in buf) / blocks
                        for d, buf in enumerate(buffers)})
        new = list(buffers)
        for group in step.groups:
            out = apply_group(t, step.collective, tuple(group), [buffers[d] for d in group])
            if not isinstance(out, list):
                raise P2Error(f"step {t}: {out.message}")
            for d, b in zip(group, out):
                new[d] = b
        buffers = new
    return sum(plan_time(topo, plan, volumes, algo))
