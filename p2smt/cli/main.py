"""The ``p2smt`` command line: thin sub-commands over the Python API, rich tables or ``--json``."""

from __future__ import annotations

import argparse
import errno
import os
import sys
import time

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
    parser = ArgumentParser(prog="p2smt", description=__doc__.replace("``", ""))
    parser.add_argument("--version", action="version", version=f"p2smt {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)
    for command in COMMANDS:
        command.register(sub)
    return parser


MAX_MESSAGE = 400
"""Longest error message printed whole; longer ones (a 1 MB identifier echoed) are cut in the middle."""


def one_line(message: str) -> str:
    """``message`` on one line of at most ``MAX_MESSAGE`` characters."""
    text = " ".join(str(message).split())
    if len(text) <= MAX_MESSAGE:
        return text
    half = MAX_MESSAGE // 2
    return f"{text[:half]} … ({len(text) - MAX_MESSAGE} characters left out) … {text[-half:]}"


def beyond_limits(err: Exception) -> str | None:
    """The one-line error for input past a limit of the machine or of Python (None: some other error)."""
    if isinstance(err, OverflowError):
        return "a number in the input is too large to compute with"
    if isinstance(err, OSError):
        if err.errno in (errno.ENAMETOOLONG, errno.ELOOP):
            return f"{one_line(str(err.filename))[:200]}: {err.strerror}"
        return None
    if "integer string conversion" in str(err):  # Python's limit on the digits of an integer
        return "a number in the input has more digits than Python reads (4,300)"
    return None


def main(argv: list[str] | None = None) -> int:
    started = time.monotonic()
    try:
        args = build_parser().parse_args(argv)
        args.started = started
        return int(args.func(args))
    except P2Error as err:
        print(f"p2smt: error: {one_line(str(err))}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    except RecursionError:
        print("p2smt: error: input nested too deeply", file=sys.stderr)
        return ExitCode.BAD_INPUT
    except BrokenPipeError:
        # The reader went away (``| head``): stop quietly; stdout is pointed at /dev/null so the
        # interpreter's final flush does not complain either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return ExitCode.OK
    except (OSError, OverflowError, ValueError) as err:
        message = beyond_limits(err)
        if message is None:
            raise
        print(f"p2smt: error: {message}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    except InternalError as err:
        print(f"p2smt: INTERNAL ERROR (please report): {one_line(str(err))}", file=sys.stderr)
        return ExitCode.INTERNAL
    except KeyboardInterrupt:
        print("p2smt: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
