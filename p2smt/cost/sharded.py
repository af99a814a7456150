"""Bytes and predicted time of an explicit plan step by step, against the flat collective of its goal.

A ReduceScatter or AllGather step moves different bytes than an AllReduce over the same groups: its message
is the members' (equal) buffer (ReduceScatter) or the gathered output (AllGather), and a ring member sends
(g−1)/g of it, against 2(g−1)/g for AllReduce. Each step's holdings come from the plan's buffer layout
(``lower.layout``: the same positions the lowered code uses, so an AllGather goal starts from one shard); its
message size from ``volumes.message_bytes``; its time from NCCL's tuner and the contention model
(``step.step_choices``). The flat collective of a goal (docs/semantics.md §6) is one collective over each goal
group in rank order: AllReduce, ReduceScatter or AllGather; for HSDP a ReduceScatter over the shard axes
followed by an AllReduce of the shard over the replicas.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from p2smt.cost.channels import _coef
from p2smt.cost.step import link_class, step_choices
from p2smt.cost.volumes import message_bytes
from p2smt.errors import InternalError
from p2smt.lower.layout import PlanLayout, layout
from p2smt.lower.target import Target
from p2smt.model.collectives import Collective, ExplicitPlan, ExplicitStep
from p2smt.model.goal import Goal, GoalKind
from p2smt.model.placement import Placement
from p2smt.model.system import System
from p2smt.model.topology import build_topology


@dataclass(frozen=True)
class StepPrice:
    """One step: its collective over ``groups`` groups of ``group_size``, the NCCL message of one group, the bytes
    one member sends on a ring (bus bytes), the slowest link class, NCCL's choice and the predicted seconds."""

    label: str
    collective: Collective
    groups: int
    group_size: int
    message_bytes: float
    sent_bytes: float
    links: str
    choice: str
    seconds: float

    def to_json(self) -> dict:
        return {"step": self.label, "collective": self.collective.value, "groups": self.groups,
                "group_size": self.group_size, "message_bytes": self.message_bytes, "sent_bytes": self.sent_bytes,
                "links": self.links, "choice": self.choice, "seconds": self.seconds}

    def line(self) -> str:
        """``(node, InsideGroup, ReduceScatter): 4 groups of 4, message 8.59e+09 B, 6.44e+09 B sent per
        device, nvlink, ring/simple: 0.0312 s`` (characters the generated code's docstring allows)."""
        return (f"{self.label}: {self.groups} group(s) of {self.group_size}, message {self.message_bytes:.3g} B, "
                f"{self.sent_bytes:.3g} B sent per device, {self.links}, {self.choice}: {self.seconds:.4g} s")


@dataclass(frozen=True)
class PlanPrice:
    """A plan's steps priced, and the flat collective of its goal priced the same way."""

    system: str
    bytes_per_device: float
    algo: str
    steps: tuple[StepPrice, ...]
    flat: tuple[StepPrice, ...]

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.steps)

    @property
    def flat_seconds(self) -> float:
        return sum(s.seconds for s in self.flat)

    def to_json(self) -> dict:
        return {"system": self.system, "bytes_per_device": self.bytes_per_device, "algo": self.algo, "seconds": self.seconds,
                "steps": [s.to_json() for s in self.steps], "flat_seconds": self.flat_seconds,
                "flat": [s.to_json() for s in self.flat]}

    def lines(self) -> list[str]:
        """The prediction in a few lines: every step, the total, the flat collective and the ratio."""
        head = (f"predicted on {self.system} (NCCL tuner, --algo {self.algo}), {self.bytes_per_device:.3g} B "
                "per device in the full buffer:")
        out = [head, *(f"  step {i} {s.line()}" for i, s in enumerate(self.steps, 1))]
        out.append(f"  program: {self.seconds:.4g} s")
        out += [f"  flat {s.line()}" for s in self.flat]
        ratio = self.seconds / self.flat_seconds if self.flat_seconds > 0 else float("nan")
        out.append(f"  flat collective: {self.flat_seconds:.4g} s; the program takes {ratio:.3g}x its time")
        return out


