"""The ``p2smt`` command line: thin sub-commands over the Python API, rich tables or ``--json``."""

from __future__ import annotations

import argparse
import sys

from p2smt import __version__
from p2smt.cli import (
    best,
    check,
    cost,
    draw,
    encodings,
    experiment,
    groups,
    lower,
    placements,
    plan,
    rank,
    sweep,
    synth,
    topologies,
    verify,
)
from p2smt.cli.options import ArgumentParser
from p2smt.cli.output import ExitCode
from p2smt.errors import InternalError, P2Error

# In ``p2smt --help`` order; each module declares its parser(s) beside its handler.
COMMANDS = (topologies, placements, groups, synth, check, lower, rank, cost, draw, sweep, verify, encodings,
            plan, experiment, best)


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="p2smt", description=__doc__)
    parser.add_argument("--version", action="version", version=f"p2smt {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return int(args.func(args))
    except P2Error as err:
        print(f"p2smt: error: {err}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    except InternalError as err:
        print(f"p2smt: INTERNAL ERROR (please report): {err}", file=sys.stderr)
        return ExitCode.INTERNAL
    except KeyboardInterrupt:
        print("p2smt: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
