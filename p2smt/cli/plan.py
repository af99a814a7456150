"""``p2smt plan``: rank placements for a whole model's communication profile; optional chart and export."""

from __future__ import annotations

import argparse
import json
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from p2smt.cli.bounded import add_bounds, run_bounded
from p2smt.cli.options import (
    add_algo,
    add_json,
    add_search,
    add_system,
    engine_config,
    file_arg,
    picture_path,
    system_of,
)
from p2smt.cli.output import ExitCode, emit, folder_path, output_folder
from p2smt.model.paths import check_output, output_file, write_text
from p2smt.model.shipped import shipped_profiles


def register(sub) -> None:
    p = sub.add_parser("plan", help="rank placements for a whole model's communication profile")
    p.add_argument("--profile", required=True,
                   help=f"shipped profile ({', '.join(shipped_profiles())}) or path to a YAML file")
    add_system(p)
    add_algo(p)
    add_search(p, engine="auto")  # the cheapest program by branch and bound: see docs/results-2026-12-02.md
    p.add_argument("--png", type=file_arg, help="write a stacked-bar chart of per-placement time")
    p.add_argument("--export-dir", type=file_arg, help="write the best placement's mesh order and lowered programs here")
    add_bounds(p)
    add_json(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from p2smt.cost.plan import plan, plot_plan, render_plan
    from p2smt.cost.rank import flagged
    from p2smt.model.placement import matrices
    from p2smt.model.profile import load_profile

    profile = load_profile(args.profile)
    system = system_of(args)
    # checked now: the chart is written after the work
    png = output_file(check_output(picture_path(args.png, "--png"), "--png"), "--png", ".png") if args.png else nullcontext()
    export = folder_path(args.export_dir, "--export-dir") if args.export_dir else None
    config = engine_config(args)
    units = len(matrices(system.sizes, profile.sizes_for(system.num_devices))) * len(profile.communication)
    bounded = run_bounded(args, "plan: placement × communication units",
                          lambda report: plan(profile, system, algo=args.algo, config=config, report=report),
                          total=units)
    if bounded.expired:
        return expired(args, bounded, profile, system)
    report = bounded.result
    with png as tmp:
        if tmp is not None:
            plot_plan(report, tmp)
    if export is not None:
        report["exported"] = export_plan(report, profile, system, output_folder(export, "--export-dir"))

    def render(c: Console) -> None:
        c.print(render_plan(report))
        best, worst = report["best"], report["worst"]
        c.print(
            f"best {best['matrix']} {best['total_seconds']:.4g} s per step; median "
            f"{report['median_seconds']:.4g} s; worst {worst['matrix']} {worst['total_seconds']:.4g} s"
        )
        if "certification" in report:
            c.print(flagged(report["certification"]))
        if "sharded" in report:
            c.print(report["sharded"])
        if args.png:
            c.print(f"chart: {args.png}")

    emit(args, report, render)
    return ExitCode.OK


def expired(args: argparse.Namespace, bounded, profile, system) -> int:
    """The deadline's ``unknown``: each finished (placement, communication) unit's choice, and what is not."""
    from p2smt.model.placement import matrices

    mats = matrices(system.sizes, profile.sizes_for(system.num_devices))
    done = {(u.choice.name, u.matrix) for u in bounded.pieces}
    finished = [{"communication": u.choice.name, "matrix": [list(r) for r in u.matrix], "kind": u.choice.kind,
                 "seconds_each": u.choice.seconds_each, "seconds_total": u.choice.seconds_total,
                 "program": u.choice.program} for u in bounded.pieces]
    unfinished = [{"communication": c.name, "matrices": [[list(r) for r in m] for m in mats if (c.name, m) not in done]}
                  for c in profile.communication]
    unfinished = [u for u in unfinished if u["matrices"]]
    message = (f"deadline of {bounded.deadline:g} s reached with {len(finished)} of "
               f"{len(mats) * len(profile.communication)} (placement, communication) units finished")
    payload = {"profile": profile.name, "system": system.name, "finished": finished, "unfinished": unfinished}

    def render(c: Console) -> None:
        t = Table(title=f"{profile.name} on {system.name}: finished before the deadline")
        for column in ("communication", "matrix", "s each", "program"):
            t.add_column(column, overflow="fold")
        for u in finished:
            t.add_row(u["communication"], str(u["matrix"]), f"{u['seconds_each']:.4g}", u["program"] or "")
        c.print(t)
        for u in unfinished:
            c.print(f"not finished: {u['communication']} on {len(u['matrices'])} placements: "
                    f"{', '.join(str(m) for m in u['matrices'])}")
        c.print(f"[yellow]UNKNOWN[/yellow]: {message}")

    emit(args, payload | {"status": "unknown", "message": message}, render)
    return ExitCode.UNKNOWN


def export_plan(report: dict[str, Any], profile, system, out: Path) -> list[str]:
    """Write the best placement's JAX mesh order and, per reduction, its program lowered to JAX and torch (a
    sharded one under its goal)."""
    from p2smt.cost.sharded import rank_order_plans
    from p2smt.lower import lower_module, placement_target
    from p2smt.model.dsl import lower_program, parse_program
    from p2smt.model.goal import Goal
    from p2smt.model.hierarchy import synthesis_hierarchy
    from p2smt.model.placement import Placement

    best = report["best"]
    axes = tuple(report["axes"].values())
    placement = Placement(system.sizes, axes, tuple(tuple(r) for r in best["matrix"]))
    written = []
    mesh = out / "mesh.json"
    write_text(mesh, json.dumps({
        "axis_names": list(report["axes"]), "axes": list(axes), "matrix": best["matrix"],
        "device_order": list(placement.mesh_order()),
    }, indent=2) + "\n", "--export-dir")
    written.append(str(mesh))
    for comm in best["communications"]:
        if comm["program"] is None:
            continue
        spec = next(c for c in profile.communication if c.name == comm["name"])
        kind, red, shard = profile.goal_of(spec)
        goal = Goal.of(kind, shard, red)
        h = synthesis_hierarchy(placement, red, system.level_names)
        target = placement_target(placement, red, system.level_names, list(report["axes"]), system.name,
                                  goal.sharding(placement))
        # a sharded communication's rank-order program is named by its steps, not DSL text: lowered as the plan
        options = {"; ".join(labels): steps for labels, steps in
                   rank_order_plans(placement, red, goal, system.level_names, list(report["axes"]))} \
            if goal.sharded else {}
        if comm["program"] in options:
            plan, labels = options[comm["program"]], None
        else:
            program = parse_program(comm["program"], h)
            plan, labels = lower_program(h, program), [str(i) for i in program.instructions]
        for backend in ("jax", "torch"):
            path = out / f"{comm['name']}_{backend}.py"
            write_text(path, lower_module(backend, plan, target, labels), "--export-dir")
            written.append(str(path))
    return written