def price_steps(system: System, plan: ExplicitPlan, target: Target, bytes_per_device: float, algo: str = "ring",
                labels: Sequence[str] | None = None) -> tuple[StepPrice, ...]:
    """Every step of ``plan`` on ``target`` priced from the buffers its layout gives (``bytes_per_device``: the
    full buffer, k chunks)."""
    return price_layout(system, layout(plan, target), bytes_per_device, algo, labels)


def price_layout(system: System, lay: PlanLayout, bytes_per_device: float, algo: str = "ring",
                 labels: Sequence[str] | None = None) -> tuple[StepPrice, ...]:
    """``price_steps`` of a plan whose layout is known."""
    topo = build_topology(system)
    target, plan = lay.target, [ExplicitStep(s.collective, s.groups) for s in lay.steps]
    chunk = bytes_per_device / target.num_chunks
    holdings = (lay.initial, *(s.holdings for s in lay.steps))
    out = []
    for t, (step, held) in enumerate(zip(plan, holdings)):
        sizes = [message_bytes(step.collective, [len(held[d]) * chunk for d in g]) for g in step.groups]
        seconds, picks = step_choices(topo, step.collective, step.groups, sizes, algo)
        size, top = len(step.groups[0]), max(sizes)
        label = labels[t] if labels is not None else step.collective.value
        choice = ", ".join(sorted({f"{c.algo}/{c.protocol.value}" for c in picks})) or "nothing to move"
        out.append(StepPrice(label, step.collective, len(step.groups), size, top, _coef(step.collective, size) * top,
                             link_class(system, step.groups), choice, seconds))
    return tuple(out)


def flat_plan(placement: Placement, reduce: Sequence[int], goal: Goal) -> ExplicitPlan:
    """The flat collective of ``goal`` over the goal groups, members in rank order (HSDP: a ReduceScatter over
    the shard axes, then an AllReduce over the replicated axes)."""
    reduce = tuple(sorted(set(reduce)))
    if not goal.sharded:
        return (ExplicitStep(Collective.ALL_REDUCE, placement.reduction_groups(reduce)),)
    rank = goal.sharding(placement).rank
    shard = tuple(sorted(placement.reduction_groups(goal.shard_axes), key=lambda g: g[0]))
    ordered = tuple(tuple(sorted(g, key=lambda d: rank[d])) for g in shard)
    coll = Collective.ALL_GATHER if goal.kind is GoalKind.ALL_GATHER else Collective.REDUCE_SCATTER
    steps = [ExplicitStep(coll, ordered)]
    rest = tuple(a for a in reduce if a not in goal.shard_axes)
    if rest:
        steps.append(ExplicitStep(Collective.ALL_REDUCE, placement.reduction_groups(rest)))
    return tuple(steps)


def price_plan(system: System, plan: ExplicitPlan, target: Target, placement: Placement, reduce: Sequence[int],
               goal: Goal, bytes_per_device: float, algo: str = "ring",
               labels: Sequence[str] | None = None) -> PlanPrice:
    """``plan``'s steps and its goal's flat collective, priced alike."""
    flat = flat_plan(placement, reduce, goal)
    flat_labels = [f"{s.collective.value} over the {len(s.groups[0])}-device goal groups" for s in flat]
    if len(flat) == 2:
        flat_labels = [f"reduce-scatter over the {len(flat[0].groups[0])}-device shard groups",
                       f"allreduce over the {len(flat[1].groups[0])}-device replica groups"]
    return PlanPrice(system.name, bytes_per_device, algo, price_steps(system, plan, target, bytes_per_device, algo, labels),
                     price_steps(system, flat, target, bytes_per_device, algo, flat_labels))



def rank_digits(placement: Placement, goal: Goal) -> tuple[tuple[int, int], ...]:
    """The digits of a device's rank along the shard axes, most significant first: (axis, level) for every shard
    axis in ascending order and every level it is split over, outermost first (§1's numbering, §6's rank)."""
    return tuple((a, j) for a in goal.shard_axes for j, parts in enumerate(placement.matrix[a]) if parts > 1)


