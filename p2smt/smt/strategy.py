"""Search strategies: what the one solver loop (``smt.engine.run_encoding``) asks and what it keeps.

An encoding only builds formulas (declare, decode, block, refine); a strategy decides which queries the
loop poses (``phases``), which decoded models go on to the encoding's confirmation (``admit``: a bound
strategy excludes the others by clauses of its own) and what happens once a program is accepted. The
default, ``Enumerate``, asks for every valid program, length by length.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import z3

from p2smt.smt.base import Encoding, Program

SAT_PARAMS = {"sat.simplify.delay": 1_000_000}
"""SAT-core settings of an enumeration's solver: no in-processing simplification between its many short
checks (measured on P²'s problems: 35-40% less solving time for the completeness certificate's unsat
proofs; for the pure Z3 engine about 8% less CPU in interleaved runs, within this machine's noise, and
identical conflicts and propagations on the one problem compared)."""


@dataclass(frozen=True)
class Phase:
    """One family of queries: ``name`` (SMT-LIB2 file names), the ``length`` every model must have
    (None: any), and the assumptions of each check (asked anew before every check)."""

    name: str
    length: int | None
    assumptions: Callable[[], list[z3.BoolRef]]


class Strategy(ABC):
    """The default hooks: every phase's models are all confirmed, accepted programs are only reported."""

    batch = True  # candidates may be confirmed in batches when the encoding supports it
    implied = False  # also confirm the candidates each accepted program implies (``Encoding.implied``)

    @abstractmethod
    def phases(self, enc: Encoding, max_len: int) -> Iterator[Phase]:
        """The solver phases to run (e.g. one per program length), in order."""

    def solver_params(self, enc: Encoding) -> dict[str, Any]:
        """Parameters of the loop's solver, set when it is created (before anything is asserted)."""
        return {}

    def begin(self, enc: Encoding, solver: z3.Solver) -> None:
        """Called once the problem is declared, before the first check."""

    def admit(self, solver: z3.Solver, model: z3.ModelRef, program: Program) -> bool:
        """Whether the decoded candidate goes on to the encoding's confirmation; when False the
        strategy has excluded it itself."""
        return True

    def accepted(self, solver: z3.Solver, program: Program) -> None:
        """A confirmed program, already excluded by its blocking clause."""

    def statistics(self) -> dict[str, Any]:
        return {}


class Enumerate(Strategy):
    """Every valid program of 1..max_len steps, lengths in increasing order through assumptions; the
    programs accepted ones imply are confirmed without a model of their own."""

    implied = True

    def solver_params(self, enc: Encoding) -> dict[str, Any]:
        return SAT_PARAMS if enc.logic == "QF_FD" else {}

    def phases(self, enc: Encoding, max_len: int) -> Iterator[Phase]:
        for length in range(1, max_len + 1):
            yield Phase(f"len{length}", length, lambda length=length: enc.length_assumptions(length))
