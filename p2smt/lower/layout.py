"""The static buffer layout of a plan: which chunks every device holds after each step.

Data model (both backends). Every device starts with a 1-D array of length L, cut into k equal chunks
(k = the size of its reduction group); chunk r is the r-th slice. A device's *buffer* is the
contiguous list of chunks it currently holds, in buffer order, exactly as NCCL/XLA collectives see
it: ReduceScatter leaves member i with block i of its buffer, Reduce leaves non-roots empty,
AllGather concatenates the members' buffers in rank order, Broadcast copies the root's buffer.
Which chunk id sits at which buffer position is known statically (``PlanLayout``); the generated
``reduce`` uses it only at the very end, to put each chunk back at its place in the full array.
Collectives act on positions, not on chunk ids, so a wrong program (docs/semantics.md §4) really adds
mismatched data and the numeric check of ``run`` catches it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import prod
from typing import TYPE_CHECKING

import numpy as np

from p2smt.errors import P2Error
from p2smt.lower.names import as_int, check_label, wrap_ints
from p2smt.model.collectives import Collective, ExplicitPlan, ExplicitStep, Group
from p2smt.model.dsl import validate_plan

if TYPE_CHECKING:
    from p2smt.lower.target import MeshSpec, Target


def check_plan(plan: ExplicitPlan, num_devices: int) -> None:
    """Structural checks (the one plan validator of ``model.dsl``), and every group of two or more devices."""
    if not isinstance(plan, (tuple, list)) or not plan:
        raise P2Error("a plan needs at least one step")
    for t, step in enumerate(plan, start=1):
        if not isinstance(step, ExplicitStep) or not isinstance(step.collective, Collective):
            raise P2Error(f"step {t}: not an ExplicitStep with a Collective")
        for g in step.groups:
            if len(g) < 2:
                raise P2Error(f"step {t}: group {list(g)} has fewer than two devices")
            for d in g:
                as_int(d, "device id")
    validate_plan(plan, num_devices)


@dataclass(frozen=True)
class StepLayout:
    """One step with its buffer sizes: every member passes ``chunks_in`` chunks (Broadcast: the root)."""

    index: int
    collective: Collective
    groups: tuple[Group, ...]
    label: str | None
    group_size: int
    chunks_in: int
    holdings: tuple[tuple[int, ...], ...]

    @property
    def covers_all(self) -> bool:
        return sum(len(g) for g in self.groups) == len(self.holdings)


@dataclass(frozen=True)
class PlanLayout:
    """A checked plan with, after every step, the chunk ids each device's buffer holds (in order)."""

    target: Target
    steps: tuple[StepLayout, ...]

    @property
    def initial(self) -> tuple[tuple[int, ...], ...]:
        return tuple(self.target.starts_with(d) for d in range(self.target.num_devices))

    @property
    def final(self) -> tuple[tuple[int, ...], ...]:
        return self.steps[-1].holdings if self.steps else self.initial

    @property
    def capacity(self) -> int:
        """The most chunks any device holds at any point (the JAX buffer height)."""
        states = (self.initial, *(s.holdings for s in self.steps))
        return max(len(h) for state in states for h in state)

    @property
    def reaches_goal(self) -> bool:
        """Every device's final buffer is exactly what the target's goal asks, in order (positions only)."""
        return all(h == self.target.ends_with(d) for d, h in enumerate(self.final))

    @property
    def final_is_identity(self) -> bool:
        full = tuple(range(self.target.num_chunks))
        return all(h == full for h in self.final)


