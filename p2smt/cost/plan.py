"""Whole-model placement: the parallelism matrix that minimises all of a profile's communication together.

For every placement, each reduction gets its best synthesized program under the cost model and each
pipeline transfer its point-to-point time; the placement's per-step time is the count-weighted sum. The
best program is found by the branch and bound of ``cost.branch`` under the default engine (``auto``: it
prices only what its bound cannot cut), else by ranking the engine's whole program set (under
``certified``, a set Z3 proved valid and complete): the same program.
Placements are ranked by that total; the Pareto front keeps those no other placement beats on every
communication at once. A reduce-scatter or all-gather communication (docs/semantics.md §6) takes the cheapest
rank-order program of ``cost.sharded`` against its flat collective, or under a named engine a cheaper
synthesized one.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace
from math import prod
from pathlib import Path
from typing import Any

from p2smt.cost.best import best_on_hierarchy
from p2smt.cost.branch import MAX_DEVICES as SEARCH_DEVICES
from p2smt.cost.model import step_time
from p2smt.cost.rank import allreduce_seconds, rank_result
from p2smt.cost.sharded import cheapest_rank_order
from p2smt.cost.step import link_class
from p2smt.cost.tuner import HOP_CLASSES
from p2smt.errors import P2Error
from p2smt.model.collectives import Collective
from p2smt.model.dsl import Program, candidate_instructions, format_program, lower_program, problem
from p2smt.model.goal import Goal
from p2smt.model.hierarchy import SynthesisHierarchy, synthesis_hierarchy
from p2smt.model.placement import Matrix, Placement, matrices
from p2smt.model.profile import Communication, Profile, load_profile
from p2smt.model.request import Request
from p2smt.model.system import System, load_system
from p2smt.model.topology import build_topology
from p2smt.synth.config import Engine, EngineConfig
from p2smt.synth.driver import MatrixResult, SynthesisResult, placements_for, synthesize
from p2smt.synth.recheck import INTERPRETERS, checker, recheck


@dataclass(frozen=True)
class CommChoice:
    """The best way to run one communication on one placement."""

    name: str
    kind: str
    count: float
    seconds_each: float
    allreduce_seconds_each: float | None
    program: str | None
    links: tuple[str, ...] = ()
    allreduce_links: str | None = None
    rests_on: str | None = None  # a reduction's choice: what makes it the cheapest valid program
    certified: bool | None = None  # whether Z3 certified the program set it was chosen from (None: not asked)
    step_bytes: tuple[float, ...] = ()  # a sharded communication's message bytes per step (its baseline: the flat one)

    @property
    def seconds_total(self) -> float:
        return self.count * self.seconds_each


@dataclass(frozen=True)
class PlanUnit:
    """One communication's best way on one placement, reported as soon as it is known."""

    matrix: Matrix
    choice: CommChoice


UnitReport = Callable[[PlanUnit], None]


def pipeline_pairs(placement: Placement, axis: int) -> tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]]:
    """Sender→receiver pairs between neighbouring indices on ``axis``, split into two disjoint rounds."""
    size = placement.axes[axis]
    rounds: tuple[list, list] = ([], [])
    for dev in range(placement.num_devices):
        coords = list(placement.axis_coords(dev))
        if coords[axis] + 1 < size:
            nxt = coords.copy()
            nxt[axis] += 1
            rounds[coords[axis] % 2].append((dev, placement.device(tuple(nxt))))
    return tuple(sorted(rounds[0])), tuple(sorted(rounds[1]))


def p2p_seconds(system: System, placement: Placement, axis: int, nbytes: float, algo: str) -> float:
    """Time of one pipeline transfer: every stage sends ``nbytes`` to the next, all at once (links are full
    duplex, so a stage's receive and its own send share no direction of a link; they compete only where
    the routes do, as every concurrent flow of the fluid model does)."""
    pairs = tuple(p for rnd in pipeline_pairs(placement, axis) for p in rnd)
    if not pairs:
        return 0.0
    return step_time(build_topology(system), Collective.BROADCAST, pairs, [nbytes] * len(pairs),
                     "ring" if algo == "tree" else algo)


