"""What the CLI prints and writes: exit codes, ``--json`` or rich output, files written whole or not at all."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import IntEnum
from pathlib import Path
from typing import Any

from rich.console import Console

from p2smt.errors import InternalError, P2Error
from p2smt.model.paths import output_file  # noqa: F401  (re-exported: every output is written by model/paths)


class ExitCode(IntEnum):
    """The process exit codes of every sub-command."""

    OK = 0
    FAIL = 1  # a wrong plan, an incomplete search, a failed run
    BAD_INPUT = 2
    INTERNAL = 3  # a broken invariant (e.g. an engine and the interpreter disagree)
    UNKNOWN = 4  # a solver or time limit: neither proved nor refuted
    INTERRUPTED = 130  # Ctrl-C (SIGINT); SIGTERM gives 143: 128 + the signal's number, as a shell reports it
    TERMINATED = 143


class OutputError(Exception):
    """Standard output cannot take the result: closed, a full disk, an encoding without one of its characters."""


class OutputGone(OutputError):
    """The reader of standard output went away (a broken pipe)."""


class GuardedStream:
    """A text stream whose write failures become ``OutputError`` (one line, exit 2) or ``OutputGone``; rich
    and print write through it (rich would turn a broken pipe into its own silent exit 1)."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        return self._guarded(self.stream.write, text)

    def flush(self) -> None:
        self._guarded(self.stream.flush)

    def __getattr__(self, name: str):
        return getattr(self.stream, name)

    def _guarded(self, call, *args):
        try:
            return call(*args)
        except BrokenPipeError:
            raise OutputGone("the reader of standard output went away") from None
        except UnicodeEncodeError as err:
            char = err.object[err.start:err.end]
            raise OutputError(f"cannot write output: the output encoding {err.encoding!r} has no {char!r} "
                              "(set PYTHONIOENCODING=utf-8, or use --json)") from None
        except (OSError, ValueError) as err:  # ValueError: a closed file
            raise OutputError(f"cannot write output: {getattr(err, 'strerror', None) or err}") from None


@contextmanager
def guarded_stdout() -> Iterator[None]:
    """``sys.stdout`` behind a ``GuardedStream`` for the block; refused up front when it is closed (``>&-``)."""
    import sys

    if sys.stdout is None:
        raise OutputError("cannot write output: standard output is closed")
    saved = sys.stdout
    sys.stdout = GuardedStream(saved)
    try:
        yield
        sys.stdout.flush()  # here, not at exit, where a failure is only a warning
    finally:
        sys.stdout = saved


def console() -> Console:
    """The stdout console of human output (at least 100 columns wide, no auto-highlighting)."""
    return Console(highlight=False, width=max(100, Console().width))


def counted(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless n is 1 ("1 step", "3 steps")."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def emit(args: argparse.Namespace, payload: dict[str, Any], render: Callable[[Console], None]) -> None:
    """Print ``payload`` as strict JSON (never NaN/Infinity) under ``--json``, else ``render`` it for people."""
    if getattr(args, "json", False):
        try:
            text = json.dumps(payload, indent=2, allow_nan=False)
        except ValueError as err:
            raise InternalError(f"a non-finite number in the JSON output: {err}") from None
        print(text)
    else:
        render(console())


def _parent_folder(path: Path, flag: str) -> Path:
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        what = "is not a folder" if parent.exists() else "does not exist"
        raise P2Error(f"{flag} {str(path)!r}: {str(parent)!r} {what}")
    return parent


def png_path(path: str | Path, flag: str) -> Path:
    """A picture's name, refused unless it ends in ``.png`` (p2smt writes pictures as PNG only)."""
    if not str(path).lower().endswith(".png"):
        raise P2Error(f"{flag}: pictures are written as PNG; give a name ending in .png, got {str(path)!r}")
    return Path(path)


def folder_path(path: str | Path, flag: str) -> Path:
    """``path`` checked up front as a folder to fill: a folder or missing in an existing folder."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise P2Error(f"{flag} {str(out)!r} exists and is not a folder")
    _parent_folder(out, flag)
    return out


def output_folder(path: str | Path, flag: str) -> Path:
    """``path`` as a folder to fill: created if missing (its parent must exist), refused if it is a file."""
    out = folder_path(path, flag)
    try:
        out.mkdir(exist_ok=True)
    except OSError as err:
        raise P2Error(f"{flag} {str(out)!r}: cannot create the folder: {err.strerror}") from None
    return out
