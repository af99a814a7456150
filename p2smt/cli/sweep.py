"""``p2smt sweep``: P²'s evaluation grid (``--paper``) or a grid file, resumable, on dask."""

from __future__ import annotations

import argparse

from rich.console import Console

from p2smt.cli.goals import add_goal
from p2smt.cli.options import add_json, add_search, count, file_arg, int_list, refuse_given, seconds
from p2smt.cli.output import ExitCode, emit, folder_path
from p2smt.errors import P2Error
from p2smt.model.paths import check_output


def register(sub) -> None:
    p = sub.add_parser("sweep", help="the P² evaluation grid (--paper) or a grid file, resumable, on dask")
    p.add_argument("--paper", action="store_true", help="run the P² paper's grid: synthesis + ranking")
    p.add_argument("--grid", help="grid YAML file or shipped grid name")
    p.add_argument("--out", type=file_arg,
                   help="--paper: output folder (p2-sweep); --grid: JSONL file (sweep.jsonl; a device or a FIFO "
                        "with a reader: written through, nothing to resume)")
    add_search(p, grid=True)
    add_goal(p)
    p.set_defaults(goal=None)  # the grid's goal (allreduce unless it names another) unless --goal replaces it
    p.add_argument("--no-plots", action="store_true", help="--paper: write the tables only, no PNG figures")
    p.add_argument("--progress", action="store_true",
                   help="--paper: show progress on stderr (default: on a terminal; --grid shows it unless --json)")
    p.add_argument("--scheduler", help="dask.distributed scheduler address (default: local cores)")
    p.add_argument("--workers", type=count, help="local workers / tasks in flight")
    p.add_argument("--timeout", type=seconds, help="per-task solver seconds; a task is killed at S + max(1 s, S/4) and reported as timeout")
    add_json(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if bool(args.paper) == bool(args.grid):
        raise P2Error("give exactly one of --paper or --grid FILE")
    if args.proof_store:
        folder_path(args.proof_store, "--proof-store")  # as every output: a missing parent is refused, not made
    if args.paper:
        refuse_given((("--scheduler", args.scheduler), ("--workers", args.workers), ("--timeout", args.timeout)),
                     "options of --grid sweeps; --paper runs in this process")
        refuse_given((("--goal", args.goal), ("--shard-axes", args.shard_axes)),
                     "options of --grid sweeps; --paper reproduces P²'s AllReduce grid")
        from p2smt.cli.bounded import progress_display
        from p2smt.runs.paper import paper_sweep, render_sweep

        folder_path(args.out or "p2-sweep", "--out")
        with progress_display(args, "sweep --paper: requests", None) as show:
            summary = paper_sweep(args.out or "p2-sweep", engine=args.engine, plots=not args.no_plots,
                                  max_len=args.max_len, proof_budget=args.proof_budget,
                                  proof_store=args.proof_store, report=show)
        emit(args, {k: v for k, v in summary.items() if k != "rows"} | {"out": args.out or "p2-sweep"},
             lambda c: whole(c, render_sweep(summary)))
        return ExitCode.OK
    refuse_given((("--no-plots", args.no_plots),), "an option of --paper; a --grid sweep draws no plots")
    from p2smt.runs.gridsweep import render_summary, sweep

    summary = sweep(args.grid, check_output(args.out or "sweep.jsonl", "--out"), scheduler=args.scheduler,
                    workers=args.workers, timeout_s=args.timeout, progress=not args.json, engine=args.engine,
                    max_len=args.max_len, proof_budget=args.proof_budget, proof_store=args.proof_store,
                    goal=args.goal, shard_axes=None if args.shard_axes is None else int_list(args.shard_axes))
    emit(args, summary.to_json(), lambda c: c.print(render_summary(summary)))
    return ExitCode.OK if summary.succeeded else ExitCode.FAIL


def whole(c: Console, table) -> None:
    """Print ``table`` uncut: on a console widened to the table's natural width when it is wider."""
    need = c.measure(table).maximum
    (c if need <= c.width else Console(highlight=False, width=need)).print(table)
