"""A wall-clock ``--deadline`` and a ``--progress`` display for the commands that can run long.

Under a deadline the work runs in a forked child that reports each finished piece (e.g. a placement's
programs) through a pipe; at the deadline the child is killed and the command ends ``unknown`` with the
pieces found so far. Without one the work runs in-process and the pieces only feed the progress display.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from p2smt.cli.options import seconds
from p2smt.cli.output import counted
from p2smt.errors import InternalError, P2Error
from p2smt.interrupts import noting

T = TypeVar("T")
Report = Callable[[Any], None]


@dataclass
class Bounded(Generic[T]):
    """The work's result, or None when the deadline passed first; the pieces reported either way (``partial``:
    those reported inside an unfinished piece, which the progress display and the count leave out)."""

    result: T | None
    pieces: list[Any] = field(default_factory=list)
    deadline: float | None = None
    partial: list[Any] = field(default_factory=list)

    @property
    def expired(self) -> bool:
        return self.result is None

    def message(self, what: str) -> str:
        """``what``: the pieces' noun, singular ("placement")."""
        return f"deadline of {self.deadline:g} s reached with {counted(len(self.pieces), what)} done"


def add_bounds(p: argparse.ArgumentParser) -> None:
    """``--deadline`` and ``--progress`` of the long-running commands."""
    p.add_argument("--deadline", type=seconds, metavar="SECONDS",
                   help="wall-clock limit of the whole command: end 'unknown' (exit 4) with what was found")
    p.add_argument("--progress", action="store_true", help="show progress on stderr (default: on a terminal)")


HEARTBEAT_S = 5.0
"""Seconds between the plain progress lines of a piece that takes long (a log shows the run is alive)."""


@contextmanager
def progress_display(args: argparse.Namespace, label: str, total: int | None) -> Iterator[Report]:
    """A rich progress line on stderr (when asked or on a terminal) advanced once per reported piece; when
    asked with stderr not a terminal (a log file), one plain line per piece, and one every ``HEARTBEAT_S``
    seconds without a finished piece."""
    if not (getattr(args, "progress", False) or sys.stderr.isatty()):
        yield lambda piece: None
        return
    if not sys.stderr.isatty():
        with _plain_lines(label, total) as line:
            yield line
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    columns = [SpinnerColumn(), TextColumn("{task.description}")]
    if total is not None:
        columns += [BarColumn(), MofNCompleteColumn()]
    else:
        columns += [TextColumn("{task.completed:.0f} done")]
    with Progress(*columns, TimeElapsedColumn(), console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda piece: bar.advance(task)


@contextmanager
def _plain_lines(label: str, total: int | None) -> Iterator[Report]:
    """``label: 3/8 done (12.0 s)`` per finished piece, and ``… still working`` from a timer thread."""
    start, done, lock, stop = time.monotonic(), [0], threading.Lock(), threading.Event()
    of = (lambda: f"/{total}") if total is not None else (lambda: "")

    def say(what: str) -> None:
        with lock:
            print(f"{label}: {done[0]}{of()} done{what} ({time.monotonic() - start:.1f} s)", file=sys.stderr, flush=True)

    def line(piece) -> None:
        done[0] += 1
        say("")

    def beat() -> None:
        while not stop.wait(HEARTBEAT_S):
            say(", still working")

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield line
    finally:
        stop.set()
        thread.join()


def run_bounded(args: argparse.Namespace, label: str, work: Callable[[Report], T],
                total: int | None = None, is_partial: Callable[[Any], bool] | None = None) -> Bounded[T]:
    """Run ``work(report)`` under ``args.deadline`` (if any) with the progress display; a piece
    ``is_partial`` accepts is kept in ``Bounded.partial`` instead (it does not advance the display)."""
    deadline = getattr(args, "deadline", None)
    is_partial = is_partial or (lambda piece: False)
    pieces: list[Any] = []
    partial: list[Any] = []

    def take(piece: Any, show: Report) -> None:
        """Keep a reported piece; only a finished one advances the display."""
        if is_partial(piece):
            partial.append(piece)
        else:
            pieces.append(piece)
            show(piece)

    done = lambda: f"{label}: {len(pieces)}{'' if total is None else f'/{total}'} done"
    if deadline is None:
        with progress_display(args, label, total) as show, noting(done):
            return Bounded(work(lambda piece: take(piece, show)), pieces, partial=partial)
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child, args=(work, send), daemon=True)
    # The deadline bounds the whole command: it counts from main()'s start, not from the long part.
    end = getattr(args, "started", time.monotonic()) + deadline
    child.start()
    send.close()
    try:
        with progress_display(args, label, total) as show, noting(done):
            while (left := end - time.monotonic()) > 0:
                if not recv.poll(min(left, 0.1)):
                    continue
                try:
                    kind, value = recv.recv()
                except EOFError:
                    raise InternalError(f"{label}: the worker process died (exit {child.exitcode})") from None
                if kind == "piece":
                    take(value, show)
                elif kind == "done":
                    return Bounded(value, pieces, deadline, partial)
                elif kind == "bad-input":
                    raise P2Error(value)
                else:
                    raise InternalError(value)
            return Bounded(None, pieces, deadline, partial)
    finally:
        if child.is_alive():
            child.kill()
        child.join()
        recv.close()


def _child(work: Callable[[Report], Any], send) -> None:
    try:
        send.send(("done", work(lambda piece: send.send(("piece", piece)))))
    except P2Error as err:
        send.send(("bad-input", str(err)))
    except Exception as err:  # noqa: BLE001  (reported to the parent, which raises it as internal)
        send.send(("internal", f"{type(err).__name__}: {err}"))


def report_expired(args: argparse.Namespace, bounded: Bounded[Any], what: str,
                   payload: dict[str, Any] | None = None, message: str | None = None) -> int:
    """Print the ``unknown`` outcome of a run stopped at its deadline (with ``payload``: what was found;
    ``message``: instead of counting the ``what`` done)."""
    from p2smt.cli.output import ExitCode, emit

    message = message or bounded.message(what)
    out = (payload or {}) | {"status": "unknown", "message": message}
    emit(args, out, lambda c: c.print(f"[yellow]UNKNOWN[/yellow]: {message}"))
    return ExitCode.UNKNOWN
