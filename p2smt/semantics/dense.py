"""The concrete interpreter of docs/semantics.md §4's Hoare rules on the k×k Boolean device state (numpy).

It is the oracle of every engine: written from docs/semantics.md alone, it shares no code with the encodings.
``state[d, r, c]`` is True when device c's original chunk r has been summed into device d's chunk r.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from p2smt.errors import P2Error
from p2smt.model.collectives import Collective, Group
from p2smt.model.dsl import validate_plan
from p2smt.model.failure import Rule, Violation, step_text, violation
from p2smt.model.goal import GoalKind, Sharding

Step = tuple[Collective, Sequence[Group]]
MAX_INTERPRETER_DEVICES = 128
"""Devices of ``execute_all`` (many programs) and of the enumerative engine's search, whose k×k×k states it keeps
by the thousand (64 devices, length 4 on the superpod's shape: 150 MiB; 128: past 380 MiB and growing; 512: past
2.5 GB); ``execute`` (one plan) is bounded by bytes instead."""
MAX_STATE_BYTES = 256 << 20
"""Largest memory ``execute`` spends on one plan's states (k × chunks × k bytes per step, all kept)."""


def state_bytes(k: int, chunks: int, steps: int) -> int:
    """``execute``'s memory for a plan: one k×chunks×k Boolean state per step and the initial one."""
    return k * chunks * k * (steps + 1)


@dataclass(frozen=True)
class Defect:
    """A device chunk that misses contributions or holds ones from outside its reduction group."""

    device: int
    chunk: int
    missing: tuple[int, ...]
    foreign: tuple[int, ...]


@dataclass(frozen=True)
class Execution:
    states: list[np.ndarray] = field(repr=False)
    violation: Violation | None
    reached_goal: bool
    defects: tuple[Defect, ...] = ()  # the first ``MAX_DEFECTS`` in (device, chunk) order
    devices_off: tuple[int, ...] = ()  # every device with a chunk off the goal

    @property
    def valid(self) -> bool:
        return self.violation is None and self.reached_goal


def initial_state(k: int, chunks: int | None = None, sharding: Sharding | None = None) -> np.ndarray:
    """Device i holds its own contribution (column i) in every chunk; under the AllGather goal (§6) only in
    the chunks of its own shard."""
    state = np.zeros((k, chunks or k, k), dtype=bool)
    if sharding is not None and sharding.kind is GoalKind.ALL_GATHER:
        for d in range(k):
            state[d, list(sharding.shard(d, chunks or k)), d] = True
        return state
    state[np.arange(k), :, np.arange(k)] = True
    return state


def goal_state(k: int, goal_groups: Sequence[Group], chunks: int | None = None,
               sharding: Sharding | None = None) -> np.ndarray:
    """Every chunk of device i holds exactly the contributions of i's reduction group; under a ReduceScatter
    goal only the chunks of i's shard (the others empty), under the AllGather goal chunk r holds the
    contribution of the group member whose shard it is (docs/semantics.md §6)."""
    n = chunks or k
    state = np.zeros((k, n, k), dtype=bool)
    for g in goal_groups:
        idx = np.array(g)
        if sharding is None:
            state[np.ix_(idx, np.arange(n), idx)] = True
        elif sharding.kind is GoalKind.REDUCE_SCATTER:
            for d in g:
                state[np.ix_([d], list(sharding.shard(d, n)), idx)] = True
        else:
            state[idx[:, None], np.arange(n)[None, :], np.array(sharding.owners(tuple(g), n))[None, :]] = True
    return state


def _fail(step: int, coll: Collective, check: str, group: Group, devices, chunk, **facts) -> Violation:
    """A violation of ``coll``'s rule ``check`` at (1-based) ``step``; the plan context is added by ``execute``."""
    return violation(step, 0, None, Rule.of(coll, check), group, devices, chunk, coll.value, **facts)


def _check_disjoint(step: int, coll: Collective, group: Group, members: np.ndarray) -> Violation | None:
    counts = members.sum(axis=0, dtype=np.int32)
    if counts.max(initial=0) > 1:
        r, c = (int(v) for v in np.argwhere(counts > 1)[0])
        holders = [group[i] for i in np.flatnonzero(members[:, r, c])][:2]
        twice = [int(v) for v in np.flatnonzero(counts[r] > 1)]
        return _fail(step, coll, "disjoint", group, holders, r, pair=holders, contribution=c,
                     counted_twice=twice)
    return None


