"""Data volumes: how many bytes each device holds before each step, and a collective's message size.

Before each step a device holds (non-empty rows of its state / k) of the full per-device bytes, taken
from the interpreter's states; ``message_bytes`` turns the members' holdings into the collective's
message size (the one place where that is computed). Above ``INTERPRETED_DEVICES`` synthesis devices
the rows come from the interpreter's row abstraction (``apply_rows``): the same volumes.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from p2smt.errors import P2Error
from p2smt.model.collectives import Collective, Group
from p2smt.model.dsl import Program, instruction_groups
from p2smt.model.goal import GoalKind, Sharding
from p2smt.model.hierarchy import SynthesisHierarchy
from p2smt.model.system import System
from p2smt.model.topology import build_topology
from p2smt.semantics.dense import Violation, apply_step, initial_state

FLOAT32_BYTES = 4
INTERPRETED_DEVICES = 256
"""Up to this many synthesis devices, volumes come from the interpreter's k³ state (which also rechecks
every precondition); above, from its row abstraction (k² state, ``apply_rows``): the same volumes."""


def default_bytes_per_device(system: System) -> int:
    """P²'s message size: 2^29 × nodes float32 values per GPU (docs/cost-model.md)."""
    nodes = build_topology(system).num_nodes
    return FLOAT32_BYTES * 2**29 * nodes


def message_bytes(collective: Collective, held: Sequence[float]) -> float:
    """The NCCL message size of one group from the bytes each member holds before the step.

    AllReduce, ReduceScatter and Reduce take the (equal) buffer every member holds; AllGather's
    message is the gathered output (sum of the members' pieces); Broadcast sends the root's buffer.
    This is the only place where a collective's data volume is decided.
    """
    if not held:
        return 0.0
    if collective is Collective.ALL_GATHER:
        return float(sum(held))
    if collective is Collective.BROADCAST:
        return float(held[0])
    return float(max(held))


