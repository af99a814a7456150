"""Errors that the CLI reports as one line and exit code 2 (bad input) or 3 (internal)."""

from __future__ import annotations


class P2Error(Exception):
    """Bad input or an impossible request: the CLI prints the message, exits 2, no traceback."""


class PlanSyntaxError(P2Error):
    """A reduction plan that does not parse; carries the 1-based line and column."""

    def __init__(self, message: str, line: int, column: int, source: str | None = None):
        where = f"{source}:" if source else ""
        super().__init__(f"{where}{line}:{column}: {message}")
        self.line = line
        self.column = column


class InternalError(Exception):
    """A broken invariant inside p2smt (e.g. an engine and the interpreter disagree)."""
