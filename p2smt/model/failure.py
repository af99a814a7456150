"""One vocabulary for failed plans: the rules a step can break (``Rule``) and one violation shape.

The dense and positions interpreters, the Z3 prover and every command report a failure as a ``Violation``
built by ``violation``: the facts (which chunk, devices, contributions) are data, and the one sentence
saying what went wrong is worded here from them, so a failure reads the same whoever found it.
Steps are numbered from 1, as users count them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from p2smt.model.collectives import Collective, Group


class Rule(StrEnum):
    """A precondition of docs/semantics.md's Hoare rules, the goal, or a rule of XLA/NCCL buffer positions."""

    ALL_REDUCE_SAME_CHUNKS = "AllReduce.same_chunks"
    ALL_REDUCE_DISJOINT = "AllReduce.disjoint"
    REDUCE_SCATTER_SAME_CHUNKS = "ReduceScatter.same_chunks"
    REDUCE_SCATTER_DISJOINT = "ReduceScatter.disjoint"
    REDUCE_SCATTER_DIVISIBLE = "ReduceScatter.divisible"
    REDUCE_SAME_CHUNKS = "Reduce.same_chunks"
    REDUCE_DISJOINT = "Reduce.disjoint"
    ALL_GATHER_DISJOINT_CHUNKS = "AllGather.disjoint_chunks"
    ALL_GATHER_EQUAL_SIZES = "AllGather.equal_sizes"
    BROADCAST_BELOW_ROOT = "Broadcast.below_root"
    BROADCAST_INFORMATION_INCREASE = "Broadcast.information_increase"
    PROGRESS = "progress"
    GOAL = "goal"
    GOAL_MIXED = "goal.mixes_groups"
    # buffer positions under XLA/NCCL (semantics/positions.py)
    ALL_REDUCE_SHAPES = "AllReduce.shapes"
    REDUCE_SCATTER_SHAPES = "ReduceScatter.shapes"
    ALL_GATHER_SHAPES = "AllGather.shapes"
    REDUCE_SHAPES = "Reduce.shapes"
    BROADCAST_SHAPES = "Broadcast.shapes"
    ALL_REDUCE_UNDEFINED = "AllReduce.undefined"
    REDUCE_SCATTER_UNDEFINED = "ReduceScatter.undefined"
    REDUCE_UNDEFINED = "Reduce.undefined"
    ALL_REDUCE_SAME_BLOCKS = "AllReduce.same_blocks"
    REDUCE_SCATTER_SAME_BLOCKS = "ReduceScatter.same_blocks"
    REDUCE_SAME_BLOCKS = "Reduce.same_blocks"
    POSITIONS_GOAL = "positions.goal"

    @classmethod
    def of(cls, collective: Collective, check: str) -> Rule:
        """The rule named ``check`` ("disjoint", "progress", …) of ``collective``."""
        return cls(check) if check in ("progress", "goal") else cls(f"{Collective(collective).value}.{check}")

    @property
    def check(self) -> str:
        """The collective-independent part: ``"disjoint"`` for ``AllReduce.disjoint``."""
        return self.value.rsplit(".", 1)[-1]

    @property
    def collective(self) -> str:
        return self.value.split(".", 1)[0] if "." in self.value else ""


def _words_disjoint(c: str, f: Mapping[str, Any]) -> str:
    a, b = f["pair"]
    return (f"chunk {f['chunk']} of devices {a} and {b} both contain device {f['contribution']}'s contribution: "
            f"{c} would count it twice")


def _words_below_root(c: str, f: Mapping[str, Any]) -> str:
    if f.get("contribution") is None:
        return (f"chunk {f['chunk']} of device {f['device']} is non-empty but the root {f['root']}'s is empty: "
                "Broadcast would lose it")
    return (f"chunk {f['chunk']} of device {f['device']} holds device {f['contribution']}'s contribution which "
            f"the root {f['root']} lacks: Broadcast would lose it")


def _words_goal(c: str, f: Mapping[str, Any]) -> str:
    parts = []
    if f["missing"]:
        parts.append(f"misses contributions {list(f['missing'])}")
    if f["foreign"]:
        parts.append(f"holds foreign contributions {list(f['foreign'])}")
    off = f.get("devices_off", 1)
    more = f" ({off} devices are off the goal)" if off > 1 else ""
    if "shard_chunks" in f and list(f["holds_chunks"]) != list(f["shard_chunks"]):
        return (f"device {f['device']} ends with chunks {list(f['holds_chunks'])}, not its shard of the "
                f"{f['goal']} goal, chunks {list(f['shard_chunks'])}" + more)
    return f"chunk {f['chunk']} of device {f['device']} " + " and ".join(parts) + more


def _words_mixed(c: str, f: Mapping[str, Any]) -> str:
    a, b = f["contributions"]
    return (f"{c} sums shards that must stay apart: chunk {f['chunk']} would hold the contributions of devices "
            f"{a} and {b}, which belong to different reduction groups ({list(f['groups'][0])} and "
            f"{list(f['groups'][1])}); no later step can take them apart again")


