"""An interpreter of buffer positions under XLA/NCCL replica-group rules, for explicit plans and HLO.

P²'s semantics (``dense``) tracks which chunks a device holds, not where they sit in its buffer. Real
collectives fix the layout: ReduceScatter gives member i the i-th block of the summed buffer,
AllGather concatenates the members' buffers in group order, Reduce and Broadcast use the first
member as root. Here each device's buffer is a list of cells ``(block, contributors)`` that shrinks
and grows with those rules; the goal is every device holding, at position p, block p summed over its
reduction group, or under a sharded goal (docs/semantics.md §6) exactly its shard's blocks in order (and,
for AllGather, starting from its shard alone). A permuted result is reported with the device, the position
and the block found there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from p2smt.model.collectives import Collective, Group
from p2smt.model.dsl import validate_plan
from p2smt.model.failure import Rule
from p2smt.model.goal import GoalKind, Sharding

Step = tuple[Collective, Sequence[Group]]
MAX_REPORTED = 64


@dataclass(frozen=True)
class Cell:
    """One block-sized slot of a buffer: which block of the data, summed over which devices."""

    block: int
    sources: frozenset[int]


Buffer = tuple[Cell | None, ...]
"""A device's buffer, position by position; ``None`` is undefined data (a non-root after Reduce)."""


@dataclass(frozen=True)
class PositionViolation:
    """A step (1-based) that real collectives cannot run as the plan means it: group, rule and why."""

    step: int
    group: Group
    device: int | None
    position: int | None
    rule: Rule
    message: str

    def to_json(self) -> dict:
        return {"step": self.step, "group": list(self.group), "device": self.device, "position": self.position,
                "rule": str(self.rule), "message": self.message}


@dataclass(frozen=True)
class Misplaced:
    """A final position that does not hold its own block summed over the device's reduction group."""

    device: int
    position: int
    expected_block: int
    found_block: int | None
    missing: tuple[int, ...]
    foreign: tuple[int, ...]

    def describe(self) -> str:
        if self.found_block is None:
            return (f"device {self.device} position {self.position} holds no data (expected block "
                    f"{self.expected_block})")
        if self.found_block != self.expected_block:
            return (f"device {self.device} position {self.position} holds block {self.found_block}, "
                    f"not block {self.expected_block}: the result is permuted")
        return (f"device {self.device} position {self.position} holds block {self.found_block} "
                f"missing {list(self.missing)}, with foreign {list(self.foreign)}")

    def to_json(self) -> dict:
        return {"device": self.device, "position": self.position, "expected_block": self.expected_block,
                "found_block": self.found_block, "missing": list(self.missing), "foreign": list(self.foreign)}


@dataclass(frozen=True)
class PositionRun:
    """The final buffers, the first violated rule (if any) and the misplaced final positions."""

    buffers: tuple[Buffer, ...]
    violation: PositionViolation | None
    misplaced: tuple[Misplaced, ...]
    wrong_length: tuple[tuple[int, int], ...] = ()
    blocks: int = 0
    final_blocks: int | None = None  # a sharded goal's buffer length at the end (None: ``blocks``)

    @property
    def valid(self) -> bool:
        return self.violation is None and not self.misplaced and not self.wrong_length

    def message(self) -> str:
        if self.violation:
            return f"step {self.violation.step} ({self.violation.rule}): {self.violation.message}"
        if self.wrong_length:
            d, n = self.wrong_length[0]
            if self.final_blocks is not None:
                return f"device {d} ends with {n} blocks, not its shard of {self.final_blocks}"
            return f"device {d} ends with {n} blocks, not the full buffer of {self.blocks}"
        if self.misplaced:
            return self.misplaced[0].describe()
        return "every device holds every block in its place"

    def counterexample(self) -> dict:
        """The fields of a COUNTEREXAMPLE: rule and step, or the device, position and block found there."""
        if self.violation:
            v = self.violation
            return {"semantics": "positions", "message": self.message(), "failing_step": v.step,
                    "group": list(v.group), "device": v.device, "position": v.position, "rule": str(v.rule)}
        out = {"semantics": "positions", "message": self.message(), "rule": str(Rule.POSITIONS_GOAL)}
        if self.wrong_length:
            return out | {"device": self.wrong_length[0][0]}
        m = self.misplaced[0]
        return out | {"device": m.device, "position": m.position, "block": m.found_block,
                      "expected_block": m.expected_block, "misplaced": len(self.misplaced)}

    def to_json(self) -> dict:
        return {
            "valid": self.valid,
            "violation": self.violation.to_json() if self.violation else None,
            "wrong_length": [{"device": d, "blocks": n} for d, n in self.wrong_length[:MAX_REPORTED]],
            "misplaced": [m.to_json() for m in self.misplaced[:MAX_REPORTED]],
            "message": self.message(),
        }


