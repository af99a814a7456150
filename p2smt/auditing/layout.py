"""What the audit knows of a value inside a shard_map body, per mesh axis: replicated, sharded, a partial sum.

This is the state XLA's SPMD partitioner tracks (``docs/audit.md``). For a manual mesh axis ``a`` a local
value is, relative to the global value the program means:

* **replicated** (R): every device along ``a`` holds the global value;
* **sharded** along a dimension (S): each device holds its block, in the order of its position on ``a``;
* a **partial sum** (P): the global value is the sum, over the devices along ``a``, of the local values;
* **varying** (V): it differs along ``a`` in a way the audit does not follow as a shard (it depends on the
  device's position, e.g. through ``axis_index``);
* **unknown** (U): it passed through an op the audit cannot follow, or through a finding.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum

__all__ = ["AxisState", "Finding", "FindingKind", "Layout", "replicated"]


class AxisState(str, Enum):
    """A value's state along one mesh axis."""

    REPLICATED = "replicated"
    SHARDED = "sharded"
    PARTIAL = "partial"
    VARYING = "varying"
    UNKNOWN = "unknown"


class FindingKind(str, Enum):
    """The kinds of step-level errors the audit reports."""

    NONLINEAR_ON_PARTIAL = "nonlinear-on-partial-sum"
    ADDED_TO_PARTIAL = "replicated-added-to-partial-sum"
    SUM_OF_REPLICATED = "sum-of-replicated-value"
    PARTIAL_TO_OUTPUT = "partial-sum-reaches-output"
    VARYING_OUTPUT = "output-varies-across-axis"
    SHARDING_MISMATCH = "output-sharding-mismatch"
    ONE_SIDED_CONTRACTION = "contraction-sharded-on-one-side"
    GATHER_OF_REPLICATED = "gather-of-replicated-value"


@dataclass(frozen=True)
class Finding:
    """A step-level error: what, where (``location``: line:column or source), the op, the axis and, for an
    output, its index."""

    kind: FindingKind
    message: str
    op: str
    location: str
    axis: str | None = None
    output: int | None = None

    def to_json(self) -> dict:
        return {"kind": self.kind.value, "message": self.message, "op": self.op, "location": self.location,
                "axis": self.axis, "output": self.output}


@dataclass(frozen=True)
class Layout:
    """A local value's layout: per local dimension the mesh axes sharding it (major first), the axes it is a
    partial sum over, and the axes along which it varies untracked or is unknown (each with why)."""

    dims: tuple[tuple[str, ...], ...]
    partial: frozenset[str] = frozenset()
    varying: tuple[tuple[str, str], ...] = ()
    unknown: tuple[tuple[str, str], ...] = field(default=())
    mixed: frozenset[str] = frozenset()  # sharded axes whose blocks each had a replicated value added
    zero: bool = False  # a constant zero: replicated, every shard and every partial sum of it at once

    def keep(self, dims: tuple[tuple[str, ...], ...] | None = None, partial: frozenset[str] | None = None) -> Layout:
        """The same value under new ``dims`` or ``partial`` (the rest carried over; ``mixed`` kept only along
        axes that still shard it)."""
        dims = self.dims if dims is None else dims
        sharded = {a for axes in dims for a in axes}
        return Layout(dims, self.partial if partial is None else partial, self.varying, self.unknown,
                      self.mixed & sharded)

    def state(self, axis: str) -> AxisState:
        """This value's state along ``axis`` (unknown wins over varying, over partial, over sharded)."""
        if any(a == axis for a, _ in self.unknown):
            return AxisState.UNKNOWN
        if any(a == axis for a, _ in self.varying):
            return AxisState.VARYING
        if axis in self.partial:
            return AxisState.PARTIAL
        if self.sharded_dim(axis) is not None:
            return AxisState.SHARDED
        return AxisState.REPLICATED

    def sharded_dim(self, axis: str) -> int | None:
        return next((d for d, axes in enumerate(self.dims) if axis in axes), None)

    def why(self, axis: str) -> str:
        """Why the value is unknown or varying along ``axis``."""
        return next((w for a, w in self.unknown + self.varying if a == axis), "")

    def lost(self, axis: str, why: str) -> Layout:
        """The same value, unknown along ``axis`` (its sharding and partial sum along it forgotten)."""
        if self.state(axis) is AxisState.UNKNOWN:
            return self
        return Layout(tuple(tuple(a for a in axes if a != axis) for axes in self.dims), self.partial - {axis},
                      tuple(v for v in self.varying if v[0] != axis), self.unknown + ((axis, why),),
                      self.mixed - {axis})

    def varies(self, axis: str, why: str) -> Layout:
        """The same value, varying along ``axis`` untracked."""
        if self.state(axis) in (AxisState.UNKNOWN, AxisState.VARYING):
            return self
        return replace(self.lost(axis, why), unknown=self.unknown, varying=self.varying + ((axis, why),))

    def joined(self, other: Layout, axes: tuple[str, ...], why: str) -> Layout:
        """What is known of a value that is ``self`` or ``other`` (two branches, two loop iterations): the
        axes along which they differ become unknown, with ``why``."""
        if self == other or other.zero:
            return self
        if self.zero:
            return other
        out = self
        for a in axes:
            d, e = self.sharded_dim(a), other.sharded_dim(a)
            same = self.state(a) is other.state(a) and d == e and (d is None or self.dims[d] == other.dims[e])
            if not same:
                out = out.lost(a, why)
        return out

    def describe(self, axes: tuple[str, ...]) -> str:
        """Per axis, e.g. ``data: sharded(dim 0), tensor: partial``."""
        parts = []
        for a in axes:
            s = self.state(a)
            if s is AxisState.SHARDED:
                parts.append(f"{a}: sharded(dim {self.sharded_dim(a)})")
            elif s in (AxisState.UNKNOWN, AxisState.VARYING):
                parts.append(f"{a}: {s.value} ({self.why(a)})")
            else:
                parts.append(f"{a}: {s.value}")
        return ", ".join(parts)


def replicated(rank: int) -> Layout:
    """A value every device holds whole (a constant, an iota)."""
    return Layout(((),) * rank)
