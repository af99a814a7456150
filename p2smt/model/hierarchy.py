"""Synthesis hierarchies (a)–(d) of docs/semantics.md §2: the level structure programs are synthesized over.

Every kind has a ``(root, 1)`` level in front. A synthesis device index is the mixed-radix number of
its coordinates over the hierarchy's levels; ``replicas`` maps synthesis indices to physical ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from math import prod
from typing import Literal

import numpy as np

from p2smt.errors import P2Error
from p2smt.model.collectives import Group
from p2smt.model.placement import Placement, mixed_radix

HierarchyKind = Literal["a", "b", "c", "d"]
HIERARCHY_KINDS: dict[str, str] = {
    "a": "the system hierarchy",
    "b": "column-wise factors: every level split per axis",
    "c": "row-wise factors: every axis split per level",
    "d": "the reduction axes' factors only, collapsed per level (P²'s choice; default)",
}
MasterScope = Literal["per-ancestor", "global"]
ROOT = "root"


@dataclass(frozen=True)
class SynthesisHierarchy:
    """Levels (root first), the replicas that lower it onto the system, and the goal groups.

    ``master_scope``: docs/semantics.md §3 leaves ``Master(e')`` ambiguous; "per-ancestor" (default, consistent
    with P²'s proofs) forms one master group per node of e', "global" only the very first one.
    """

    kind: HierarchyKind
    levels: tuple[tuple[str, int], ...]
    replicas: tuple[tuple[int, ...], ...]
    goal_groups: tuple[Group, ...]
    master_scope: MasterScope = "per-ancestor"

    def __hash__(self) -> int:
        return self._hash

    @cached_property
    def _hash(self) -> int:
        """Computed once: hierarchies key the caches of synthesis and pricing, and their replicas and goal
        groups list every device."""
        return hash((self.kind, self.levels, self.replicas, self.goal_groups, self.master_scope))

    @property
    def num_devices(self) -> int:
        return prod(s for _, s in self.levels)

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(s for _, s in self.levels)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.levels)

    def level_index(self, name: str) -> int:
        try:
            return self.names.index(name)
        except ValueError:
            raise P2Error(f"unknown level {name!r}; levels are {', '.join(self.names)}") from None

    @property
    def nontrivial_levels(self) -> int:
        return sum(1 for _, s in self.levels if s > 1)


def synthesis_hierarchy(
    placement: Placement,
    reduction_axes: tuple[int, ...],
    level_names: tuple[str, ...],
    kind: HierarchyKind = "d",
    master_scope: MasterScope = "per-ancestor",
) -> SynthesisHierarchy:
    """Build hierarchy (a), (b), (c) or (d) for a placement and its reduction axes."""
    red = placement.check_axes(tuple(reduction_axes))
    x = placement.matrix
    n_levels, n_axes = len(placement.sizes), len(placement.axes)
    if len(level_names) != n_levels:
        raise P2Error(f"{len(level_names)} level names for {n_levels} levels")
    digits = placement.digits
    physical = np.arange(placement.num_devices)
    if kind == "d":
        levels = tuple((level_names[j], prod(x[i][j] for i in red)) for j in range(n_levels))
        per_level = [mixed_radix(digits[:, red, j], tuple(x[i][j] for i in red)) for j in range(n_levels)]
        synth_index = mixed_radix(np.stack(per_level, axis=1), tuple(s for _, s in levels))
        rest = [i for i in range(n_axes) if i not in red]
        k = prod(s for _, s in levels)
        replicas = _replicas(digits[:, rest, :].reshape(placement.num_devices, -1), synth_index, k)
        return SynthesisHierarchy(
            kind, ((ROOT, 1), *levels), replicas, (tuple(range(k)),), master_scope
        )
    if kind == "a":
        levels = tuple(zip(level_names, placement.sizes))
        order = physical
    elif kind == "b":
        levels = tuple(
            (f"{level_names[j]}_a{i}", x[i][j]) for j in range(n_levels) for i in range(n_axes)
        )
        order = physical
    elif kind == "c":
        levels = tuple(
            (f"a{i}_{level_names[j]}", x[i][j]) for i in range(n_axes) for j in range(n_levels)
        )
        order = mixed_radix(placement.coordinates, placement.axes)
    else:
        raise P2Error(f"unknown hierarchy kind {kind!r}; choose one of {', '.join(HIERARCHY_KINDS)}")
    replica = np.empty(placement.num_devices, dtype=np.int64)
    replica[order] = physical
    to_synth = {int(p): int(s) for s, p in enumerate(replica)}
    goal = tuple(
        tuple(sorted(to_synth[d] for d in g)) for g in placement.reduction_groups(red)
    )
    return SynthesisHierarchy(
        kind,
        ((ROOT, 1), *levels),
        (tuple(int(v) for v in replica),),
        tuple(sorted(goal)),
        master_scope,
    )


def _replicas(keys: np.ndarray, synth_index: np.ndarray, k: int) -> tuple[tuple[int, ...], ...]:
    """Devices grouped by their non-reduced digits (``keys`` rows), each group listed by synthesis
    index (entry ``synth_index[d]`` is device ``d``), groups ordered by their smallest device."""
    n = keys.shape[0]
    if keys.shape[1] == 0:
        which = np.zeros(n, dtype=np.int64)
    else:
        which = np.unique(keys, axis=0, return_inverse=True)[1].reshape(n)
    table = np.zeros((int(which.max()) + 1 if n else 0, k), dtype=np.int64)
    table[which, synth_index] = np.arange(n)
    table = table[np.argsort(table.min(axis=1), kind="stable")]
    return tuple(map(tuple, table.tolist()))