def _check_same_rows(step: int, coll: Collective, group: Group, rows: np.ndarray) -> Violation | None:
    if (rows == rows[0]).all():
        return None
    for i in range(1, len(group)):
        diff = np.flatnonzero(rows[i] != rows[0])
        if diff.size:
            r = int(diff[0])
            has, lacks = (group[0], group[i]) if rows[0, r] else (group[i], group[0])
            return _fail(step, coll, "same_chunks", group, (has, lacks), r, has=has, lacks=lacks)
    return None


def apply_group(step: int, coll: Collective, group: Group, members: np.ndarray) -> np.ndarray | Violation:
    """The new states of one group's members, or the violated precondition."""
    m = len(group)
    rows = members.any(axis=2)
    if coll in (Collective.ALL_REDUCE, Collective.REDUCE_SCATTER, Collective.REDUCE):
        bad = _check_same_rows(step, coll, group, rows) or _check_disjoint(step, coll, group, members)
        if bad:
            return bad
        union = members.any(axis=0)
        if coll is Collective.ALL_REDUCE:
            return np.broadcast_to(union, members.shape).copy()
        if coll is Collective.REDUCE:
            out = np.zeros_like(members)
            out[0] = union
            return out
        nonempty = np.flatnonzero(union.any(axis=1))
        if nonempty.size % m:
            return _fail(step, coll, "divisible", group, group, None, members=m, non_empty_chunks=int(nonempty.size))
        block = nonempty.size // m
        out = np.zeros_like(members)
        for i in range(m):
            keep = nonempty[i * block : (i + 1) * block]
            out[i, keep] = union[keep]
        return out
    if coll is Collective.ALL_GATHER:
        overlap = rows.sum(axis=0) > 1
        if overlap.any():
            r = int(np.flatnonzero(overlap)[0])
            holders = [group[i] for i in np.flatnonzero(rows[:, r])][:2]
            return _fail(step, coll, "disjoint_chunks", group, holders, r, pair=holders,
                         held_twice=[int(v) for v in np.flatnonzero(overlap)])
        counts = rows.sum(axis=1)
        if (counts != counts[0]).any():
            i = int(np.flatnonzero(counts != counts[0])[0])
            return _fail(step, coll, "equal_sizes", group, (group[0], group[i]), None,
                         pair=[group[0], group[i]], sizes=[int(counts[0]), int(counts[i])])
        return np.broadcast_to(members.any(axis=0), members.shape).copy()
    if coll is Collective.BROADCAST:
        root = members[0]
        exceeds = members & ~root
        if exceeds.any():
            i, r, c = (int(v) for v in np.argwhere(exceeds)[0])
            return _fail(step, coll, "below_root", group, (group[i], group[0]), r, device=group[i], root=group[0],
                         contribution=c)
        if (members == root).all():
            return _fail(step, coll, "information_increase", group, group, None)
        return np.broadcast_to(root, members.shape).copy()
    raise P2Error(f"unknown collective {coll!r}")


def apply_step(
    state: np.ndarray, step: int, coll: Collective, groups: Sequence[Group], require_progress: bool
) -> np.ndarray | Violation:
    """Apply one instruction to every (disjoint) group; devices in no group keep their state, and so do
    the members of one-device groups (XLA's no-op members: the no-op rule is for groups of two or more)."""
    new = state.copy()
    for group in groups:
        if len(group) < 2:
            continue
        idx = np.asarray(group)
        members = state[idx]
        out = apply_group(step, coll, tuple(group), members)
        if isinstance(out, Violation):
            return out
        if require_progress and np.array_equal(out, members):
            return _fail(step, coll, "progress", group, group, None, members=list(group))
        new[idx] = out
    return new


MAX_DEFECTS = 256
"""Defects worked out in full (missing and foreign contributions); the devices off the goal are all listed."""


def defects(state: np.ndarray, goal: np.ndarray) -> tuple[Defect, ...]:
    """The first ``MAX_DEFECTS`` device chunks off the goal, in (device, chunk) order."""
    out = []
    for d, r in np.argwhere((state != goal).any(axis=2))[:MAX_DEFECTS]:
        missing = np.flatnonzero(goal[d, r] & ~state[d, r])
        foreign = np.flatnonzero(state[d, r] & ~goal[d, r])
        out.append(Defect(int(d), int(r), tuple(int(v) for v in missing), tuple(int(v) for v in foreign)))
    return tuple(out)


def _off(state: np.ndarray, goal: np.ndarray) -> tuple[int, ...]:
    return tuple(int(d) for d in np.flatnonzero((state != goal).any(axis=(1, 2))))