_WORDS: dict[str, Callable[[str, Mapping[str, Any]], str]] = {
    "same_chunks": lambda c, f: (f"chunk {f['chunk']} is non-empty on device {f['has']} but empty on device "
                                 f"{f['lacks']}: {c} needs every member to hold the same chunks"),
    "disjoint": _words_disjoint,
    "divisible": lambda c, f: (f"ReduceScatter over {f['members']} devices needs the number of non-empty chunks "
                               f"({f['non_empty_chunks']}) to be divisible by {f['members']}"),
    "disjoint_chunks": lambda c, f: (f"chunk {f['chunk']} is held by both devices {f['pair'][0]} and "
                                     f"{f['pair'][1]}: AllGather needs members to hold disjoint chunks"),
    "equal_sizes": lambda c, f: (f"device {f['pair'][0]} holds {f['sizes'][0]} chunks but device "
                                 f"{f['pair'][1]} holds {f['sizes'][1]}: AllGather needs equal numbers of chunks"),
    "below_root": _words_below_root,
    "information_increase": lambda c, f: "every member already holds the root's state: Broadcast adds no information",
    "progress": lambda c, f: f"{c} over devices {list(f['members'])} changes no member's state",
    "goal": _words_goal,
    "mixes_groups": _words_mixed,
}


def describe(rule: Rule, facts: Mapping[str, Any], collective: str | None = None) -> str:
    """The one sentence for a failure of ``rule`` with these facts."""
    return _WORDS[rule.check](collective or rule.collective, facts)


@dataclass(frozen=True)
class Violation:
    """A failed plan: the step (1-based; None when every step applies but the goal fails) of ``steps``, its
    instruction text, the rule, the group and devices, the chunk, the sentence, and the facts behind it."""

    step: int | None
    steps: int
    instruction: str | None
    rule: Rule
    group: Group | None
    devices: tuple[int, ...]
    chunk: int | None
    message: str
    facts: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def headline(self) -> str:
        """``failing step 3 of 3: (root, InsideGroup, AllGather)``, or the goal failure after the last step."""
        if self.step is None:
            return f"every step applies (all {self.steps}) but the goal is not reached"
        return f"failing step {self.step} of {self.steps}: {self.instruction}"

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "steps": self.steps,
            "instruction": self.instruction,
            "rule": str(self.rule),
            "group": list(self.group) if self.group is not None else None,
            "devices": list(self.devices),
            "chunk": self.chunk,
            "message": self.message,
            "facts": _plain(self.facts),
        }


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def violation(step: int | None, steps: int, instruction: str | None, rule: Rule, group: Group | None,
              devices: Sequence[int], chunk: int | None, collective: str | None = None,
              **facts: Any) -> Violation:
    """A Violation whose message is worded from its facts (``step`` 1-based)."""
    facts = dict(facts, chunk=chunk) if chunk is not None else dict(facts)
    return Violation(step, steps, instruction, rule, tuple(group) if group is not None else None,
                     tuple(int(d) for d in devices), chunk, describe(rule, facts, collective), facts)


MAX_SHOWN_GROUPS = 4


def step_text(collective: Collective, groups: Sequence[Group]) -> str:
    """A plan step in words when it has no DSL instruction: ``AllReduce over [[0, 4], [1, 5]]``."""
    shown = [list(g) for g in groups[:MAX_SHOWN_GROUPS]]
    if len(groups) <= MAX_SHOWN_GROUPS:
        return f"{collective.value} over {shown}"
    sizes = sorted({len(g) for g in groups})
    size = sizes[0] if len(sizes) == 1 else "/".join(map(str, sizes))
    return f"{collective.value} over {len(groups)} groups of {size} ({', '.join(map(str, shown))}, …)"


def goal_masks(num_devices: int, goal_groups: Sequence[Group]) -> list[int]:
    """Per device, the bit set of the contributions its goal holds (0 for a device in no goal group)."""
    out = [0] * num_devices
    for g in goal_groups:
        mask = sum(1 << d for d in g)
        for d in g:
            out[d] = mask
    return out


def mixed_pair(contributions: int, goal_of: Sequence[int]) -> tuple[int, int] | None:
    """Two contributions of one chunk that belong to different reduction groups (or None).

    Reductions only ever grow a chunk's contributions and some member always keeps the union, so a
    chunk that holds two groups' data can never be taken apart: the goal is out of reach from then on.
    """
    if not contributions:
        return None
    first = (contributions & -contributions).bit_length() - 1
    own = goal_of[first] or 1 << first
    rest = contributions & ~own
    if not rest:
        return None
    return first, (rest & -rest).bit_length() - 1


def mixed_violation(step: int, steps: int, instruction: str | None, collective: Collective, group: Group,
                    chunk: int, pair: tuple[int, int], goal_groups: Sequence[Group]) -> Violation:
    """The violation of a reduction step that sums two reduction groups' data into ``chunk``."""
    owner = {d: tuple(g) for g in goal_groups for d in g}
    groups = [owner.get(c, (c,)) for c in pair]
    return violation(step, steps, instruction, Rule.GOAL_MIXED, group, pair, chunk, collective.value,
                     contributions=list(pair), groups=groups)
