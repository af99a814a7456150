"""``p2smt draw``: a picture of a system's physical topology."""

from __future__ import annotations

import argparse

from p2smt.cli.options import add_system, file_arg, picture_path, system_of
from p2smt.cli.output import ExitCode
from p2smt.model.paths import check_output, output_file

MAX_DRAWN_DEVICES = 4096
"""Above this a picture is unreadable and slow to lay out: refused."""


def register(sub) -> None:
    p = sub.add_parser("draw", help="write a picture of a system's physical topology")
    add_system(p)
    p.add_argument("--out", type=file_arg, help="PNG path (default: SYSTEM.png, the name: of the system's YAML)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from p2smt.model.draw import draw_topology

    if args.out is not None:
        check_output(picture_path(args.out, "--out"), "--out")  # before the work, as every output
    system = system_of(args, MAX_DRAWN_DEVICES)
    path = args.out if args.out is not None else f"{system.name}.png"  # a system name is no path (model/system)
    with output_file(picture_path(path, "--out"), "--out", ".png") as tmp:
        draw_topology(system, tmp)
    print(f"wrote {path}")
    return ExitCode.OK
