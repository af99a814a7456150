"""Predicted time of a synthesized program lowered onto a system: the sum of its steps (no overlap, as in P²)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from p2smt.cost.step import step_time
from p2smt.cost.volumes import default_bytes_per_device, held_fractions_of_programs
from p2smt.model.collectives import Collective, Group
from p2smt.model.dsl import Instruction, Program, instruction_groups, lower_program
from p2smt.model.goal import Sharding
from p2smt.model.hierarchy import SynthesisHierarchy
from p2smt.model.system import System
from p2smt.model.topology import Topology, build_topology


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
    steps = [step_seconds(topo, hierarchy, ins, frac * b, algo) for ins, frac in zip(program.instructions, fractions)]
    return ProgramCost(sum(steps), tuple(steps))


def programs_seconds(system: System, hierarchy: SynthesisHierarchy, programs: Sequence[Program], *,
                     algo: str = "ring", bytes_per_device: float | None = None,
                     fractions: Mapping[Program, Sequence[np.ndarray]] | None = None,
                     checked: bool = False, sharding: Sharding | None = None) -> list[float]:
    """``program_time(...).seconds`` of many programs of one hierarchy (the same floats), for scoring;
    ``checked``: the programs are a synthesis result, proved valid already (see ``held_fractions_of_programs``);
    ``sharding``: a sharded goal on the hierarchy's devices (the AllGather goal starts from one shard).

    Programs that share a prefix share its running sum (the programs of one length come in
    lexicographic order), and a step is priced once per (instruction, holdings before it) in a table
    kept on the topology per (hierarchy, algorithm, bytes), so scoring again only looks steps up.
    """
    topo = build_topology(system)
    b = default_bytes_per_device(system) if bytes_per_device is None else bytes_per_device
    if fractions is None:
        fractions = _fractions(hierarchy, tuple(programs), checked, sharding)
    priced: dict[tuple[Instruction, bytes], float] = topo.memo(("priced", hierarchy, algo, b), dict)
    prefix: list[Instruction] = []
    sums: list[float] = [0]
    out = []
    for prog in programs:
        ins = prog.instructions
        common, most = 0, min(len(prefix), len(ins))
        while common < most and (prefix[common] is ins[common] or prefix[common] == ins[common]):
            common += 1
        del prefix[common:], sums[common + 1:]
        held = fractions[prog] if common < len(ins) else ()
        for t in range(common, len(ins)):
            key = (ins[t], held[t].tobytes())
            step = priced.get(key)
            if step is None:
                step = priced[key] = step_seconds(topo, hierarchy, ins[t], held[t] * b, algo)
            prefix.append(ins[t])
            sums.append(sums[-1] + step)
        out.append(sums[len(ins)])
    return out


def step_seconds(topo: Topology, hierarchy: SynthesisHierarchy, ins: Instruction, held: np.ndarray,
                  algo: str) -> float:
    """One step's seconds from the bytes each synthesis device holds before it (memoized on ``topo``)."""
    lowered, members = _lowered(hierarchy, ins)
    sizes = _message_sizes(ins.collective, held[members])
    key = ("instruction", hierarchy, ins, algo, sizes.tobytes())
    return topo.memo(key, lambda: step_time(topo, ins.collective, lowered,
                                            tuple(sizes.tolist()) * len(hierarchy.replicas), algo))


class Prices:
    """``step_seconds`` from the chunks each synthesis device holds before the step (``held``, out of ``k``),
    memoized per (candidate, holdings): the price of a step leaving a state of the search or the certificate."""

    def __init__(self, instructions: Sequence[Instruction], topo: Topology, h: SynthesisHierarchy, *, algo: str,
                 bytes_per_device: float, k: int):
        self.instructions, self.topo, self.h, self.algo, self.b, self.k = instructions, topo, h, algo, \
            bytes_per_device, k
        self.table: dict[tuple[int, bytes], float] = {}

    def of(self, held: Sequence[int], c: int) -> float:
        counts = np.fromiter(held, dtype=np.int64, count=self.k)
        key = (c, counts.tobytes())
        seconds = self.table.get(key)
        if seconds is None:
            seconds = self.table[key] = step_seconds(self.topo, self.h, self.instructions[c],
                                                     counts / self.k * self.b, self.algo)
        return seconds


@lru_cache(maxsize=64)
def _fractions(hierarchy: SynthesisHierarchy, programs: tuple[Program, ...],
               checked: bool, sharding: Sharding | None = None) -> dict[Program, list[np.ndarray]]:
    """``held_fractions_of_programs`` per listed programs (its own cache key sorts them by text first)."""
    return held_fractions_of_programs(hierarchy, programs, checked=checked, sharding=sharding)


def _message_sizes(collective: Collective, held: np.ndarray) -> np.ndarray:
    """``message_bytes`` of every group at once (``held[g, i]``: bytes member i of group g holds);
    AllGather's sum runs left to right (``cumsum``), as ``message_bytes`` adds, so the floats are equal."""
    if collective is Collective.ALL_GATHER:
        return np.cumsum(held, axis=1)[:, -1]
    if collective is Collective.BROADCAST:
        return held[:, 0]
    return held.max(axis=1)


@lru_cache(maxsize=4096)
def _lowered(hierarchy: SynthesisHierarchy, instruction) -> tuple[tuple[Group, ...], np.ndarray]:
    """An instruction's groups lowered onto every replica (``lower_program``), and its groups in synthesis
    indices as one array (row g: group g's members; an instruction's groups have equal sizes)."""
    (step,) = lower_program(hierarchy, Program((instruction,)))
    return step.groups, np.array(instruction_groups(hierarchy, instruction), dtype=np.int64)
