"""A bound on the memory of one Z3 encoding run: an up-front estimate that refuses a size past it, and a
cap Z3's solver enforces itself, after which the run ends ``unknown`` with the reason.

Z3 has two kinds of memory limits (docs/usage.md, "The Z3 encodings' memory"): the global ``memory_max_size`` and
``memory_high_watermark`` (process-wide, not used here: the project keeps no global solver state, and they
cannot be set and restored around one call either: past ``memory_max_size`` Z3 flags the process out of
memory for good, and both are safe to set only before threads start) and the solver parameter
``max_memory`` (megabytes), set on one solver. The SAT core that every shipped
encoding's solver runs on (``QF_FD``) compares Z3's allocation counter with it at its checkpoints and then
answers ``unknown`` ("max. memory exceeded"); its preprocessing may instead raise that message as an error,
which ``memory_reason`` recognizes. Z3's counter is the process's, not the solver's: the cap bounds all
of Z3 in the process while that solver checks.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass

from p2smt.errors import P2Error

GIB = 1 << 30
MIB = 1 << 20
DEFAULT_FRACTION = 0.5
"""``--memory`` by default: this share of the machine's RAM (the rest for Python's terms, the OS and others)."""
FALLBACK_BYTES = 8 * GIB
"""The machine's RAM when the OS does not say (``os.sysconf`` unavailable)."""
MOST_GIB = 1 << 20
"""The largest ``--memory`` taken (a PiB): a larger figure is a typo, not a machine."""
OVERSHOOT = 2
"""Z3 passes its ``max_memory`` before it stops: it checks between steps of its work, not at each allocation.
bitvec's first query (length 4) stopped at 3.75 GB of Z3 memory under a parameter of 1.5 or 2 GiB at 48 devices,
at 7.47 GB under 3 or 4 GiB at 64 (the process 4.0 and 7.8 GB); the solver is given the cap divided by this, so
a run stops nearer the cap itself, and the estimates keep out the sizes whose first step alone passes it."""
MEMORY_MESSAGES = ("max. memory exceeded", "out of memory")
"""Z3's words for a run past its memory: the ``max_memory`` cap's, and an allocation that failed."""


def machine_bytes() -> int:
    """The machine's physical memory in bytes (``FALLBACK_BYTES`` when the OS does not say)."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return FALLBACK_BYTES


def gib(n: float) -> str:
    """Bytes as GiB in words, e.g. ``12.3 GiB`` (``0.05 GiB`` for small figures)."""
    value = n / GIB
    return f"{value:,.1f} GiB" if value >= 1 else f"{value:.2f} GiB"


@dataclass(frozen=True)
class MemoryCap:
    """At most ``gib`` GiB for one Z3 encoding run: sizes whose estimate exceeds it are refused up front,
    and Z3's solver stops once past it (``unknown``, with the reason; ``OVERSHOOT``)."""

    gib: float

    def __post_init__(self) -> None:
        if isinstance(self.gib, bool) or not isinstance(self.gib, int | float) or not math.isfinite(self.gib) \
                or not 0 < self.gib <= MOST_GIB:
            raise P2Error(f"--memory must be a positive number of GiB up to {MOST_GIB:,}, got {self.gib!r}")

    @classmethod
    def default(cls) -> MemoryCap:
        """``DEFAULT_FRACTION`` of the machine's RAM."""
        return cls(round(machine_bytes() * DEFAULT_FRACTION / GIB, 1) or 0.1)

    @classmethod
    def of(cls, gib_or_none: float | None) -> MemoryCap:
        """``--memory`` as given, else the default."""
        return cls.default() if gib_or_none is None else cls(gib_or_none)

    @property
    def bytes(self) -> int:
        return int(self.gib * GIB)

    @property
    def megabytes(self) -> int:
        """Z3's ``max_memory`` (megabytes, at least 1): the cap less Z3's overshoot."""
        return max(1, self.bytes // OVERSHOOT // MIB)

    def arm(self, solver) -> None:
        """Let ``solver`` (any z3 solver, or a wrapper passing ``set`` on) allocate up to the cap."""
        solver.set("max_memory", self.megabytes)

    def check(self, name: str, estimate: int, devices: int, max_len: int, instead: Iterable[str]) -> None:
        """Refuses (P2Error, one line) a run whose ``estimate`` (bytes) exceeds the cap, naming the size,
        the estimate and ``instead``: what to use instead."""
        if estimate <= self.bytes:
            return
        ways = [*instead, "a larger --memory"]
        options = ", ".join(ways[:-1]) + f" or {ways[-1]}" if len(ways) > 1 else ways[0]
        raise P2Error(f"{devices:,} devices, up to {max_len} steps: the {name} encoding needs about {gib(estimate)} "
                      f"by its estimate, more than --memory {self.gib:g} GiB; use {options}")

    def reason(self, z3_words: str) -> str:
        """Why a run ended unknown at the cap, in words."""
        return f"Z3 stopped at the memory cap of {self.gib:g} GiB ({z3_words}; --memory raises it)"


def memory_reason(message: object) -> str | None:
    """Z3's words when ``message`` (a reason_unknown or an error's text) says it ran out of memory, else None."""
    text = message.decode(errors="replace") if isinstance(message, bytes) else str(message)
    return next((m for m in MEMORY_MESSAGES if m in text), None)
