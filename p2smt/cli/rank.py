"""``p2smt rank``: every placement's programs ranked by predicted time."""

from __future__ import annotations

import argparse

from rich.console import Console

from p2smt.cli.bounded import add_bounds
from p2smt.cli.options import (
    add_cost,
    add_json,
    add_request,
    add_search,
    engine_config,
    request_of,
)
from p2smt.cli.output import ExitCode, emit
from p2smt.cli.synth import bounded_synthesis


def register(sub) -> None:
    p = sub.add_parser("rank", help="rank every placement's programs by predicted time")
    add_request(p)
    add_cost(p)
    p.add_argument("--top", type=int, help="keep the N fastest programs per placement")
    add_search(p, engine="auto")  # certification costs seconds per placement: see docs/results
    add_bounds(p)
    add_json(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from p2smt.cost.rank import check_request, rank_result, render_rank

    req = request_of(args)
    check_request(req.load_system(), args.algo, args.bytes, args.top)
    bounded, result = bounded_synthesis(args, req, engine_config(args), "rank: placements")
    report = rank_result(req.load_system(), result, algo=args.algo, bytes_per_device=args.bytes, top=args.top)
    if bounded.expired:
        report |= {"status": "unknown", "message": bounded.message("placements")}

    def render(c: Console) -> None:
        c.print(render_rank(report))
        if bounded.expired:
            c.print(f"[yellow]UNKNOWN[/yellow]: {report['message']}")

    emit(args, report, render)
    return ExitCode.UNKNOWN if bounded.expired else ExitCode.OK
