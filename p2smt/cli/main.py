"""The ``p2smt`` command line: thin sub-commands over the Python API, rich tables or ``--json``."""

from __future__ import annotations

import argparse
import errno
import os
import sys
import time

from p2smt import __version__
from p2smt.cli import (
    audit,
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
    recheck,
    sweep,
    synth,
    topologies,
    verify,
)
from p2smt.cli.options import ArgumentParser
from p2smt.cli.output import ExitCode, OutputError, OutputGone, guarded_stdout
from p2smt.errors import InternalError, P2Error
from p2smt.interrupts import Interrupted, install, stop_if_received

# In ``p2smt --help`` order; each module declares its parser(s) beside its handler.
COMMANDS = (topologies, placements, groups, synth, check, lower, rank, cost, draw, sweep, verify, encodings,
            plan, experiment, best, audit, recheck)


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
    """Run one command: its exit code, every failure one line on stderr. The command line proper (``argv``
    None) also takes SIGINT and SIGTERM (``p2smt.interrupts``); an in-process call leaves the caller's
    handlers alone."""
    started = time.monotonic()
    try:
        if argv is None:
            install()
        with guarded_stdout():
            return _run(argv, started)
    except OutputGone:
        # The reader went away (``| head`` had what it wanted): stop quietly with exit 0, stdout pointed
        # at /dev/null so that the interpreter's final flush does not complain either.
        _drop_stdout(argv)
        return ExitCode.OK
    except OutputError as err:
        _drop_stdout(argv)
        print(f"p2smt: error: {err}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    except Interrupted as err:
        print(err.message(), file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("p2smt: interrupted (Ctrl-C): stopped before the command finished", file=sys.stderr)
        return ExitCode.INTERRUPTED


def _drop_stdout(argv: list[str] | None) -> None:
    """Point file descriptor 1 at /dev/null (command line only): what is left in its buffer is dropped."""
    if argv is None:
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        except OSError:
            pass


def _run(argv: list[str] | None, started: float) -> int:
    """Parse and run the command; an error becomes its one line, unless a stop signal came first (the error
    may be its consequence: a worker killed by the same Ctrl-C)."""
    try:
        args = build_parser().parse_args(argv)
        args.started = started
        code = int(args.func(args))
    except (OutputError, KeyboardInterrupt):
        raise
    except Exception as err:  # noqa: BLE001  (each known kind is one line; the rest re-raised)
        stop_if_received()  # the error may be the signal's doing (a worker it killed)
        return _failure(err)
    stop_if_received()  # the signal came as the work ended: still a stop
    return code


def _failure(err: Exception) -> int:
    """The one line and exit code of a failed command (re-raises an error that is no known kind)."""
    if isinstance(err, P2Error):
        print(f"p2smt: error: {one_line(str(err))}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    if isinstance(err, RecursionError):
        print("p2smt: error: input nested too deeply", file=sys.stderr)
        return ExitCode.BAD_INPUT
    if isinstance(err, (OSError, OverflowError, ValueError)) and (message := beyond_limits(err)) is not None:
        print(f"p2smt: error: {message}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    if isinstance(err, InternalError):
        print(f"p2smt: INTERNAL ERROR (please report): {one_line(str(err))}", file=sys.stderr)
        return ExitCode.INTERNAL
    if isinstance(err, MemoryError) or (type(err).__name__ == "Z3Exception" and _z3_out_of_memory(err)):
        # past the checks that refuse a size up front: building terms or a checker's solver ran out
        print("p2smt: error: out of memory before an answer (neither proved nor refuted); give the process more "
              "memory, or a smaller size (--memory, --max-len, fewer devices)", file=sys.stderr)
        return ExitCode.UNKNOWN
    raise err


def _z3_out_of_memory(err: Exception) -> bool:
    from p2smt.smt.memory import memory_reason

    return memory_reason(err) is not None


if __name__ == "__main__":
    sys.exit(main())
