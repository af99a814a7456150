"""``p2smt rank``: every placement's programs ranked by predicted time."""

from __future__ import annotations

import argparse

from p2smt.cli.options import (
    add_cost,
    add_json,
    add_request,
    add_search,
    engine_config,
    request_of,
)
from p2smt.cli.output import ExitCode, emit


def register(sub) -> None:
    p = sub.add_parser("rank", help="rank every placement's programs by predicted time")
    add_request(p)
    add_cost(p)
    p.add_argument("--top", type=int, help="keep the N fastest programs per placement")
    add_search(p)
    add_json(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from p2smt.cost.rank import rank, render_rank

    report = rank(request_of(args), engine_config(args), algo=args.algo, bytes_per_device=args.bytes,
                  top=args.top)
    emit(args, report, lambda c: c.print(render_rank(report)))
    return ExitCode.OK
