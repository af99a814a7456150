"""What the CLI prints: exit codes, ``--json`` payloads or rich renderings on stdout."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from enum import IntEnum
from typing import Any

from rich.console import Console


class ExitCode(IntEnum):
    """The process exit codes of every sub-command."""

    OK = 0
    FAIL = 1  # a wrong plan, an incomplete search, a failed run
    BAD_INPUT = 2
    INTERNAL = 3  # a broken invariant (e.g. an engine and the interpreter disagree)
    UNKNOWN = 4  # a solver or time limit: neither proved nor refuted
    INTERRUPTED = 130


def console() -> Console:
    """The stdout console of human output (at least 100 columns wide, no auto-highlighting)."""
    return Console(highlight=False, width=max(100, Console().width))


def emit(args: argparse.Namespace, payload: dict[str, Any], render: Callable[[Console], None]) -> None:
    """Print ``payload`` as JSON under ``--json``, else ``render`` it for people."""
    if getattr(args, "json", False):
        print(json.dumps(payload, indent=2))
    else:
        render(console())
