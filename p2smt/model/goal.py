"""The goal of a reduction (docs/semantics.md §6): AllReduce, ReduceScatter/HSDP over shard axes, or AllGather.

``Goal`` is what a user asks for (a kind and shard axes, indices into the parallelism axes); ``Sharding`` is
that goal bound to the devices of a placement: each device's rank along the shard axes and the number of
shards, which is all the interpreters need besides the goal groups. The AllReduce goal binds to ``None``, so
every interpreter keeps its AllReduce path unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from math import prod

from p2smt.errors import P2Error
from p2smt.model.collectives import Collective, Group, collective_named
from p2smt.model.hierarchy import SynthesisHierarchy
from p2smt.model.placement import Placement


class GoalKind(StrEnum):
    """What every device ends with: the whole sum, its shard of the sum, or every shard gathered."""

    ALLREDUCE = "allreduce"
    REDUCE_SCATTER = "reduce-scatter"
    ALL_GATHER = "all-gather"

    @property
    def collective(self) -> Collective:
        """The collective that reaches this goal in one step over a goal group."""
        return {"allreduce": Collective.ALL_REDUCE, "reduce-scatter": Collective.REDUCE_SCATTER,
                "all-gather": Collective.ALL_GATHER}[self.value]

    @classmethod
    def parse(cls, name: object) -> GoalKind:
        """Any spelling of the three collective names (``reducescatter``, ``ReduceScatter``, ``reduce_scatter``)
        through ``collective_named``; a one-line P2Error lists the goal names."""
        kinds = {k.collective: k for k in cls}
        return kinds[collective_named(name, kinds, "goal", lambda c: kinds[c].value)]


@dataclass(frozen=True)
class Sharding:
    """A sharded goal on concrete devices: ``rank[d]`` is device d's rank along the shard axes (its shard),
    ``shards`` the number of shards of one goal group."""

    kind: GoalKind
    rank: tuple[int, ...]
    shards: int

    def block(self, chunks: int) -> int:
        """Chunks per shard (``b`` of §6); ``chunks`` must be a multiple of ``shards``."""
        if chunks % self.shards:
            raise P2Error(f"{chunks} chunks do not split into {self.shards} shards")
        return chunks // self.shards

    def shard(self, device: int, chunks: int) -> range:
        """The chunks device ``device`` holds at the end (ReduceScatter) or at the start (AllGather)."""
        b = self.block(chunks)
        return range(self.rank[device] * b, (self.rank[device] + 1) * b)

    def owners(self, group: Group, chunks: int) -> tuple[int, ...]:
        """``owners[r]``: the member of ``group`` whose shard holds chunk r (AllGather's source of chunk r)."""
        b = self.block(chunks)
        by_rank = {self.rank[d]: d for d in group}
        if sorted(by_rank) != list(range(self.shards)) or len(group) != self.shards:
            raise P2Error(f"group {list(group)} does not hold each of the {self.shards} shards once")
        return tuple(by_rank[r // b] for r in range(chunks))

    def describe(self) -> str:
        return f"{self.kind.value} goal over {self.shards} shards"

    def on_hierarchy(self, h: SynthesisHierarchy) -> Sharding:
        """The sharding of ``h``'s synthesis devices (this one binds physical ids): synthesis device s has the
        rank of the physical device it stands for, the same in every replica (a rank reads only reduced digits,
        which the synthesis index keeps)."""
        ranks = {tuple(self.rank[p] for p in replica) for replica in h.replicas}
        if len(ranks) != 1:
            raise P2Error("the shard ranks differ between the hierarchy's replicas")
        return Sharding(self.kind, ranks.pop(), self.shards)


@dataclass(frozen=True)
class Goal:
    """A goal kind and its shard axes ``T`` (indices into the parallelism axes, ascending; empty for
    AllReduce). Build it with ``Goal.of`` to get §6's defaults and checks against the reduction axes."""

    kind: GoalKind = GoalKind.ALLREDUCE
    shard_axes: tuple[int, ...] = ()

    @classmethod
    def of(cls, kind: GoalKind | str, shard_axes: Sequence[int] | None, reduce: Sequence[int]) -> Goal:
        """The goal ``kind`` over ``shard_axes`` (default: none for AllReduce, every reduction axis otherwise),
        refused in one line unless ``T ⊆ S`` (and ``T = S`` for AllGather, ``T ≠ ∅`` for ReduceScatter)."""
        kind = GoalKind.parse(kind)
        reduce = tuple(sorted(set(reduce)))
        if shard_axes is None:
            axes = () if kind is GoalKind.ALLREDUCE else reduce
        else:
            axes = tuple(sorted(set(shard_axes)))
            if len(axes) != len(tuple(shard_axes)):
                raise P2Error(f"shard axes {list(shard_axes)} repeat an axis")
        outside = [a for a in axes if a not in reduce]
        if outside:
            raise P2Error(f"shard axis {outside[0]} is not a reduction axis ({list(reduce)}): a goal shards its "
                          "result over axes it reduces")
        if kind is GoalKind.ALLREDUCE and axes:
            raise P2Error("the allreduce goal has no shard axes (give --goal reduce-scatter to shard the sum)")
        if kind is GoalKind.REDUCE_SCATTER and not axes:
            raise P2Error("the reduce-scatter goal needs at least one shard axis (none is the allreduce goal)")
        if kind is GoalKind.ALL_GATHER and axes != reduce:
            raise P2Error(f"the all-gather goal gathers every reduction axis: its shard axes must be {list(reduce)}, "
                          f"not {list(axes)}")
        return cls(kind, axes)

    @property
    def sharded(self) -> bool:
        return self.kind is not GoalKind.ALLREDUCE

    def describe(self) -> str:
        """``reduce-scatter over axes [0]`` (``allreduce`` alone for the default)."""
        return self.kind.value if not self.sharded else f"{self.kind.value} over axes {list(self.shard_axes)}"

    def to_json(self) -> dict:
        return {"kind": self.kind.value, "shard_axes": list(self.shard_axes)}

    def sharding(self, placement: Placement) -> Sharding | None:
        """Each device's rank along the shard axes (row-major over them, first axis most significant), or
        None for the AllReduce goal."""
        if not self.sharded:
            return None
        placement.check_axes(self.shard_axes)
        coords = placement.coordinates
        rank = [0] * placement.num_devices
        for d in range(placement.num_devices):
            r = 0
            for a in self.shard_axes:
                r = r * placement.axes[a] + int(coords[d, a])
            rank[d] = r
        return Sharding(self.kind, tuple(rank), prod(placement.axes[a] for a in self.shard_axes))


ALLREDUCE = Goal()
"""The default goal: every device ends with the whole sum of its reduction group."""