def _reduction_choices(system: System, axes: tuple[int, ...], comm: Communication, red: tuple[int, ...],
                       algo: str, config: EngineConfig, report: UnitReport | None = None) -> list[CommChoice]:
    """One reduction's cheapest program on every placement: by the branch and bound when ``config`` is the
    default (``auto``) and the synthesis hierarchy fits it, else by ranking the engine's whole program set."""
    if config.engine is Engine.AUTO:
        placements = placements_for(system, axes, None)
        hierarchies = [synthesis_hierarchy(p, red, system.level_names) for p in placements]
        if all(h.num_devices <= SEARCH_DEVICES for h in hierarchies):
            out = []
            for placement, h in zip(placements, hierarchies):
                out.append(_searched_choice(system, axes, comm, red, algo, config.max_len, placement, h))
                if report is not None:
                    report(PlanUnit(placement.matrix, out[-1]))
            return out
    chosen: dict[Matrix, CommChoice] = {}

    def choose(found: MatrixResult) -> CommChoice:
        if found.matrix not in chosen:
            chosen[found.matrix] = _reduction_choice(system, axes, comm, red, algo, config, found)
        return chosen[found.matrix]

    def finished(found: MatrixResult) -> None:
        if report is not None:
            report(PlanUnit(found.matrix, choose(found)))

    result = synthesize(Request.for_system(system, axes, red), config, on_matrix=finished)
    return [choose(found) for found in result.matrices]


def _reduction_choice(system: System, axes: tuple[int, ...], comm: Communication, red: tuple[int, ...],
                      algo: str, config: EngineConfig, found: MatrixResult) -> CommChoice:
    """The cheapest of one placement's synthesized programs for one reduction."""
    one = SynthesisResult(system.name, axes, red, str(config.engine), config.max_len, (found,), found.seconds)
    (m,) = rank_result(system, one, algo=algo, bytes_per_device=comm.bytes_per_device, top=1)["matrices"]
    if not m["programs"]:
        raise _no_program(comm, found.matrix, config.max_len)
    best = m["programs"][0]
    (prog,) = [p for p in found.programs if format_program(p) == best["program"]]
    placement = Placement(system.sizes, axes, found.matrix)
    rests_on = f"the cheapest of {len(found.programs)} programs; " + found.stats.get("rests_on", found.status)
    return _choice(system, comm, found.hierarchy, prog, best["seconds"], m["allreduce_seconds"], placement, red,
                   rests_on, found.stats.get("certified"))


def _searched_choice(system: System, axes: tuple[int, ...], comm: Communication, red: tuple[int, ...], algo: str,
                     max_len: int, placement: Placement, h: SynthesisHierarchy) -> CommChoice:
    """The cheapest program of one placement by ``cost.branch`` (the program ranking the whole set puts first,
    ties included), re-checked at the real size by an interpreter independent of the search."""
    found = best_on_hierarchy(system, h, max_len=max_len, top=1, algo=algo, bytes_per_device=comm.bytes_per_device,
                              method="search", matrix=placement.matrix)
    if not found.programs:
        raise _no_program(comm, placement.matrix, max_len)
    best = found.programs[0]
    index = {str(ins): i for i, (ins, _) in enumerate(candidate_instructions(h))}
    recheck(problem(h), [tuple(index[str(ins)] for ins in best.program.instructions)], "plan's branch and bound")
    allreduce = allreduce_seconds(system, placement.matrix, axes, red, algo, comm.bytes_per_device)
    rests_on = (f"the cheapest by the exact branch and bound, re-checked by {INTERPRETERS[checker(h.num_devices)]} "
                f"at the real size ({h.num_devices} devices); not certified by Z3")
    return _choice(system, comm, h, best.program, best.seconds, allreduce, placement, red, rests_on)


def _choice(system: System, comm: Communication, h: SynthesisHierarchy, program: Program, seconds: float,
            allreduce: float, placement: Placement, red: tuple[int, ...], rests_on: str,
            certified: bool | None = None) -> CommChoice:
    """A reduction's chosen program, with the link classes of its steps and of the AllReduce baseline."""
    links = tuple(link_class(system, step.groups) for step in lower_program(h, program))
    baseline = link_class(system, tuple(placement.reduction_groups(red)))
    return CommChoice(comm.name, "reduce", comm.count, seconds, allreduce, format_program(program), links, baseline,
                      rests_on, certified)