def _fail(step: int, group: Group, device, position, rule: str, message: str) -> PositionViolation:
    return PositionViolation(step, tuple(group), device, position, Rule(rule), message)


def _same_lengths(step: int, coll: Collective, group: Group, bufs: list[Buffer]) -> PositionViolation | None:
    for d, b in zip(group[1:], bufs[1:]):
        if len(b) != len(bufs[0]):
            return _fail(step, group, d, None, f"{coll.value}.shapes",
                         f"device {group[0]} passes {len(bufs[0])} blocks but device {d} passes {len(b)}: "
                         f"{coll.value} needs equal buffers")
    return None


def _sum(step: int, coll: Collective, group: Group, bufs: list[Buffer]) -> Buffer | PositionViolation:
    """Element-wise sum of the members' buffers: same block at every position, disjoint contributors."""
    out: list[Cell] = []
    for p in range(len(bufs[0])):
        cells = [b[p] for b in bufs]
        for d, c in zip(group, cells):
            if c is None:
                return _fail(step, group, d, p, f"{coll.value}.undefined",
                             f"position {p} of device {d} holds no data (a non-root after Reduce): "
                             f"{coll.value} would add garbage")
        first = cells[0]
        for d, c in zip(group[1:], cells[1:]):
            if c.block != first.block:
                return _fail(step, group, d, p, f"{coll.value}.same_blocks",
                             f"position {p} holds block {first.block} on device {group[0]} but block {c.block} "
                             f"on device {d}: {coll.value} would add different blocks")
        seen: set[int] = set()
        for d, c in zip(group, cells):
            twice = seen & c.sources
            if twice:
                return _fail(step, group, d, p, f"{coll.value}.disjoint",
                             f"position {p} of device {d} already holds device {min(twice)}'s contribution to "
                             f"block {c.block}: {coll.value} would count it twice")
            seen |= c.sources
        out.append(Cell(first.block, frozenset(seen)))
    return tuple(out)


def apply_group(step: int, coll: Collective, group: Group, bufs: list[Buffer]) -> list[Buffer] | PositionViolation:
    """The members' new buffers under XLA/NCCL rules, or the rule the step breaks."""
    m = len(group)
    bad = _same_lengths(step, coll, group, bufs)
    if bad:
        return bad
    if coll is Collective.ALL_GATHER:
        whole = tuple(c for b in bufs for c in b)
        return [whole] * m
    if coll is Collective.BROADCAST:
        return [bufs[0]] * m
    if coll is Collective.REDUCE_SCATTER and len(bufs[0]) % m:
        return _fail(step, group, None, None, "ReduceScatter.divisible",
                     f"ReduceScatter over {m} devices needs a buffer of a multiple of {m} blocks, "
                     f"not {len(bufs[0])}")
    total = _sum(step, coll, group, bufs)
    if isinstance(total, PositionViolation):
        return total
    if coll is Collective.ALL_REDUCE:
        return [total] * m
    if coll is Collective.REDUCE:
        return [total] + [(None,) * len(total)] * (m - 1)
    size = len(total) // m
    return [total[i * size:(i + 1) * size] for i in range(m)]


