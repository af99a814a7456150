"""One verdict on a plan: P²'s chunk semantics and, for plans in XLA's form, the positions semantics.

The verdict names the first defect as a ``model.failure.Violation``: the interpreter's first violated
rule, or earlier, the first reduction that sums two reduction groups' data (which no later step can undo,
so it is the real cause of a later ``ReduceScatter.divisible`` or of a goal failure).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from p2smt.errors import P2Error
from p2smt.model.collectives import AG, BC, Group
from p2smt.model.failure import Rule, Violation, goal_masks, mixed_pair, mixed_violation, step_text, violation
from p2smt.model.goal import GoalKind, Sharding
from p2smt.semantics.dense import MAX_STATE_BYTES, Execution, Step, execute, state_bytes
from p2smt.semantics.positions import PositionRun, execute_positions


@dataclass(frozen=True)
class Verdict:
    """P²'s execution, the first defect, and the positions run when the layout is checked too (and P² holds)."""

    execution: Execution
    positions: PositionRun | None
    violation: Violation | None = None

    @property
    def valid(self) -> bool:
        return self.execution.valid and (self.positions is None or self.positions.valid)

    @property
    def state(self) -> np.ndarray:
        """The state at the failure: before the failing step (which does not apply), or the final state."""
        step = self.violation.step if self.violation is not None else None
        return self.execution.states[-1] if step is None else self.execution.states[step - 1]

    @property
    def checked_by(self) -> str:
        return f"the dense interpreter at the real size ({self.execution.states[0].shape[0]} devices)"

    def message(self) -> str:
        return verdict_message(self.violation, self.positions)

    def device_rows(self, devices: Sequence[int]) -> dict[int, list[list[int]]]:
        """Each device's chunks' contributions in the state at the failure."""
        state = self.state
        return {d: [[int(c) for c in state[d, r].nonzero()[0]] for r in range(state.shape[1])] for d in devices}


def verdict_message(v: Violation | None, positions: PositionRun | None) -> str:
    """The one-line verdict: the first defect, else the positions' failure, else VALID."""
    if v is not None:
        return f"INVALID: {v.headline()} ({v.rule}): {v.message}"
    if positions is not None and not positions.valid:
        return f"INVALID under XLA/NCCL positions: {positions.message()}"
    return "VALID"


def _as_mask(row: np.ndarray) -> int:
    return int.from_bytes(np.packbits(row, bitorder="little").tobytes(), "little")


def first_mixing(
    run: Execution, steps: Sequence[Step], goal_groups: Sequence[Group], labels: Sequence[str] | None = None
) -> Violation | None:
    """The first reduction (up to the failing step) whose sum would mix two reduction groups' contributions."""
    k = run.states[0].shape[0]
    goal_of = goal_masks(k, goal_groups)
    last = len(run.states) if run.violation is None or run.violation.step is None else run.violation.step
    for t in range(1, min(last, len(steps)) + 1):
        coll, groups = steps[t - 1]
        if coll in (AG, BC):
            continue
        state = run.states[t - 1]
        for g in groups:
            union = state[list(g)].any(axis=0)
            for r in range(union.shape[0]):
                pair = mixed_pair(_as_mask(union[r]), goal_of)
                if pair is not None:
                    text = labels[t - 1] if labels else step_text(coll, groups)
                    return mixed_violation(t, len(steps), text, coll, tuple(g), r, pair, goal_groups)
    return None


def explain(
    run: Execution, steps: Sequence[Step], goal_groups: Sequence[Group], labels: Sequence[str] | None = None,
    sharding: Sharding | None = None,
) -> Violation | None:
    """The first defect of an invalid run (None for a valid one), with DSL ``labels`` as instruction text;
    ``sharding`` (a sharded goal) adds which chunks the first device off the goal holds and should hold."""
    if run.valid:
        return None
    mixed = first_mixing(run, steps, goal_groups, labels)
    if mixed is not None:
        return mixed
    if run.violation is not None:
        v = run.violation
        return replace(v, instruction=labels[v.step - 1]) if labels else v
    return goal_violation(run, len(steps), sharding)