def _sharded_choices(system: System, axes: tuple[int, ...], profile: Profile, comm: Communication,
                     mats: list[Matrix], algo: str, config: EngineConfig,
                     report: UnitReport | None) -> list[CommChoice]:
    """A reduce-scatter's or all-gather's cheapest program on every placement against its flat collective: the
    cheapest rank-order program (``cost.sharded``), and under an engine named with ``--engine`` (not ``auto``)
    also the cheapest synthesized one (``rank --goal``'s), where the engine takes the goal."""
    kind, red, shard = profile.goal_of(comm)
    goal = Goal.of(kind, shard, red)
    out = []
    for m in mats:
        price, count = cheapest_rank_order(system, Placement(system.sizes, axes, m), red, goal, comm.bytes_per_device,
                                           algo, [a.name for a in profile.axes])
        flat_links = max((s.links for s in price.flat), key=HOP_CLASSES.index)
        rests_on = (f"the cheapest of {count} rank-order program{'s' if count != 1 else ''} (the {goal.describe()} "
                    "goal's digits cut into consecutive steps, each checked in buffer positions), priced by NCCL's "
                    "tuner against the flat collective")
        choice = CommChoice(comm.name, comm.kind, comm.count, price.seconds, price.flat_seconds,
                            "; ".join(s.label for s in price.steps), tuple(s.links for s in price.steps), flat_links,
                            rests_on, step_bytes=tuple(s.message_bytes for s in price.steps))
        found = _synthesized(system, axes, red, goal, comm, algo, config, m)
        if isinstance(found, str):
            choice = replace(choice, rests_on=f"{rests_on}; {found}")
        elif found[1] < price.seconds * (1 - 1e-9):
            program, seconds, step_bytes, h, words = found
            links = tuple(link_class(system, step.groups) for step in lower_program(h, program))
            choice = replace(choice, seconds_each=seconds, program=format_program(program), links=links,
                             rests_on=f"{words}; cheaper than {rests_on}", step_bytes=step_bytes)
        else:
            choice = replace(choice, rests_on=f"{rests_on}; no synthesized program is cheaper ({found[4]})")
        out.append(choice)
        if report is not None:
            report(PlanUnit(m, out[-1]))
    return out


def _synthesized(system: System, axes: tuple[int, ...], red: tuple[int, ...], goal: Goal, comm: Communication,
                 algo: str, config: EngineConfig, matrix: Matrix) -> tuple | str:
    """One placement's cheapest synthesized program of a sharded goal (program, seconds, bytes per step,
    hierarchy, what it rests on), or why none was searched: under ``auto`` plan does not synthesize them, and an
    engine or hierarchy that refuses the goal says so in one line."""
    if config.engine is Engine.AUTO:
        return ("sharded programs are not synthesized by plan's default engine (--engine certified or pieces, "
                "or rank --goal, synthesizes them)")
    try:
        result = synthesize(Request.for_system(system, axes, red, goal=goal, matrix=matrix), config)
        ranked = rank_result(system, result, algo=algo, bytes_per_device=comm.bytes_per_device, top=1)
    except P2Error as err:
        return f"not synthesized: {err}"
    (found,), (m,) = result.matrices, ranked["matrices"]
    if not m["programs"]:
        return f"no program of length up to {config.max_len} synthesized"
    best = m["programs"][0]
    (prog,) = [p for p in found.programs if format_program(p) == best["program"]]
    words = f"the cheapest of {len(found.programs)} synthesized programs; " + found.stats.get("rests_on", found.status)
    return prog, best["seconds"], tuple(best.get("step_bytes", ())), found.hierarchy, words


def _nothing_to_reduce(comm: Communication) -> CommChoice:
    """A reduction over axes of size 1: every reduction group is one device, so no step and no time."""
    return CommChoice(comm.name, comm.kind, comm.count, 0.0, 0.0, None,
                      rests_on="nothing to communicate: the reduced axes have size 1 (one device per group)")


def _no_program(comm: Communication, matrix: Matrix, max_len: int) -> P2Error:
    return P2Error(f"no program reduces {comm.name!r} on matrix {[list(r) for r in matrix]} within length {max_len}")


def _refuse_too_large(profile: Profile, axes: tuple[int, ...], config: EngineConfig) -> None:
    """Refuse, before any work, a reduction over more devices than the exact search takes on (its engine
    would refuse it only after the placements before it were planned)."""
    from p2smt.synth.pieces import SEARCH_LIMIT

    if config.engine is Engine.SYMMETRIC:
        return
    for comm in profile.communication:
        size = prod(axes[profile.axis_index(a)] for a in comm.axes)
        if comm.kind == "reduce" and size > SEARCH_LIMIT:
            raise P2Error(f"communication {comm.name!r} reduces over {size:,} devices: more than the exact search "
                          f"takes on ({SEARCH_LIMIT:,}); use --engine symmetric")


