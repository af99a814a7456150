"""A plan split along its reduction groups, so that a large system is checked one small group at a time.

When no group of any step crosses a reduction group, each reduction group's devices evolve alone (a step
reads and writes only its groups' members; the goal is per device), so the plan is valid iff it is valid
on every reduction group taken by itself, its devices renumbered 0..m-1 in goal-group order. Reduction
groups whose renumbered plans are equal (every group of a DSL program on a hierarchical placement) are
one *shape*, checked once: the superpod's 128 groups of 8 devices are one 8-device problem. The first
failure of the whole plan is the earliest step failing in some group, and among those the group listed
first in the step (the interpreters' order), which ``Component.original`` gives back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from p2smt.model.collectives import Collective, Group
from p2smt.model.failure import Violation, step_text, violation

Step = tuple[Collective, Sequence[Group]]
LocalPlan = tuple[tuple[Collective, tuple[Group, ...]], ...]
DEVICE_FACTS = ("pair", "contribution", "counted_twice", "has", "lacks", "device", "root", "missing", "foreign")
"""The facts of a ``Violation`` that name devices (``members`` too when it is a list, not a count)."""
SETS = ("missing", "foreign", "counted_twice")
"""Those listed in increasing id order (a renumbering need not keep it)."""


@dataclass(frozen=True)
class Component:
    """One reduction group: ``devices`` its real ids (local id i is ``devices[i]``), ``plan`` the steps
    restricted to it and renumbered, ``original[t][j]`` the index, in step t+1's group list, of its j-th group."""

    devices: tuple[int, ...]
    plan: LocalPlan
    original: tuple[tuple[int, ...], ...]

    def real(self, local: int) -> int:
        return self.devices[local]

    def real_group(self, group: Sequence[int]) -> tuple[int, ...]:
        return tuple(self.devices[d] for d in group)

    def real_facts(self, facts: Any) -> dict[str, Any]:
        """A violation's facts with every device id made real (chunks and counts are kept)."""
        out = dict(facts)
        for key in (*DEVICE_FACTS, "members"):
            value = out.get(key)
            if isinstance(value, int) and key != "members":
                out[key] = self.real(value)
            elif isinstance(value, (list, tuple)):
                real = [self.real(d) for d in value]
                out[key] = sorted(real) if key in SETS else real
        return out

    def real_violation(self, v: Violation, steps: Sequence[Step], labels: Sequence[str] | None = None,
                       **overrides: Any) -> Violation:
        """This component's violation in real device ids, with the whole plan's step text (``overrides``:
        facts to set, e.g. the whole plan's devices off the goal)."""
        facts = self.real_facts(v.facts)
        facts.pop("chunk", None)
        facts.update(overrides)
        devices = facts.pop("devices", [self.real(d) for d in v.devices])
        coll = steps[v.step - 1][0] if v.step is not None else None
        text = None
        if v.step is not None:
            text = labels[v.step - 1] if labels else step_text(coll, steps[v.step - 1][1])
        group = self.real_group(v.group) if v.group is not None else None
        return violation(v.step, len(steps), text, v.rule, group, devices, v.chunk,
                         Collective(coll).value if coll is not None else None, **facts)

    def first_group(self, step: int, group: Sequence[int] | None) -> int:
        """The index in the whole plan's step ``step`` (1-based) of this component's local ``group``."""
        if group is None:
            return -1
        local = self.plan[step - 1][1].index(tuple(group))
        return self.original[step - 1][local]


@dataclass(frozen=True)
class Split:
    """The components in goal-group order and the shapes: lists of component indices with equal local plans."""

    components: tuple[Component, ...]
    shapes: tuple[tuple[int, ...], ...]

    @property
    def size(self) -> int:
        """Devices of one reduction group (every shape's problem size)."""
        return len(self.components[0].devices)

    def describe(self) -> str:
        n, s = len(self.components), len(self.shapes)
        return (f"{n} reduction groups of {self.size} devices, {s} distinct up to renumbering"
                if s > 1 else f"{n} reduction groups of {self.size} devices, all alike up to renumbering")


def split_plan(num_devices: int, steps: Sequence[Step], goal_groups: Sequence[Group]) -> Split | None:
    """The plan split along ``goal_groups`` (which must cover the devices, all of one size), or None when
    some group crosses two reduction groups (the plan is then checked whole). ``steps`` are validated plans."""
    where: dict[int, tuple[int, int]] = {}
    for c, g in enumerate(goal_groups):
        for i, d in enumerate(g):
            where[int(d)] = (c, i)
    sizes = {len(g) for g in goal_groups}
    if len(where) != num_devices or len(sizes) != 1:
        return None
    local: list[list[list[Any]]] = [[] for _ in goal_groups]  # per component, per step: (groups, indices)
    for coll, groups in steps:
        per: dict[int, tuple[list[Group], list[int]]] = {}
        for j, g in enumerate(groups):
            owners = {where[int(d)][0] for d in g}
            if len(owners) != 1:
                return None
            (c,) = owners
            gs, idx = per.setdefault(c, ([], []))
            gs.append(tuple(where[int(d)][1] for d in g))
            idx.append(j)
        for c in range(len(goal_groups)):
            gs, idx = per.get(c, ([], []))
            local[c].append((coll, tuple(gs), tuple(idx)))
    components = tuple(
        Component(tuple(int(d) for d in g), tuple((coll, gs) for coll, gs, _ in local[c]),
                  tuple(idx for _, _, idx in local[c]))
        for c, g in enumerate(goal_groups))
    shapes: dict[LocalPlan, list[int]] = {}
    for c, comp in enumerate(components):
        shapes.setdefault(comp.plan, []).append(c)
    return Split(components, tuple(tuple(v) for v in shapes.values()))
