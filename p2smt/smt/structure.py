"""The shape of a synthesis problem as the encodings see it: distinct groups, each device's slots, and
the coarsest *stable partition* of the devices.

Two devices are in the same cell of the stable partition when, for every candidate, both are in no
group or both play the same role (root or not) in groups of the same size whose root lies in the same
cell and whose members fill the cells with the same multiplicities, and both have goal groups of the
same size. By induction over the steps, every quantity whose Hoare rule depends only on the group as a
set and on its root (a device's number of non-empty chunks, its number of contributions) is then equal
on all devices of a cell, for every program: per-cell variables describe them exactly.
"""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

from p2smt.model.problem import SynthesisProblem


class Slot(NamedTuple):
    """A device is member ``rank`` of group ``group`` (index within the candidate) of candidate ``cand``."""

    cand: int
    group: int
    rank: int


class Structure:
    """Derived, immutable facts about a problem (no Z3 here)."""

    def __init__(self, problem: SynthesisProblem):
        self.problem = problem
        self.k = problem.num_devices
        self.groups: list[tuple[int, ...]] = []
        index: dict[tuple[int, ...], int] = {}
        self.cand_groups: list[tuple[int, ...]] = []
        for cand in problem.candidates:
            ids = []
            for g in cand.groups:
                g = tuple(g)
                if g not in index:
                    index[g] = len(self.groups)
                    self.groups.append(g)
                ids.append(index[g])
            self.cand_groups.append(tuple(ids))
        self.slots: list[list[Slot]] = [[] for _ in range(self.k)]
        for c, ids in enumerate(self.cand_groups):
            for gi, gid in enumerate(ids):
                for rank, d in enumerate(self.groups[gid]):
                    self.slots[d].append(Slot(c, gi, rank))
        self.goal_size = [0] * self.k
        self.goal_owner: dict[int, int] = {}
        for i, g in enumerate(problem.goal_groups):
            for d in g:
                self.goal_size[d] = len(g)
                self.goal_owner[d] = i
        self.cell = stable_partition(self)
        self.cells = max(self.cell) + 1 if self.k else 0
        self.rep = [self.cell.index(x) for x in range(self.cells)]

    def group_of(self, c: int, gi: int) -> tuple[int, ...]:
        return self.groups[self.cand_groups[c][gi]]

    def cell_counts(self, group: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
        """(cell, multiplicity) of a group's members, sorted by cell."""
        return tuple(sorted(Counter(self.cell[d] for d in group).items()))


class Quotient:
    """The devices of ``s`` up to a stable partition that individualizes ``device``: one device per cell.

    Every group becomes the tuple of its members' cells in rank order (a cell may repeat), so that
    the first-chunk track of column ``device`` (whose values are equal on the devices of a cell, by
    induction over the steps) can be followed on one device per cell. It offers what
    ``unroll.Semantics`` reads of a ``Structure``.
    """

    def __init__(self, s: Structure, device: int):
        self.base = s
        self.problem = s.problem
        owner = s.goal_owner.get(device)
        same_goal = [owner is not None and s.goal_owner.get(d) == owner for d in range(s.k)]
        self.cell = stable_partition(s, [(d == device, same_goal[d]) for d in range(s.k)])
        self.k = max(self.cell) + 1 if s.k else 0
        self.rep = [self.cell.index(x) for x in range(self.k)]
        self.device = self.cell[device]
        self.goal_size = [s.goal_size[d] for d in self.rep]
        self.same_goal = [same_goal[d] for d in self.rep]
        self.groups: list[tuple[int, ...]] = []
        index: dict[tuple[int, ...], int] = {}
        self.cand_groups: list[tuple[int, ...]] = []
        for ids in s.cand_groups:
            out = []
            for gid in ids:
                g = tuple(self.cell[d] for d in s.groups[gid])
                if g not in index:
                    index[g] = len(self.groups)
                    self.groups.append(g)
                out.append(index[g])
            self.cand_groups.append(tuple(out))

    def group_of(self, c: int, gi: int) -> tuple[int, ...]:
        return self.groups[self.cand_groups[c][gi]]


def stable_partition(s: Structure, initial: list | None = None) -> list[int]:
    """Colour refinement over (role, root's cell, members' cells, size) per group structure, from the
    goal sizes (and ``initial`` colours when given)."""
    structures: dict[tuple[int, ...], None] = {}
    for ids in s.cand_groups:
        structures.setdefault(ids, None)
    member_of: list[dict[tuple[int, ...], int]] = [{} for _ in range(s.k)]
    for ids in structures:
        for gid in ids:
            for d in s.groups[gid]:
                member_of[d][ids] = gid
    colour = _normalize([(s.goal_size[d], initial[d] if initial else None) for d in range(s.k)])
    used = sorted({gid for ids in structures for gid in ids})
    while True:
        sig = {
            gid: (colour[s.groups[gid][0]], len(s.groups[gid]),
                  tuple(sorted(Counter(colour[m] for m in s.groups[gid]).items())))
            for gid in used
        }  # once per group, not once per member: linear instead of quadratic in the devices
        sigs = []
        for d in range(s.k):
            parts = [colour[d]]
            for ids in structures:
                gid = member_of[d].get(ids)
                if gid is None:
                    parts.append(None)
                    continue
                root, size, members = sig[gid]
                parts.append((s.groups[gid][0] == d, root, size, members))
            sigs.append(tuple(parts))
        new = _normalize(sigs)
        if max(new, default=-1) == max(colour, default=-1):
            return new
        colour = new


def _normalize(keys: list) -> list[int]:
    """Renumber keys by first occurrence, so cell ids are deterministic and device 0 is in cell 0."""
    ids: dict = {}
    return [ids.setdefault(key, len(ids)) for key in keys]


def goal_is_terminal(problem: SynthesisProblem) -> bool:
    """True when no step can follow the goal: progress is required and every group of every candidate
    has >= 2 members inside one goal group (a next step would double count, overlap, or add nothing).
    Otherwise an engine must also rule out reaching the goal early, as the enumerative search stops there."""
    if not problem.require_progress or problem.sharding is not None:  # a sharded goal: left to the search
        return False
    owner = {d: i for i, g in enumerate(problem.goal_groups) for d in g}
    for cand in problem.candidates:
        for g in cand.groups:
            owners = {owner.get(d) for d in g}
            if len(g) < 2 or None in owners or len(owners) != 1:
                return False
    return True