def held_fractions(states: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Per state, the share of the full buffer every device holds: non-empty rows / rows."""
    return [s.any(axis=2).sum(axis=1) / s.shape[1] for s in states]

def held_fractions_of_programs(hierarchy: SynthesisHierarchy, programs: Sequence[Program], *,
                               checked: bool = False, sharding: Sharding | None = None
                               ) -> dict[Program, list[np.ndarray]]:
    """For each program, the share of the full buffer every synthesis device holds before each step.

    States come from the interpreter (``semantics.initial_state``/``apply_step``); programs are walked
    in prefix order so a shared prefix is interpreted once. Results are memoized (pure function).
    ``checked``: an interpreter has already proved every program valid (a synthesis result), so the row
    abstraction gives their volumes at every size, at k² instead of k³ per step. ``sharding``: a sharded goal
    on the hierarchy's devices (docs/semantics.md §6); under the AllGather goal a device starts with its shard.
    """
    ordered = tuple(sorted(set(programs), key=lambda p: tuple(map(str, p.instructions))))
    return _held_fractions(hierarchy, ordered, checked, sharding)


@lru_cache(maxsize=64)
def _held_fractions(hierarchy: SynthesisHierarchy, programs: tuple[Program, ...],
                    checked: bool = False, sharding: Sharding | None = None) -> dict[Program, list[np.ndarray]]:
    k = hierarchy.num_devices
    if checked or k > INTERPRETED_DEVICES:
        return _held_fractions_by_rows(hierarchy, programs, sharding)
    out: dict[Program, list[np.ndarray]] = {}
    stack: list[tuple[tuple, np.ndarray, np.ndarray]] = [((), initial_state(k, sharding=sharding), None)]
    stack[0] = ((), stack[0][1], held_fractions([stack[0][1]])[0])
    for prog in programs:
        instrs = prog.instructions
        while stack[-1][0] != instrs[: len(stack[-1][0])]:
            stack.pop()
        while len(stack[-1][0]) < len(instrs):
            prefix, state, _ = stack[-1]
            ins = instrs[len(prefix)]
            nxt = apply_step(state, len(prefix), ins.collective, instruction_groups(hierarchy, ins), False)
            if isinstance(nxt, Violation):
                raise P2Error(f"program {prog} is invalid here: {nxt.message}")
            stack.append((prefix + (ins,), nxt, held_fractions([nxt])[0]))
        out[prog] = [frac for _, _, frac in stack[: len(instrs)]]
    return out


def _held_fractions_by_rows(hierarchy: SynthesisHierarchy, programs: tuple[Program, ...],
                            sharding: Sharding | None = None) -> dict[Program, list[np.ndarray]]:
    """As ``_held_fractions`` on the row abstraction (``rows[d, r]``: device d's chunk r is non-empty)."""
    k = hierarchy.num_devices
    out: dict[Program, list[np.ndarray]] = {}
    start = np.ones((k, k), dtype=bool)
    if sharding is not None and sharding.kind is GoalKind.ALL_GATHER:  # each device starts with its shard only
        start[:] = False
        for d in range(k):
            start[d, list(sharding.shard(d, k))] = True
    stack: list[tuple[tuple, np.ndarray]] = [((), start)]
    for prog in programs:
        instrs = prog.instructions
        while stack[-1][0] != instrs[: len(stack[-1][0])]:
            stack.pop()
        while len(stack[-1][0]) < len(instrs):
            prefix, rows = stack[-1]
            ins = instrs[len(prefix)]
            nxt = apply_rows(rows, ins.collective, instruction_groups(hierarchy, ins))
            if isinstance(nxt, str):
                raise P2Error(f"program {prog} is invalid here: step {len(prefix)}: {nxt}")
            stack.append((prefix + (ins,), nxt))
        out[prog] = [rows.sum(axis=1) / k for _, rows in stack[: len(instrs)]]
    return out


def apply_rows(rows: np.ndarray, collective: Collective, groups: Sequence[Group]) -> np.ndarray | str:
    """One step of the interpreter's row abstraction: which chunks each device holds afterwards.

    It follows ``semantics.apply_group`` on rows only (AllReduce/AllGather: the union; Reduce: the
    union at the root; ReduceScatter: member i keeps the i-th block of the union; Broadcast: the
    root's), and checks the row-level preconditions (same chunks, divisibility, disjoint equal pieces);
    the contribution-level ones need the full state. Returns the new rows or a violation message.
    """
    new = rows.copy()
    by_size: dict[int, list[Group]] = {}
    for g in groups:
        by_size.setdefault(len(g), []).append(g)
    for m, gs in by_size.items():
        idx = np.array(gs)
        members = rows[idx]
        union = members.any(axis=1)
        if collective is Collective.ALL_GATHER:
            counts = members.sum(axis=2)
            if (members.sum(axis=1) > 1).any() or (counts != counts[:, :1]).any():
                return "AllGather needs members to hold disjoint chunks of equal number"
            new[idx] = union[:, None, :]
        elif collective is Collective.BROADCAST:
            new[idx] = members[:, :1, :]
        else:
            if (members != members[:, :1, :]).any():
                return f"{collective.value} needs every member to hold the same chunks"
            if collective is Collective.ALL_REDUCE:
                new[idx] = union[:, None, :]
            elif collective is Collective.REDUCE:
                new[idx] = False
                new[idx[:, 0]] = union
            else:
                count = union.sum(axis=1)
                if (count % m).any():
                    return f"ReduceScatter over {m} devices needs the non-empty chunks to divide by {m}"
                owner = (np.cumsum(union, axis=1) - 1) // np.maximum(count // m, 1)[:, None]
                new[idx] = union[:, None, :] & (owner[:, None, :] == np.arange(m)[None, :, None])
    return new


def _physical_volumes(hierarchy: SynthesisHierarchy, fractions: Sequence[np.ndarray],
                      bytes_per_device: float) -> list[dict[int, float]]:
    return [{rep[i]: float(f[i]) * bytes_per_device for rep in hierarchy.replicas for i in range(len(rep))}
            for f in fractions]


def program_volumes(hierarchy: SynthesisHierarchy, program: Program, bytes_per_device: float) -> list[dict[int, float]]:
    """Bytes each physical device holds before each step of ``program`` (from the interpreter's states)."""
    fractions = held_fractions_of_programs(hierarchy, [program])[program]
    return _physical_volumes(hierarchy, fractions, bytes_per_device)