def plan(profile: Profile | str, system: System | str, *, algo: str = "ring", config: EngineConfig | None = None,
         report: UnitReport | None = None) -> dict[str, Any]:
    """Rank every placement of the profile's axes on ``system`` by predicted communication per step.

    ``profile`` and ``system`` may be given by name (``p2smt plan --help`` lists the profiles) or file.
    ``report`` receives each (placement, communication) unit's choice as it is found (progress, partial
    results at a deadline).

    >>> from p2smt.model.profile import load_profile
    >>> from p2smt.model.system import load_system
    >>> report = plan(load_profile("resnet50-dp"), load_system("v100-2x8"))
    >>> report["best"]["matrix"]
    [[2, 8]]
    """
    profile, system = load_profile(profile), load_system(system)
    config = config or EngineConfig(engine=Engine.AUTO)
    axes = profile.sizes_for(system.num_devices)
    _refuse_too_large(profile, axes, config)
    mats: list[Matrix] = matrices(system.sizes, axes)
    per_comm: list[list[CommChoice]] = []
    for comm in profile.communication:
        idx = tuple(sorted(profile.axis_index(a) for a in comm.axes))
        if comm.kind != "p2p" and prod(axes[i] for i in idx) == 1:
            per_comm.append([_nothing_to_reduce(comm) for _ in mats])
            if report is not None:
                for m, choice in zip(mats, per_comm[-1]):
                    report(PlanUnit(m, choice))
            continue
        if comm.kind == "reduce":
            per_comm.append(_reduction_choices(system, axes, comm, idx, algo, config, report))
            continue
        if comm.kind in SHARDED:
            per_comm.append(_sharded_choices(system, axes, profile, comm, mats, algo, config, report))
            continue
        per_comm.append([])
        for m in mats:
            seconds = p2p_seconds(system, Placement(system.sizes, axes, m), idx[0], comm.bytes_per_device, algo)
            per_comm[-1].append(CommChoice(comm.name, "p2p", comm.count, seconds, None, None))
            if report is not None:
                report(PlanUnit(m, per_comm[-1][-1]))
    rows = []
    for i, m in enumerate(mats):
        choices = [c[i] for c in per_comm]
        baseline = sum(c.count * (c.allreduce_seconds_each if c.allreduce_seconds_each is not None else c.seconds_each)
                       for c in choices)
        rows.append({
            "matrix": [list(r) for r in m],
            "total_seconds": sum(c.seconds_total for c in choices),
            "allreduce_total_seconds": baseline,
            "communications": [
                {"name": c.name, "kind": c.kind, "count": c.count, "seconds_each": c.seconds_each,
                 "seconds_total": c.seconds_total, "allreduce_seconds_each": c.allreduce_seconds_each,
                 "program": c.program, "links": list(c.links), "allreduce_links": c.allreduce_links,
                 "moved": moved(c), **({"rests_on": c.rests_on} if c.rests_on is not None else {}),
                 **({"step_bytes": list(c.step_bytes)} if c.step_bytes else {})}
                for c in choices
            ],
        })
    vectors = [[c["seconds_total"] for c in r["communications"]] for r in rows]
    for r, v in zip(rows, vectors):
        r["pareto"] = not any(
            all(o <= s for o, s in zip(w, v)) and any(o < s for o, s in zip(w, v)) for w in vectors if w is not v
        )
    rows.sort(key=lambda r: (float(f"{r['total_seconds']:.9g}"), r["matrix"]))
    for n, r in enumerate(rows, 1):
        r["rank"] = n
    totals = [r["total_seconds"] for r in rows]
    return {
        "profile": profile.name,
        "system": system.name,
        "devices": system.num_devices,
        "axes": {a.name: s for a, s in zip(profile.axes, axes)},
        "levels": [[lv.name, lv.size] for lv in system.levels],
        "algo": algo,
        "engine": config.engine.value,
        **certification(config, [c for choices in per_comm for c in choices if c.kind == "reduce"]),
        **({"sharded": SHARDED_NOTE} if any(c.kind in SHARDED for c in profile.communication) else {}),
        "placements": rows,
        "best": rows[0],
        "median_seconds": statistics.median(totals),
        "worst": rows[-1],
        "pareto_front": [r["matrix"] for r in rows if r["pareto"]],
    }