def goal_violation(run: Execution, steps: int, sharding: Sharding | None = None) -> Violation:
    """Every step applies but the goal fails: the first device chunk off the goal, in words (under a sharded
    goal also the chunks that device ends with and the chunks of its shard)."""
    first = run.defects[0]
    off = len(run.devices_off)
    shard = {}
    if sharding is not None:
        final = run.states[-1][first.device]
        chunks = final.shape[0]
        held = [int(r) for r in np.flatnonzero(final.any(axis=1))]
        whole = sharding.kind is GoalKind.ALL_GATHER
        want = list(range(chunks)) if whole else list(sharding.shard(first.device, chunks))
        shard = {"goal": sharding.kind.value, "holds_chunks": held, "shard_chunks": want}
    return violation(None, steps, None, Rule.GOAL, None, run.devices_off, first.chunk,
                     device=first.device, missing=list(first.missing), foreign=list(first.foreign), devices_off=off,
                     **shard)


POSITIONS_CELLS = 1 << 20
"""Largest number of buffer cells (devices × blocks) the positions interpreter runs on."""


SPLIT_ABOVE = 32 << 20
"""Dense state bytes above which a plan that splits along its reduction groups is judged one group shape at a
time (the same verdict, faster and in less memory)."""


def judge(
    num_devices: int, steps: Sequence[Step], goal_groups: Sequence[Group], chunks: int, require_progress: bool,
    layout: bool, labels: Sequence[str] | None = None, sharding: Sharding | None = None,
) -> Verdict:
    """Run P²'s interpreter; with ``layout``, also the positions interpreter once P²'s semantics holds.

    A plan whose dense state would pass ``SPLIT_ABOVE`` bytes is judged one reduction group shape at a time
    when no group crosses one (``semantics.split``); else, up to ``dense.MAX_STATE_BYTES``, whole; above, by
    the compressed interpreter when it is one reduction group, and refused otherwise. Every route reports the
    same verdict, rule and failing group. A sharded goal (``sharding``, docs/semantics.md §6) is judged whole by
    the dense interpreter only: the split and compressed routes refuse it."""
    need = state_bytes(num_devices, chunks, len(steps))
    if sharding is not None:
        if need > MAX_STATE_BYTES:
            raise P2Error(f"the {sharding.kind.value} goal is judged by the dense interpreter only, and this plan's "
                          f"state ({need >> 20} MiB) is beyond its {MAX_STATE_BYTES >> 20} MiB")
        if layout:
            check_positions_size(num_devices, chunks)
        run = execute(num_devices, steps, goal_groups, require_progress, chunks, sharding)
        positions = (execute_positions(num_devices, steps, goal_groups, chunks, sharding)
                     if layout and run.violation is None else None)  # also where it lands, when off the goal
        return Verdict(run, positions, explain(run, steps, goal_groups, labels, sharding))
    if need > SPLIT_ABOVE:
        large = _judge_large(num_devices, steps, goal_groups, chunks, require_progress, layout, labels,
                             whole=need <= MAX_STATE_BYTES)
        if large is not None:
            return large
    run = execute(num_devices, steps, goal_groups, require_progress, chunks)
    positions = execute_positions(num_devices, steps, goal_groups, chunks) if layout and run.valid else None
    return Verdict(run, positions, explain(run, steps, goal_groups, labels))


def check_positions_size(num_devices: int, blocks: int) -> None:
    """Refuse a positions run of more than ``POSITIONS_CELLS`` buffer cells (before any work)."""
    if num_devices * blocks > POSITIONS_CELLS:
        raise P2Error(f"checking XLA/NCCL buffer positions on {num_devices} devices of {blocks} blocks each is "
                      f"beyond the bound of {POSITIONS_CELLS:,} cells")


def _judge_large(num_devices, steps, goal_groups, chunks, require_progress, layout, labels, whole: bool):
    """The split or compressed verdict, or None when the dense interpreter should judge the plan whole."""
    from p2smt.model.components import split_plan
    from p2smt.model.dsl import validate_plan
    from p2smt.semantics import split as large

    validate_plan(steps, num_devices)
    if layout:
        check_positions_size(num_devices, chunks)
    parts = split_plan(num_devices, steps, goal_groups)
    if parts is not None and len(parts.components) > 1:
        out = large.judge_split(parts, steps, chunks, require_progress, labels)
    elif whole:
        return None
    elif parts is not None and chunks == num_devices:
        out = large.judge_compressed(num_devices, steps, require_progress, labels)
    else:
        raise large.refuse_whole(num_devices, chunks, len(steps), MAX_STATE_BYTES)
    if layout and out.execution.valid:
        return large.replace_positions(out, execute_positions(num_devices, steps, goal_groups, chunks))
    return out
