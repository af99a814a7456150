"""A third concrete interpreter: each device's k×k chunk/contribution matrix as one integer.

Bit ``r * k + c`` of a device's matrix is set when its chunk r holds device c's contribution
(P²'s Hoare rules, MLSys 2022 §4). Every rule becomes a few bitwise operations on whole matrices:
disjoint contributions is ``a & b == 0``, the union is ``a | b``, Broadcast's "below the root" is
``m & ~root == 0``. Each device also carries its set of non-empty chunks (``rows``, k bits), which
every rule derives from its inputs, so no rule scans a matrix. It decides validity only (no
violation report) and shares no code with ``dense.py``, ``pieces.py`` or the encodings. Its cost is
O(k²/64) word operations per device and step: meant for the small generic instances the
``symmetric`` engine searches, exact at any size.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from p2smt.errors import P2Error
from p2smt.model.collectives import AG, AR, BC, RED, RS, Collective, Group

Device = tuple[int, int]  # (non-empty chunks as a k-bit set, the k×k matrix as a k²-bit set)
State = tuple[Device, ...]
EMPTY: Device = (0, 0)


@dataclass(frozen=True)
class Machine:
    """The fixed facts of one problem size: k devices = k chunks = k contributors."""

    k: int

    @cached_property
    def row_masks(self) -> tuple[int, ...]:
        full = (1 << self.k) - 1
        return tuple(full << (r * self.k) for r in range(self.k))

    def expand(self, rows: int) -> int:
        """The matrix bits of the chunks in ``rows``."""
        out = 0
        while rows:
            low = rows & -rows
            out |= self.row_masks[low.bit_length() - 1]
            rows ^= low
        return out

    def initial(self) -> State:
        """Device d holds its own contribution in every chunk."""
        k = self.k
        column = sum(1 << (r * k) for r in range(k))
        return tuple(((1 << k) - 1, column << d) for d in range(k))

    def goal(self, goal_groups: Sequence[Group]) -> State:
        """Every chunk of device d holds exactly the contributions of d's reduction group."""
        k = self.k
        column = sum(1 << (r * k) for r in range(k))
        out = [EMPTY] * k
        for g in goal_groups:
            mask = sum(column << c for c in g)
            for d in g:
                out[d] = ((1 << k) - 1, mask)
        return tuple(out)

    def blocks(self, rows: int, m: int) -> list[int]:
        """``rows`` cut into ``m`` equal blocks of consecutive chunks (``m`` divides its size)."""
        size = rows.bit_count() // m
        out = []
        for _ in range(m):
            block = 0
            for _ in range(size):
                low = rows & -rows
                block |= low
                rows ^= low
            out.append(block)
        return out

    @staticmethod
    def reducible(members: Sequence[Device]) -> bool:
        """AllReduce's, ReduceScatter's and Reduce's shared precondition: the members hold the same
        chunks and no contribution twice."""
        rows = members[0][0]
        union = 0
        for r, mat in members:
            if r != rows or union & mat:
                return False
            union |= mat
        return True

    def apply_group(self, coll: Collective, members: list[Device]) -> list[Device] | None:
        """The members' new states (rank order; rank 0 is the root), or None when a precondition fails."""
        m = len(members)
        if coll is AR or coll is RS or coll is RED:
            if not self.reducible(members):
                return None
            rows = members[0][0]
            union = 0
            for _, mat in members:
                union |= mat
            if coll is AR:
                return [(rows, union)] * m
            if coll is RED:
                return [(rows, union)] + [EMPTY] * (m - 1)
            if rows.bit_count() % m:
                return None
            return [(b, union & self.expand(b)) for b in self.blocks(rows, m)]
        if coll is AG:
            rows = union = 0
            count = members[0][0].bit_count()
            for r, mat in members:
                if r & rows or r.bit_count() != count:
                    return None
                rows |= r
                union |= mat
            return [(rows, union)] * m
        if coll is BC:
            root = members[0]
            below = ~root[1]
            if any(mat & below for _, mat in members) or all(d == root for d in members):
                return None
            return [root] * m
        raise P2Error(f"unknown collective {coll!r}")

    def step(
        self, state: State, coll: Collective, groups: Sequence[Group], require_progress: bool
    ) -> State | None:
        """One instruction on every group (devices in no group keep their state); None if invalid."""
        new = None
        apply = self.apply_group
        for g in groups:
            members = [state[d] for d in g]
            out = apply(coll, members)
            if out is None or (require_progress and out == members):
                return None
            if new is None:
                new = list(state)
            for d, s in zip(g, out):
                new[d] = s
        return state if new is None else tuple(new)


def is_valid(k: int, steps: Sequence[tuple[Collective, Sequence[Group]]], goal_groups: Sequence[Group],
             require_progress: bool = True) -> bool:
    """Does the program satisfy every precondition and end in the goal state?"""
    machine = Machine(k)
    state = machine.initial()
    for coll, groups in steps:
        state = machine.step(state, coll, groups, require_progress)
        if state is None:
            return False
    return state == machine.goal(goal_groups)
