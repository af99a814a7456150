"""Name a collective's device groups by the mesh axes that form them (``psum(x, ('node', 'gpu'))``)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from p2smt.model.collectives import Group
from p2smt.model.replica_groups import mesh_axes_groups

__all__ = ["Mesh", "axes_of_groups"]


@dataclass(frozen=True)
class Mesh:
    """A device mesh: axis names and sizes, and the device id at each mesh position (row-major)."""

    axes: tuple[tuple[str, int], ...]
    device_ids: tuple[int, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.axes)

    @property
    def num_devices(self) -> int:
        return math.prod(s for _, s in self.axes)

    def coordinates(self) -> dict[int, dict[str, int]]:
        """Each device id's coordinate along every axis (its mesh position read row-major)."""
        out = {}
        for pos, dev in enumerate(self.device_ids):
            rest, at = pos, {}
            for name, size in reversed(self.axes):
                rest, at[name] = divmod(rest, size)
            out[dev] = at
        return out

    def groups(self, selected: Sequence[str]) -> tuple[Group, ...]:
        """One group per point of the other axes, members along ``selected`` in the order named."""
        return tuple(tuple(self.device_ids[p] for p in g) for g in mesh_axes_groups(self.axes, selected))


def axes_of_groups(mesh: Mesh, groups: Sequence[Group], ordered: bool) -> tuple[str, ...] | None:
    """The mesh axes (major first) whose groups are ``groups`` — member order too when ``ordered`` — the
    fewest such axes (axes of size 1 left out), or None when no union of mesh axes forms them."""
    given = _key(groups, ordered)
    names = [n for n, s in mesh.axes if s > 1]
    for k in range(len(names) + 1):
        for chosen in itertools.permutations(names, k):
            if not ordered and list(chosen) != sorted(chosen, key=names.index):
                continue
            if _key(mesh.groups(chosen), ordered) == given:
                return tuple(chosen)
    return None


def _key(groups: Sequence[Group], ordered: bool) -> frozenset:
    real = [tuple(g) for g in groups if len(g) > 1]
    return frozenset(real) if ordered else frozenset(frozenset(g) for g in real)
