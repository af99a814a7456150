"""The request: which system, which parallelism axes, what to reduce, and how to read the hierarchy.

One frozen value built by the CLI, the sweeps, the experiments, the benchmarks and the Python API alike,
validated in one place and round-tripped through JSON.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from p2smt.errors import P2Error
from p2smt.model.goal import ALLREDUCE, Goal, Sharding
from p2smt.model.hierarchy import SynthesisHierarchy
from p2smt.model.placement import Matrix, Placement, matrices
from p2smt.model.system import System, load_system


class HierarchyKind(StrEnum):
    """The synthesis hierarchies of docs/semantics.md §2 (``d``: reduction rows collapsed per level)."""

    A = "a"
    B = "b"
    C = "c"
    D = "d"


class MasterScope(StrEnum):
    """Reading of ``Master(e')``: one group per node of ``e'`` (default) or only the first."""

    PER_ANCESTOR = "per-ancestor"
    GLOBAL = "global"


def parse_enum(cls: type[StrEnum], value: Any, what: str) -> Any:
    """``cls(value)`` with a one-line P2Error listing the choices."""
    try:
        return cls(value)
    except ValueError:
        choices = ", ".join(m.value for m in cls)
        raise P2Error(f"unknown {what} {value!r}; choose from {choices}") from None


def _ints(values: Sequence[Any], what: str) -> tuple[int, ...]:
    out = tuple(values)
    if not out or not all(isinstance(v, int) and not isinstance(v, bool) for v in out):
        raise P2Error(f"{what} must be a non-empty list of integers, got {list(out)!r}")
    return out


@dataclass(frozen=True)
class Request:
    """Reduce ``reduce`` (axis indices) of ``axes`` on ``system``, on one ``matrix`` or on every placement.

    >>> r = Request("a100-4x16", axes=(4, 16), reduce=(1,), matrix=((1, 4), (4, 4)))
    >>> Request.from_json(r.to_json()) == r
    True
    >>> [p.matrix for p in r.placements()]
    [((1, 4), (4, 4))]
    """

    system: str
    axes: tuple[int, ...]
    reduce: tuple[int, ...]
    matrix: Matrix | None = None
    nodes: int | None = None
    levels: tuple[tuple[str, int], ...] = ()
    hierarchy: HierarchyKind = HierarchyKind.D
    master_scope: MasterScope = MasterScope.PER_ANCESTOR
    require_progress: bool = True
    goal: Goal = ALLREDUCE
    _system: System | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "system", str(self.system))
        set_(self, "axes", _ints(self.axes, "axes"))
        set_(self, "reduce", _ints(self.reduce, "reduction axes"))
        if self.reduce and all(0 <= a < len(self.axes) and self.axes[a] == 1 for a in self.reduce):
            raise P2Error(f"reduce {list(self.reduce)}: the reduced axes have size 1, so every device is already its "
                          "own sum; there is nothing to reduce")
        if self.matrix is not None:
            set_(self, "matrix", tuple(tuple(r) for r in self.matrix))
        levels = self.levels.items() if isinstance(self.levels, Mapping) else self.levels
        set_(self, "levels", tuple((str(n), int(s)) for n, s in levels))
        set_(self, "hierarchy", parse_enum(HierarchyKind, self.hierarchy, "synthesis hierarchy"))
        set_(self, "master_scope", parse_enum(MasterScope, self.master_scope, "master scope"))
        if isinstance(self.goal, Mapping):
            set_(self, "goal", Goal.of(self.goal.get("kind", "allreduce"), self.goal.get("shard_axes"), self.reduce))
        elif self.goal.sharded:
            set_(self, "goal", Goal.of(self.goal.kind, self.goal.shard_axes, self.reduce))

    @classmethod
    def for_system(cls, system: System, axes: Sequence[int], reduce: Sequence[int], **kw: Any) -> Request:
        """A request on an already loaded system (its name is recorded; the object is reused)."""
        return cls(system.name, tuple(axes), tuple(reduce), _system=system, **kw)

    def load_system(self) -> System:
        """The system, resized by ``nodes`` and ``levels``."""
        if self._system is not None:
            return self._system
        return load_system(self.system, self.nodes, dict(self.levels))

    def sharding(self, placement: Placement, h: SynthesisHierarchy) -> Sharding | None:
        """The goal on ``h``'s synthesis devices (None: the AllReduce goal), refused in one line where hierarchy
        (d) lists a group's members out of rank order (several reduction axes split over one level, §6)."""
        bound = self.goal.sharding(placement)
        if bound is None:
            return None
        if h.kind == "d" and _axes_share_a_level(placement, self.reduce):
            raise P2Error(f"the {self.goal.kind.value} goal over reduction axes {list(self.reduce)} split over the same "
                          "levels: hierarchy (d) numbers their devices level by level, not in rank order, so no program "
                          "over it reaches the goal (docs/semantics.md §6); give --hierarchy c")
        return bound.on_hierarchy(h)

    def placements(self, system: System | None = None) -> list[Placement]:
        """The one placement of ``matrix``, or every placement of ``axes`` (ascending order)."""
        s = system or self.load_system()
        if self.matrix is not None:
            return [Placement(s.sizes, self.axes, self.matrix)]
        return [Placement(s.sizes, self.axes, m) for m in matrices(s.sizes, self.axes)]

    def to_json(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "axes": list(self.axes),
            "reduce": list(self.reduce),
            "matrix": [list(r) for r in self.matrix] if self.matrix is not None else None,
            "nodes": self.nodes,
            "levels": {n: s for n, s in self.levels},
            "hierarchy": self.hierarchy.value,
            "master_scope": self.master_scope.value,
            "require_progress": self.require_progress,
            **({"goal": self.goal.to_json()} if self.goal.sharded else {}),  # the AllReduce goal's JSON unchanged
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Request:
        known = {"system", "axes", "reduce", "matrix", "nodes", "levels", "hierarchy", "master_scope",
                 "require_progress", "goal"}
        extra = sorted(set(data) - known)
        if extra:
            raise P2Error(f"request: unknown keys {extra}")
        if "system" not in data or "axes" not in data or "reduce" not in data:
            raise P2Error("request: needs system, axes and reduce")
        kw = dict(data)
        kw["system"] = str(Path(kw["system"])) if isinstance(kw["system"], Path) else kw["system"]
        return cls(**kw)


def _axes_share_a_level(placement: Placement, reduce: Sequence[int]) -> bool:
    """Whether two reduction axes are split over one level (both have a factor > 1 there)."""
    split = [sum(1 for a in reduce if placement.matrix[a][lv] > 1) for lv in range(len(placement.matrix[0]))]
    return any(n > 1 for n in split)
