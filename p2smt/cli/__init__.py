"""The ``p2smt`` command line: one module per sub-command, shared option groups declared once."""

from p2smt.cli.main import main

__all__ = ["main"]
