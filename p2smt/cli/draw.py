"""``p2smt draw``: a picture of a system's physical topology."""

from __future__ import annotations

import argparse

from p2smt.cli.options import add_system, system_of
from p2smt.cli.output import ExitCode, output_file, png_path

MAX_DRAWN_DEVICES = 4096
"""Above this a picture is unreadable and slow to lay out: refused."""


def register(sub) -> None:
    p = sub.add_parser("draw", help="write a picture of a system's physical topology")
    add_system(p)
    p.add_argument("--out", help="PNG path (default: SYSTEM.png)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from p2smt.model.draw import draw_topology

    system = system_of(args, MAX_DRAWN_DEVICES)
    path = args.out or f"{system.name}.png"
    with output_file(png_path(path, "--out"), "--out") as tmp:
        draw_topology(system, tmp)
    print(f"wrote {path}")
    return ExitCode.OK
