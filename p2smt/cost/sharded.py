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
from p2smt.lower.layout import layout
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
    topo = build_topology(system)
    lay = layout(plan, target)
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

