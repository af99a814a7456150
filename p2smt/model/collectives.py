"""The five collectives of the P² DSL and the explicit plan form (collective, replica groups)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
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
        """Accept the DSL spelling or any alias ``collective_named`` takes (``all_reduce``, ``all-reduce``)."""
        return collective_named(name)

    @property
    def short(self) -> str:
        """The lower-case name of ``p2smt cost --collective`` and its output (``reducescatter``)."""
        return self.value.lower()


def collective_key(name: object) -> str:
    """The spelling-free key of a collective name: case, ``-``, ``_`` and spaces dropped (``reduce-scatter``,
    ``ReduceScatter`` and ``reduce_scatter`` are one name)."""
    return "".join(ch for ch in str(name) if ch not in "-_ ").lower()


def collective_named(name: object, among: Iterable[Collective] = Collective, what: str = "collective",
                     spelling: Callable[[Collective], str] = lambda c: c.value) -> Collective:
    """The one parser of collective names (DSL plans, ``--goal``, ``--collective``, profiles, the API): the
    collective of ``among`` whose key is ``name``'s, or a one-line P2Error listing ``among`` as ``spelling``
    writes them (each place's canonical names)."""
    key = collective_key(name)
    for c in among:
        if collective_key(c.value) == key:
            return c
    choices = ", ".join(spelling(c) for c in among)
    raise P2Error(f"unknown {what} {str(name)[:80]!r}; choose from {choices}")


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
