"""The five collectives of the P² DSL and the explicit plan form (collective, replica groups)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from p2smt.errors import P2Error


class Collective(str, Enum):
    """A collective communication primitive; the value is the DSL spelling."""

    ALL_REDUCE = "AllReduce"
    REDUCE_SCATTER = "ReduceScatter"
    ALL_GATHER = "AllGather"
    REDUCE = "Reduce"
    BROADCAST = "Broadcast"

    @classmethod
    def parse(cls, name: str) -> Collective:
        """Accept the DSL spelling or a lower-case/snake-case alias (``all_reduce``, ``allreduce``)."""
        key = name.replace("_", "").replace("-", "").lower()
        for c in cls:
            if c.value.lower() == key:
                return c
        known = ", ".join(c.value for c in cls)
        raise P2Error(f"unknown collective {name!r}; known: {known}")


# short names for the encodings and interpreters, which branch on collectives a lot
AR, RS, AG, RED, BC = Collective

Group = tuple[int, ...]
"""Devices of one communicator in rank order; rank 0 is the root of Reduce and Broadcast."""


@dataclass(frozen=True)
class ExplicitStep:
    """One collective run concurrently over disjoint replica groups (XLA ``replica_groups``)."""

    collective: Collective
    groups: tuple[Group, ...]


ExplicitPlan = tuple[ExplicitStep, ...]
