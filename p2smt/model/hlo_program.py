"""What p2smt reads from an XLA module: its reduction collectives in program order, checked to be one chain.

Both readers (``hlo.py`` for HLO text, ``stablehlo.py`` for StableHLO) produce these values and apply the
same two rules before a collective joins the program:

* **sums only**: the collective's reduction computation adds (p2smt's rules are those of a sum; a
  maximum or a product would be proved as if it were one);
* **one chain**: every collective after the first reads, through any other ops, the result of the one
  before it. Two reductions of the same input (``psum(x, 'a') + psum(x, 'b')``) are not one program of
  P²'s semantics, and chaining them would prove a double count.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from p2smt.errors import P2Error
from p2smt.model.collectives import Collective, Group
from p2smt.model.replica_groups import DeviceSpace, GroupMode

SUM_OPS = frozenset({"add", "parameter", "tuple", "convert", "copy", "bitcast", "return"})
"""Ops a reduction computation may hold and still be a sum (the last four move or widen values)."""


@dataclass(frozen=True)
class HloCollective:
    """One reduction collective as written: line, op, collective, groups (module ids), mode, dimension."""

    line: int
    op: str
    collective: Collective
    groups: tuple[Group, ...]
    mode: GroupMode
    dimension: int | None


@dataclass(frozen=True)
class HloProgram:
    """The reduction collectives of a module in program order, and the replicas × partitions it runs on."""

    name: str
    dialect: str
    space: DeviceSpace
    collectives: tuple[HloCollective, ...]

    def to_json(self) -> dict:
        return {"module": self.name, "dialect": self.dialect, "replicas": self.space.replicas,
                "partitions": self.space.partitions,
                "collectives": [{"line": c.line, "op": c.op, "collective": c.collective.value,
                                 "replica_groups": [list(g) for g in c.groups], "mode": c.mode.value,
                                 "dimension": c.dimension} for c in self.collectives]}


def require_sum(ops: Iterable[str], what: str, where: str, line: int, op: str) -> None:
    """Refuse a reduction computation (``what`` names it) whose ops are not a sum."""
    ops = list(ops)
    other = next((o for o in ops if o not in SUM_OPS), None)
    if other is not None or "add" not in ops:
        found = other or "no add"
        raise P2Error(f"{where}:{line}: {op} reduces with {found} ({what}); p2smt proves sums only")


class Chain:
    """The collectives read so far and which of them each value depends on (through any ops)."""

    def __init__(self, where: str):
        self.where = where
        self.collectives: list[HloCollective] = []

    def add(self, found: HloCollective, uses: frozenset[int]) -> frozenset[int]:
        """Append ``found`` (its operands depend on the collectives ``uses``); the result's dependencies."""
        index = len(self.collectives)
        if index and index - 1 not in uses:
            prev = self.collectives[-1]
            raise P2Error(f"{self.where}:{found.line}: {found.op} does not use the result of the {prev.op} at line "
                          f"{prev.line}: p2smt verifies one chain of collectives on one buffer, and independent "
                          "reductions chained would be proved as one program; give each chain its own module")
        self.collectives.append(found)
        return uses | {index}