def _in_context(v: Violation, steps: Sequence[Step]) -> Violation:
    """The violation with the plan's length and the failing step's text."""
    coll, groups = steps[v.step - 1]
    return replace(v, steps=len(steps), instruction=step_text(coll, groups))


def _check_size(k: int) -> None:
    if k > MAX_INTERPRETER_DEVICES:
        raise P2Error(
            f"{k} devices is too large for the concrete interpreter (k^3 state; limit "
            f"{MAX_INTERPRETER_DEVICES})"
        )


def execute(
    k: int,
    steps: Sequence[Step],
    goal_groups: Sequence[Group],
    require_progress: bool = False,
    chunks: int | None = None,
    sharding: Sharding | None = None,
) -> Execution:
    """Thread the state through the steps; stop at the first violated precondition (steps count from 1).

    ``chunks`` defaults to ``k``; for a plan on the whole system P²'s convention is the size of one
    reduction group, so that the same program has the same ReduceScatter blocks before and after lowering.
    ``sharding`` binds a sharded goal (docs/semantics.md §6); None is the AllReduce goal.
    ``states`` ends with the state at the failure (before the failing step, which does not apply).
    """
    need = state_bytes(k, chunks or k, len(steps))
    if need > MAX_STATE_BYTES:
        raise P2Error(f"{k} devices is too large for the dense interpreter on this plan ({k}x{chunks or k}x{k} "
                      f"state over {len(steps)} steps: {need >> 20} MiB; limit {MAX_STATE_BYTES >> 20} MiB)")
    if steps:
        validate_plan(steps, k)
    states = [initial_state(k, chunks, sharding)]
    goal = goal_state(k, goal_groups, chunks, sharding)
    for t, (coll, groups) in enumerate(steps, start=1):
        out = apply_step(states[-1], t, coll, groups, require_progress)
        if isinstance(out, Violation):
            return Execution(states, _in_context(out, steps), False)
        states.append(out)
    reached = bool(np.array_equal(states[-1], goal))
    if reached:
        return Execution(states, None, True)
    return Execution(states, None, False, defects(states[-1], goal), _off(states[-1], goal))


def execute_all(
    k: int,
    programs: Sequence[Sequence[Step]],
    goal_groups: Sequence[Group],
    require_progress: bool = False,
    *,
    keep_states: bool = True,
    sharding: Sharding | None = None,
) -> list[Execution]:
    """``execute`` for many programs at once; a prefix shared by several programs is run once.

    Programs are run in prefix order so that only the states along the current prefix are held (a
    k×k×k state is 2 MiB at 128 devices); ``keep_states=False`` also leaves ``Execution.states`` empty,
    which keeps memory bounded by the program length instead of the number of distinct prefixes."""
    _check_size(k)
    goal = goal_state(k, goal_groups, sharding=sharding)
    start = initial_state(k, sharding=sharding)
    ids: dict[tuple, int] = {}
    keyed = [tuple((coll, tuple(tuple(g) for g in groups)) for coll, groups in steps) for steps in programs]
    order = sorted(range(len(keyed)), key=lambda i: [ids.setdefault(s, len(ids)) for s in keyed[i]])
    path: list[tuple[tuple, np.ndarray | Violation]] = []  # (step, what it leads to) along the current prefix
    out: list[Execution | None] = [None] * len(keyed)
    for i in order:
        keys, steps = keyed[i], programs[i]
        shared = 0
        while shared < min(len(path), len(keys)) and path[shared][0] == keys[shared]:
            shared += 1
        del path[shared:]
        failed = None
        for t in range(1, len(keys) + 1):
            if t > len(path):
                before = path[-1][1] if path else start
                coll, groups = keys[t - 1]
                validate_plan([(coll, groups)], k, start=t)
                path.append((keys[t - 1], apply_step(before, t, coll, groups, require_progress)))
            if isinstance(path[t - 1][1], Violation):
                failed = _in_context(path[t - 1][1], steps)
                break
        held = [start, *(s for _, s in path[:len(keys)] if not isinstance(s, Violation))]
        states = held if keep_states else []
        if failed is not None:
            out[i] = Execution(states, failed, False)
            continue
        reached = bool(np.array_equal(held[-1], goal))
        out[i] = Execution(states, None, reached, () if reached else defects(held[-1], goal),
                           () if reached else _off(held[-1], goal))
    return out  # type: ignore[return-value]