def initial_buffers(num_devices: int, blocks: int, sharding: Sharding | None = None) -> list[Buffer]:
    """Every device's whole buffer of its own blocks; under the AllGather goal only its shard's blocks."""
    if sharding is not None and sharding.kind is GoalKind.ALL_GATHER:
        return [tuple(Cell(p, frozenset((d,))) for p in sharding.shard(d, blocks)) for d in range(num_devices)]
    return [tuple(Cell(p, frozenset((d,))) for p in range(blocks)) for d in range(num_devices)]


def _expected(goal_groups: Sequence[Group], blocks: int, sharding: Sharding | None):
    """Per device, a function from a final position to (block, contributors) it must hold, and the length of
    its final buffer (docs/semantics.md §6)."""
    group_of = {d: want for g in goal_groups for want in (frozenset(g),) for d in g}  # one set per group
    if sharding is None:
        return lambda d, p: (p, group_of.get(d, frozenset((d,)))), lambda d: blocks
    if sharding.kind is GoalKind.REDUCE_SCATTER:
        b = sharding.block(blocks)
        return (lambda d, p: (sharding.rank[d] * b + p, group_of.get(d, frozenset((d,))))), lambda d: b
    owner = {d: owners for g in goal_groups for owners in (sharding.owners(tuple(g), blocks),) for d in g}
    singles = {d: frozenset((d,)) for d in owner}
    return (lambda d, p: (p, singles[owner[d][p]])), lambda d: blocks


def _misplaced(buffers: Sequence[Buffer], goal_groups: Sequence[Group], blocks: int,
               sharding: Sharding | None = None):
    expected, length = _expected(goal_groups, blocks, sharding)
    same: dict[tuple[int, int], tuple] = {}  # cells share their sources after a collective: compare each pair once

    def equal(sources: frozenset[int], want: frozenset[int]) -> bool:
        key = (id(sources), id(want))
        found = same.get(key)
        if found is None:  # the pair is kept with its answer, so that neither id is reused while it is known
            found = same[key] = (sources, want, sources == want)
        return found[2]

    wrong_length, misplaced = [], []
    for d, buf in enumerate(buffers):
        if len(buf) != length(d):
            wrong_length.append((d, len(buf)))
            continue
        for p, cell in enumerate(buf):
            block, want = expected(d, p)
            if cell is None:
                misplaced.append(Misplaced(d, p, block, None, tuple(sorted(want)), ()))
            elif cell.block != block or not equal(cell.sources, want):
                misplaced.append(Misplaced(d, p, block, cell.block, tuple(sorted(want - cell.sources)),
                                           tuple(sorted(cell.sources - want))))
    return tuple(wrong_length), tuple(misplaced)


def execute_positions(
    num_devices: int, steps: Sequence[Step], goal_groups: Sequence[Group], blocks: int,
    sharding: Sharding | None = None,
) -> PositionRun:
    """Run a plan on buffers of ``blocks`` blocks per device (a shard of them under the AllGather goal) and
    judge the final buffers against the goal ``sharding`` binds (None: AllReduce); stop at the first rule a
    step breaks."""
    validate_plan(steps, num_devices)
    final = None if sharding is None or sharding.kind is GoalKind.ALL_GATHER else sharding.block(blocks)
    buffers = initial_buffers(num_devices, blocks, sharding)
    for t, (coll, groups) in enumerate(steps, start=1):
        new = list(buffers)
        for group in groups:
            out = apply_group(t, coll, tuple(group), [buffers[d] for d in group])
            if isinstance(out, PositionViolation):
                return PositionRun(tuple(buffers), out, (), (), blocks, final)
            for d, b in zip(group, out):
                new[d] = b
        buffers = new
    wrong_length, misplaced = _misplaced(buffers, goal_groups, blocks, sharding)
    return PositionRun(tuple(buffers), None, misplaced, wrong_length, blocks, final)