def digit_groups(placement: Placement, segment: Sequence[tuple[int, int]]) -> tuple[tuple[int, ...], ...]:
    """Devices that differ only in the digits of ``segment``, members in rank order (the segment's digits read
    as a number, first most significant), groups by first member."""
    digits = placement.digits
    inside = set(segment)
    fixed = [(i, j) for i in range(digits.shape[1]) for j in range(digits.shape[2]) if (i, j) not in inside]
    groups: dict[tuple[int, ...], list[tuple[tuple[int, ...], int]]] = {}
    for d in range(placement.num_devices):
        key = tuple(int(digits[d, i, j]) for i, j in fixed)
        groups.setdefault(key, []).append((tuple(int(digits[d, i, j]) for i, j in segment), d))
    return tuple(sorted(tuple(d for _, d in sorted(g)) for g in groups.values()))


def rank_order_plans(placement: Placement, reduce: Sequence[int], goal: Goal, level_names: Sequence[str],
                     axis_names: Sequence[str] | None = None) -> list[tuple[tuple[str, ...], ExplicitPlan]]:
    """Every program that cuts the rank's digits into consecutive segments, one collective per segment: a
    ReduceScatter over the most significant segment first (each then holds the block its rank's leading digits
    name) or an AllGather over the least significant first; HSDP then adds an AllReduce over the replicated axes.
    Each is the goal by construction (``cheapest_rank_order`` checks it); the first, one segment, is the flat
    collective. Labels name the mesh axes ``<axis>_<level>`` of each step."""
    names = tuple(axis_names) if axis_names is not None else tuple(f"axis{i}" for i in range(len(placement.axes)))
    digits = rank_digits(placement, goal)
    gather = goal.kind is GoalKind.ALL_GATHER
    coll = Collective.ALL_GATHER if gather else Collective.REDUCE_SCATTER
    rest = tuple(a for a in sorted(set(reduce)) if a not in goal.shard_axes)
    out = []
    for cuts in range(1 << max(len(digits) - 1, 0)):
        segments, start = [], 0
        for i in range(1, len(digits)):
            if cuts >> (i - 1) & 1:
                segments.append(digits[start:i])
                start = i
        segments.append(digits[start:])
        if gather:
            segments.reverse()
        labels = [f"{coll.value} over {'+'.join(f'{names[a]}_{level_names[j]}' for a, j in seg)}" for seg in segments]
        steps = [ExplicitStep(coll, digit_groups(placement, seg)) for seg in segments]
        if rest:
            labels.append(f"AllReduce over {'+'.join(names[a] for a in rest)}")
            steps.append(ExplicitStep(Collective.ALL_REDUCE, placement.reduction_groups(rest)))
        out.append((tuple(labels), tuple(steps)))
    return out


def cheapest_rank_order(system: System, placement: Placement, reduce: Sequence[int], goal: Goal,
                        bytes_per_device: float, algo: str = "ring",
                        axis_names: Sequence[str] | None = None) -> tuple[PlanPrice, int]:
    """The cheapest of ``rank_order_plans`` (ties: the fewer steps, then the text) against the flat collective,
    and how many programs were priced. Each is checked against the goal in buffer positions first (an internal
    error if one misses it: the construction is wrong)."""
    from p2smt.lower.target import placement_target

    target = placement_target(placement, reduce, system.level_names, None, system.name, goal.sharding(placement))
    priced = []
    for labels, plan in rank_order_plans(placement, reduce, goal, system.level_names, axis_names):
        lay = layout(plan, target)
        if not lay.reaches_goal:
            raise InternalError(f"the rank-order program {'; '.join(labels)} misses the {goal.describe()} goal")
        priced.append(price_layout(system, lay, bytes_per_device, algo, labels))
    best = min(priced, key=lambda steps: (float(f"{sum(s.seconds for s in steps):.9g}"), len(steps),
                                          [s.label for s in steps]))
    return PlanPrice(system.name, bytes_per_device, algo, best, priced[0]), len(priced)
