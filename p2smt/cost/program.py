"""Predicted time of a synthesized program lowered onto a system: the sum of its steps (no overlap, as in P²)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from p2smt.cost.step import step_time
from p2smt.cost.volumes import default_bytes_per_device, held_fractions_of_programs, message_bytes
from p2smt.model.collectives import Group
from p2smt.model.dsl import Program, instruction_groups, lower_program
from p2smt.model.hierarchy import SynthesisHierarchy
from p2smt.model.system import System
from p2smt.model.topology import build_topology


@dataclass(frozen=True)
class ProgramCost:
    """Predicted time of a program: total seconds and one entry per step."""

    seconds: float
    step_seconds: tuple[float, ...]


def program_time(system: System, hierarchy: SynthesisHierarchy, program: Program, *, algo: str = "ring",
                 bytes_per_device: float | None = None, fractions: Sequence[np.ndarray] | None = None) -> ProgramCost:
    """Predicted time of a synthesized program lowered onto ``system`` (sum of its steps).

    ``fractions`` (from ``held_fractions_of_programs``) skips re-running the interpreter. A step's
    time is kept per (instruction, message sizes of its synthesis groups), which is all it depends
    on: every replica of a synthesis group holds the same share, so programs sharing a step share it.
    """
    topo = build_topology(system)
    b = default_bytes_per_device(system) if bytes_per_device is None else bytes_per_device
    if fractions is None:
        fractions = held_fractions_of_programs(hierarchy, [program])[program]
    steps = []
    for ins, frac in zip(program.instructions, fractions):
        groups, lowered = _lowered(hierarchy, ins)
        sizes = tuple(message_bytes(ins.collective, [float(frac[i]) * b for i in g]) for g in groups)
        key = ("instruction", hierarchy, ins, algo, sizes)
        steps.append(topo.memo(key, lambda c=ins.collective, lw=lowered, sz=sizes: step_time(
            topo, c, lw, sz * len(hierarchy.replicas), algo)))
    return ProgramCost(sum(steps), tuple(steps))


@lru_cache(maxsize=4096)
def _lowered(hierarchy: SynthesisHierarchy, instruction) -> tuple[tuple[Group, ...], tuple[Group, ...]]:
    """An instruction's groups in synthesis indices, and lowered onto every replica (``lower_program``)."""
    (step,) = lower_program(hierarchy, Program((instruction,)))
    return instruction_groups(hierarchy, instruction), step.groups
