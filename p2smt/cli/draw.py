"""``p2smt draw``: a picture of a system's physical topology."""

from __future__ import annotations

import argparse

from p2smt.cli.options import add_system, system_of
from p2smt.cli.output import ExitCode


def register(sub) -> None:
    p = sub.add_parser("draw", help="write a picture of a system's physical topology")
    add_system(p)
    p.add_argument("--out", help="PNG path (default: SYSTEM.png)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from p2smt.model.draw import draw_topology

    system = system_of(args)
    path = draw_topology(system, args.out or f"{system.name}.png")
    print(f"wrote {path}")
    return ExitCode.OK
