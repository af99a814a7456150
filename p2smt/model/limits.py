"""Size and time limits every layer checks the same way (no imports: the command line reads them at start-up)."""

from __future__ import annotations

__all__ = ["MAX_DEVICES", "MAX_SECONDS"]

MAX_DEVICES = 1 << 16
"""Devices of the largest system p2smt builds (placements, and every command's system): beyond, memory grows
without bound."""

MAX_SECONDS = 1e6
"""The longest timeout or deadline accepted (about 11.6 days; Z3's millisecond timeouts and Python's waits
overflow far above): ``--timeout``, ``--deadline``, a grid's ``timeout_s``."""