SHARDED = ("reduce-scatter", "all-gather")
SHARDED_NOTE = ("reduce-scatter and all-gather communications: the cheapest rank-order program (flat collective "
                "or the rank's digits cut into consecutive steps), priced by NCCL's tuner, or under --engine certified "
                "or pieces a cheaper synthesized one; their baseline column is the flat collective")


def certification(config: EngineConfig, reductions: list[CommChoice]) -> dict[str, Any]:
    """Whether Z3 certified the program set of every (placement, reduction) unit each choice was made from, in
    words (under another engine than the certified one: not certified, and what the first choice rests on)."""
    reductions = [c for c in reductions if c.program is not None]  # a unit with nothing to reduce proves nothing
    if not reductions:
        return {"certified": True, "certification": "nothing to certify: every reduction is over axes of size 1"}
    if config.engine is not Engine.CERTIFIED:
        return {"certified": False, "certification": (
            f"NOT certified by Z3 (--engine {config.engine.value}; --engine certified proves each unit's program "
            f"set): each choice says what it rests on (--json), e.g. {reductions[0].rests_on}")}
    missing = [c for c in reductions if not c.certified]
    if not missing:
        n = len(reductions)
        words = (f"certified by Z3: each choice is the cheapest of a program set proved valid and complete up to "
                 f"length {config.max_len} ({n} (placement, reduction) unit{'s' if n != 1 else ''})")
    else:
        words = (f"NOT certified by Z3 on {len(missing)} of {len(reductions)} (placement, reduction) units "
                 "(each unit's rests_on says why)")
    return {"certified": not missing, "certification": words}


def moved(choice: CommChoice) -> str | None:
    """Which link classes the chosen program uses against the AllReduce baseline, e.g. ``net -> nvlink+net``:
    a program that moves traffic off (or onto) the network shows it here; None when nothing moved."""
    if choice.allreduce_links is None or set(choice.links) == {choice.allreduce_links}:
        return None
    return f"{choice.allreduce_links} -> {'+'.join(sorted(set(choice.links)))}"


def render_plan(report: dict[str, Any]):
    """A rich table: one row per placement, its total and the program serving each communication."""
    from rich.table import Table

    axis_names = list(report["axes"])
    t = Table(
        title=f"{report['profile']} on {report['system']} ({report['devices']} GPUs, axes "
        f"{report['axes']}, {report['algo']}): per-step communication by placement"
    )
    t.add_column("#", justify="right")
    t.add_column("matrix (" + " / ".join(axis_names) + ")")
    t.add_column("total s", justify="right")
    t.add_column("AllReduce-only s" if "sharded" not in report else "baseline s", justify="right", overflow="fold")
    t.add_column("pareto")
    for c in report["placements"][0]["communications"]:
        t.add_column(f"{c['name']} ×{c['count']:g}", overflow="fold")
    for r in report["placements"]:
        cells = [
            f"{c['seconds_total']:.4g} s" + (f"\n{c['program']}" if c["program"] else "")
            + (f"\nlinks {' '.join(c['links'])} ({baseline_name(c)} {c['allreduce_links']})" if c.get("links") else "")
            for c in r["communications"]
        ]
        t.add_row(str(r["rank"]), str(r["matrix"]), f"{r['total_seconds']:.4g}",
                  f"{r['allreduce_total_seconds']:.4g}", "yes" if r["pareto"] else "", *cells)
    return t


def baseline_name(comm: dict[str, Any]) -> str:
    """What a communication is compared with: the AllReduce, or a sharded one's flat collective (and its time)."""
    if comm["kind"] not in SHARDED:
        return "AllReduce"
    return f"flat {comm['allreduce_seconds_each'] * comm['count']:.4g} s,"


def plot_plan(report: dict[str, Any], path: Path) -> Path:
    """Stacked horizontal bars: per placement, the time of each communication per step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["placements"]
    names = [c["name"] for c in rows[0]["communications"]]
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(rows) + 1.8))
    labels = [f"#{r['rank']} {r['matrix']}" + (" *" if r["pareto"] else "") for r in rows]
    left = [0.0] * len(rows)
    for k, name in enumerate(names):
        widths = [r["communications"][k]["seconds_total"] for r in rows]
        ax.barh(labels, widths, left=left, label=name)
        left = [a + b for a, b in zip(left, widths)]
    ax.invert_yaxis()
    ax.set_xlabel("predicted communication seconds per training step")
    ax.set_title(f"{report['profile']} on {report['system']} ({report['algo']}); * = Pareto front")
    ax.legend(loc="best")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