def layout(plan: ExplicitPlan, target: Target, step_labels: Sequence[str] | None = None) -> PlanLayout:
    """Check a plan against a target and trace which chunks every buffer holds after each step.

    Rejected with P2Error (they could not run at all, NCCL would fail or hang): members of a group
    passing buffers of different sizes, groups of one step of different sizes or buffer sizes (one
    XLA collective has one shape), ReduceScatter of a buffer not divisible by the group size.
    """
    n = target.num_devices
    check_plan(plan, n)
    if step_labels is not None and len(step_labels) != len(plan):
        raise P2Error(f"{len(step_labels)} step labels for {len(plan)} steps")
    labels = [None if step_labels is None else check_label(s) for s in (step_labels or [None] * len(plan))]
    hold: list[tuple[int, ...]] = [target.starts_with(d) for d in range(n)]
    out = []
    for t, (step, label) in enumerate(zip(plan, labels), start=1):
        coll, groups = step.collective, tuple(tuple(int(d) for d in g) for g in step.groups)
        name = f"step {t} ({coll.value})"
        if not groups:  # kept by check and verify as XLA keeps it; generated code has no step to run for it
            raise P2Error(f"{name}: every group has one device, XLA's no-op; lower and run take no such step: "
                          "drop it from the plan")
        sizes = {len(g) for g in groups}
        if len(sizes) != 1:
            raise P2Error(
                f"{name}: groups have different sizes {sorted(sizes)}; one collective needs one size"
            )
        g_size = sizes.pop()
        if coll is Collective.BROADCAST:
            passed = {len(hold[g[0]]) for g in groups}
        else:
            for g in groups:
                lens = {len(hold[d]) for d in g}
                if len(lens) != 1:
                    raise P2Error(
                        f"{name}: members of group {list(g)} hold {sorted(lens)} chunks; a collective needs "
                        "equal buffers (NCCL would fail or hang)"
                    )
            passed = {len(hold[g[0]]) for g in groups}
        if len(passed) != 1:
            raise P2Error(
                f"{name}: groups pass buffers of {sorted(passed)} chunks; one collective needs one size"
            )
        chunks_in = passed.pop()
        if coll is Collective.REDUCE_SCATTER and chunks_in % g_size:
            raise P2Error(f"{name}: {chunks_in} chunks cannot be scattered over {g_size} members")
        new = list(hold)
        for g in groups:
            if coll is Collective.REDUCE_SCATTER:
                part = chunks_in // g_size
                for i, d in enumerate(g):
                    new[d] = hold[d][i * part : (i + 1) * part]
            elif coll is Collective.ALL_GATHER:
                joined = tuple(c for d in g for c in hold[d])
                for d in g:
                    new[d] = joined
            elif coll is Collective.REDUCE:
                for d in g[1:]:
                    new[d] = ()
            elif coll is Collective.BROADCAST:
                for d in g:
                    new[d] = hold[g[0]]
        hold = new
        out.append(StepLayout(t, coll, groups, label, g_size, chunks_in, tuple(hold)))
    return PlanLayout(target, tuple(out))


def mesh_axes_of(groups: tuple[Group, ...], mesh: MeshSpec, ordered: bool) -> tuple[str, ...] | None:
    """The mesh axes whose index groups are exactly ``groups`` (rank order row-major if ``ordered``).

    None when the groups are not such a set (e.g. Master groups, which leave devices out).
    """
    if sum(len(g) for g in groups) != mesh.num_devices:
        return None
    pos = mesh.position
    coords = np.array(np.unravel_index([pos[d] for d in groups[0]], mesh.shape)).T
    vary = [a for a in range(len(mesh.shape)) if len(set(coords[:, a].tolist())) > 1]
    fixed = [a for a in range(len(mesh.shape)) if a not in vary]
    cube = np.arange(mesh.num_devices).reshape(mesh.shape)
    width = prod(mesh.shape[a] for a in vary)
    rows = np.transpose(cube, fixed + vary).reshape(-1, width)
    canon = [tuple(mesh.order[p] for p in row) for row in rows.tolist()]
    if ordered:
        same = set(canon) == set(groups)
    else:
        same = {frozenset(c) for c in canon} == {frozenset(g) for g in groups}
    return tuple(mesh.names[a] for a in vary) if same else None


def goal_constants(layout: PlanLayout) -> list[str]:
    """SHARDS, SHARD[physical id] and the chunks a device passes in and gets back, for a sharded goal."""
    target = layout.target
    if target.sharding is None:
        return []
    return [
        f"SHARDS = {target.sharding.shards!r}  # the result of a reduction group is cut into SHARDS shards",
        "# SHARD[d]: the shard physical device d ends with (reduce-scatter) or starts with (all-gather)",
        *wrap_ints("SHARD", target.sharding.rank),
        f"INPUT_CHUNKS = {len(target.starts_with(0))!r}  # chunks of the buffer every device passes in",
        f"OUTPUT_CHUNKS = {len(target.ends_with(0))!r}  # chunks of the buffer every device gets back",
    ]
