"""One verdict on a plan: P²'s chunk semantics and, for plans in XLA's form, the positions semantics."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from p2smt.model.collectives import Group
from p2smt.semantics.dense import Execution, Step, execute
from p2smt.semantics.positions import PositionRun, execute_positions


@dataclass(frozen=True)
class Verdict:
    """P²'s execution, and the positions run when the plan's layout is checked too (and P² holds)."""

    execution: Execution
    positions: PositionRun | None

    @property
    def valid(self) -> bool:
        return self.execution.valid and (self.positions is None or self.positions.valid)

    def message(self) -> str:
        run = self.execution
        if run.violation:
            return f"INVALID at step {run.violation.step} ({run.violation.rule}): {run.violation.message}"
        if not run.reached_goal:
            return "INVALID: every precondition holds but the goal is not reached"
        if self.positions is not None and not self.positions.valid:
            return f"INVALID under XLA/NCCL positions: {self.positions.message()}"
        return "VALID"


def judge(
    num_devices: int, steps: Sequence[Step], goal_groups: Sequence[Group], chunks: int, require_progress: bool,
    layout: bool,
) -> Verdict:
    """Run P²'s interpreter; with ``layout``, also the positions interpreter once P²'s semantics holds."""
    run = execute(num_devices, steps, goal_groups, require_progress, chunks)
    positions = execute_positions(num_devices, steps, goal_groups, chunks) if layout and run.valid else None
    return Verdict(run, positions)
