"""A second concrete interpreter on a compressed state: checks and enumerates programs at any size.

``check.PlanChecker`` proves a program with a symbolic cell, but its formulas hold a term per device
and step, and Z3's time grows with them (≈1.5 s per 3-step program at 256 devices, see
``benchmarks/scale.py``). This module decides docs/semantics.md §4's Hoare rules exactly on a compressed state:
a device's state is a few *pieces* (a bit set of chunks and the bit set of contributions every one
of those chunks holds), so its size is O(pieces · k) bits instead of the interpreter's k² per device;
in valid executions a device has one piece, or a few after an AllGather of unequal members.
Programs are checked in lexicographic order along one stack of prefix states, so programs that share
a prefix share its work. It shares no code with ``semantics.py`` or the encodings (it is an
independent re-check), and it reports the first failing step, group and rule in the interpreter's
order (steps, then groups, then rules; progress after a group's rules).
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from p2smt.errors import P2Error
from p2smt.model.collectives import Collective
from p2smt.model.failure import Rule
from p2smt.model.problem import SynthesisProblem

AR, RS, AG, RED, BC = (
    Collective.ALL_REDUCE,
    Collective.REDUCE_SCATTER,
    Collective.ALL_GATHER,
    Collective.REDUCE,
    Collective.BROADCAST,
)
Piece = tuple[int, int]  # (chunks bit set, contributions bit set), chunks of different pieces disjoint
State = tuple[Piece, ...]  # canonical: distinct contributions, sorted; () = empty


@dataclass(frozen=True)
class Verdict:
    """``status``: "proved", "counterexample" (first failing ``step``, counted from 1, None for the goal;
    ``group`` its devices; ``rule``) or "unknown" (the deadline passed before it was decided)."""

    program: tuple[int, ...]
    status: str
    step: int | None = None
    group: tuple[int, ...] | None = None
    rule: Rule | None = None

    @property
    def proved(self) -> bool:
        return self.status == "proved"

    def to_json(self) -> dict:
        return {
            "program": list(self.program),
            "status": self.status,
            "step": self.step,
            "group": list(self.group) if self.group is not None else None,
            "rule": None if self.rule is None else str(self.rule),
        }


class _Fail(Exception):
    def __init__(self, group: tuple[int, ...], rule: str):
        super().__init__(rule)
        self.group = group
        self.rule = rule


def _canon(pieces: dict[int, int]) -> State:
    """contributions -> chunks as a canonical state (pieces with equal contributions merged)."""
    return tuple(sorted((rows, contrib) for contrib, rows in pieces.items() if rows))


def _rows(s: State) -> int:
    if len(s) == 1:  # the usual case
        return s[0][0]
    out = 0
    for rows, _ in s:
        out |= rows
    return out


def _union(group: tuple[int, ...], states: Sequence[State], coll: Collective) -> State:
    """⊎ of members holding the same chunks; every chunk's contributions must be disjoint."""
    if all(len(s) == 1 for s in states):  # the usual case: one piece each, the same chunks
        contrib = 0
        for ((_, c),) in states:
            if contrib & c:
                raise _Fail(group, f"{coll.value}.disjoint")
            contrib |= c
        return ((states[0][0][0], contrib),)
    acc: dict[int, int] = {c: r for r, c in states[0]}  # contributions -> chunks (one refinement)
    for s in states[1:]:
        nxt: dict[int, int] = {}
        for c1, r1 in acc.items():
            for r2, c2 in s:
                both = r1 & r2
                if not both:
                    continue
                if c1 & c2:
                    raise _Fail(group, f"{coll.value}.disjoint")
                key = c1 | c2
                nxt[key] = nxt.get(key, 0) | both
        acc = nxt
    return _canon(acc)


@lru_cache(maxsize=4096)
def _blocks(rows: int, m: int) -> tuple[int, ...]:
    """``rows`` cut into ``m`` equal contiguous blocks in chunk order (``m`` divides its size).

    Pure and cached: the members of every group of a step usually hold the same chunks."""
    block = rows.bit_count() // m
    if block == 0:
        return (0,) * m

    def position(j: int) -> int:  # bit index of the j-th set bit (0-based), by bisection
        lo, hi = 0, rows.bit_length()
        while lo < hi:
            mid = (lo + hi) // 2
            if (rows & ((1 << (mid + 1)) - 1)).bit_count() > j:
                hi = mid
            else:
                lo = mid + 1
        return lo

    cuts = [position(i * block) for i in range(m)] + [rows.bit_length()]
    return tuple(rows & (((1 << cuts[i + 1]) - 1) ^ ((1 << cuts[i]) - 1)) for i in range(m))


def _restrict(s: State, mask: int) -> State:
    return tuple((r & mask, c) for r, c in s if r & mask)


def _below(member: State, root: State) -> bool:
    """Every chunk of ``member`` is non-empty on the root with a superset of its contributions."""
    if len(root) == 1:  # the usual case (pieces are never empty)
        r0, c0 = root[0]
        return not any(r & ~r0 or c & ~c0 for r, c in member)
    for r, c in member:
        for r0, c0 in root:
            if r & r0 and c & ~c0:
                return False
        if r & ~_rows(root):
            return False
    return True


def apply_group(coll: Collective, group: tuple[int, ...], states: list[State]) -> list[State]:
    """The members' new states, or raises _Fail with the violated rule (interpreter's rule order)."""
    m = len(group)
    if coll in (AR, RS, RED):
        rows = [_rows(s) for s in states]
        if any(r != rows[0] for r in rows[1:]):
            raise _Fail(group, f"{coll.value}.same_chunks")
        union = _union(group, states, coll)
        if coll is AR:
            return [union] * m
        if coll is RED:
            return [union] + [()] * (m - 1)
        n = rows[0].bit_count()
        if n % m:
            raise _Fail(group, "ReduceScatter.divisible")
        return [_restrict(union, b) for b in _blocks(rows[0], m)]
    if coll is AG:
        seen = 0
        for s in states:
            r = _rows(s)
            if r & seen:
                raise _Fail(group, "AllGather.disjoint_chunks")
            seen |= r
        counts = [_rows(s).bit_count() for s in states]
        if any(c != counts[0] for c in counts[1:]):
            raise _Fail(group, "AllGather.equal_sizes")
        pieces: dict[int, int] = {}
        for s in states:
            for r, c in s:
                pieces[c] = pieces.get(c, 0) | r
        return [_canon(pieces)] * m
    if coll is BC:
        root = states[0]
        if not all(_below(s, root) for s in states[1:]):
            raise _Fail(group, "Broadcast.below_root")
        if all(s == root for s in states[1:]):
            raise _Fail(group, "Broadcast.information_increase")
        return [root] * m
    raise P2Error(f"unknown collective {coll!r}")


GroupStep = Callable[[tuple[int, ...]], None]
"""Applies one group of the current step with ``apply_group`` (members of any shape)."""


def _single_pieces(group: tuple[int, ...], states: Sequence[State]) -> list[Piece] | None:
    """The members' pieces when each holds exactly one (the usual case), else None."""
    try:
        return [p for (p,) in [states[d] for d in group]]
    except ValueError:
        return None


def _broadcast(groups, states: Sequence[State], new: list[State], general: GroupStep) -> None:
    """Broadcast on every group; a group whose root or a member holds several pieces goes to ``general``."""
    for g in groups:
        first = states[g[0]]
        if len(first) == 1:
            r0, c0 = first[0]
            nr0, nc0 = ~r0, ~c0
            same = fast = True
            for d in g:
                s = states[d]
                if s is first:
                    continue
                if len(s) != 1:
                    if s:
                        fast = False
                        break
                    same = False  # an empty member is below the root and differs from it
                    continue
                r, c = s[0]
                if (r is not r0 and r & nr0) or c & nc0:
                    raise _Fail(g, "Broadcast.below_root")
                if same and s != first:
                    same = False
            if fast:
                if same:
                    raise _Fail(g, "Broadcast.information_increase")
                for d in g:  # differs from the members: progress holds
                    new[d] = first
                continue
        general(g)


def _all_gather(groups, states: Sequence[State], new: list[State], progress: bool, intern, general: GroupStep
                ) -> None:
    """AllGather on every group; a group with a member of several pieces or members of unequal
    contributions (the result has several pieces) goes to ``general``."""
    for g in groups:
        ps = _single_pieces(g, states)
        if ps is not None:
            r0, c0 = ps[0]
            n0 = r0.bit_count()
            seen = 0
            sizes = one = True
            for r, c in ps:
                if r & seen:
                    raise _Fail(g, "AllGather.disjoint_chunks")
                seen |= r
                if r.bit_count() != n0:
                    sizes = False
                if c != c0:
                    one = False
            if not sizes:
                raise _Fail(g, "AllGather.equal_sizes")
            if one:
                u = ((seen, c0),)
                u = intern(u, u)
                if progress and all(states[d] == u for d in g):
                    raise _Fail(g, "progress")
                for d in g:
                    new[d] = u
                continue
        general(g)


def _reducing(coll: Collective, groups, states: Sequence[State], new: list[State], progress: bool, intern,
              general: GroupStep) -> None:
    """AllReduce, ReduceScatter or Reduce on every group; a group with a member that does not hold
    exactly one piece goes to ``general``."""
    same_chunks, disjoint = f"{coll.value}.same_chunks", f"{coll.value}.disjoint"
    for g in groups:
        ps = _single_pieces(g, states)
        if ps is None:
            general(g)
            continue
        r0 = ps[0][0]
        contrib = 0
        overlap = False
        for r, c in ps:
            if r != r0:
                raise _Fail(g, same_chunks)
            if contrib & c:
                overlap = True
            contrib |= c
        if overlap:
            raise _Fail(g, disjoint)
        u = ((r0, contrib),)
        u = intern(u, u)
        if coll is AR:
            if progress and all(states[d] == u for d in g):
                raise _Fail(g, "progress")
            for d in g:
                new[d] = u
            continue
        m = len(g)
        if coll is RED:
            out = [u] + [()] * (m - 1)
        else:
            if r0.bit_count() % m:
                raise _Fail(g, "ReduceScatter.divisible")
            out = []
            for b in _blocks(r0, m):
                o = ((b, contrib),) if b else ()
                out.append(intern(o, o))
        if progress and all(states[d] == o for d, o in zip(g, out)):
            raise _Fail(g, "progress")
        for d, o in zip(g, out):
            new[d] = o


def _initial(k: int) -> list[State]:
    """Device d holds its own contribution in every chunk."""
    full = (1 << k) - 1
    return [((full, 1 << d),) for d in range(k)]


def _goal(problem: SynthesisProblem) -> list[State]:
    """Every chunk of a device holds exactly the contributions of its goal group (others: nothing)."""
    full = (1 << problem.num_devices) - 1
    goal: list[State] = [()] * problem.num_devices
    for g in problem.goal_groups:
        mask = sum(1 << d for d in g)
        for d in g:
            goal[d] = ((full, mask),)
    return goal


class _Runner:
    """The states along the current prefix (a stack of state ids), for programs taken in lexicographic
    order; every distinct state is kept once and each (state, candidate) step is computed once, so
    programs that reach one state by different prefixes share its suffixes' work. Device states are
    interned (equal ones are one object), so a state's key is the cheap tuple of its devices' ids."""

    def __init__(self, problem: SynthesisProblem):
        k = problem.num_devices
        self.problem = problem
        self.pool: dict[State, State] = {(): ()}
        self.initial: tuple[State, ...] = tuple(self.intern(s) for s in _initial(k))
        self.states: list[tuple[State, ...]] = []
        self.ids: dict[bytes, int] = {}
        self.successor: dict[tuple[int, int], int | _Fail] = {}
        self.stack: list[int] = [self._id(self.initial)]
        self.prefix: list[int] = []
        self.goal = tuple(self.intern(s) for s in _goal(problem))
        self.goal_id = self._id(self.goal)
        self.failed_at: int | None = None  # prefix length whose last step failed
        self.failure: _Fail | None = None

    def intern(self, s: State) -> State:
        return self.pool.setdefault(s, s)

    def _id(self, states: tuple[State, ...]) -> int:
        """The id of a state whose device states are interned (a new id for a new state)."""
        found = self.ids.setdefault(array("Q", map(id, states)).tobytes(), len(self.states))
        if found == len(self.states):
            self.states.append(states)
        return found

    def advance(self, program: tuple[int, ...]) -> tuple[int | None, _Fail | None]:
        """Run ``program`` reusing the common prefix; (failing step, failure) or (None, None)."""
        common = 0
        while common < min(len(self.prefix), len(program)) and self.prefix[common] == program[common]:
            common += 1
        if self.failed_at is not None and common >= self.failed_at:
            return self.failed_at - 1, self.failure
        del self.prefix[common:]
        del self.stack[common + 1 :]
        self.failed_at, self.failure = None, None
        for t in range(common, len(program)):
            nxt = self._successor(self.stack[-1], program[t])
            self.prefix.append(program[t])
            if isinstance(nxt, _Fail):
                self.failed_at, self.failure = t + 1, nxt
                return t, nxt
            self.stack.append(nxt)
        return None, None

    def _successor(self, sid: int, i: int) -> int | _Fail:
        """The id of the state after candidate ``i`` from state ``sid`` (computed once), or its failure."""
        found = self.successor.get((sid, i))
        if found is None:
            cand = self.problem.candidates[i]
            try:
                found = self._id(self._step(self.states[sid], cand.collective, cand.groups))
            except _Fail as fail:
                found = fail
            self.successor[sid, i] = found
        return found

    def _step(self, states: tuple[State, ...], coll: Collective, groups) -> tuple[State, ...]:
        """The state after one instruction (device states interned), or raises _Fail."""
        new = list(states)
        progress = self.problem.require_progress
        intern = self.pool.setdefault

        def general(g: tuple[int, ...]) -> None:
            members = [states[d] for d in g]
            out = [intern(s, s) for s in apply_group(coll, g, members)]
            if progress and out == members:
                raise _Fail(g, "progress")
            for d, s in zip(g, out):
                new[d] = s

        if coll is BC:
            _broadcast(groups, states, new, general)
        elif coll is AG:
            _all_gather(groups, states, new, progress, intern, general)
        elif coll in (AR, RS, RED):
            _reducing(coll, groups, states, new, progress, intern, general)
        else:
            for g in groups:
                general(g)
        return tuple(new)

    def reached_goal(self) -> bool:
        return self.stack[-1] == self.goal_id


def check_programs(
    problem: SynthesisProblem, programs: Sequence[Sequence[int]], timeout_ms: int | None = None
) -> list[Verdict]:
    """One verdict per program (in the given order): proved, counterexample, or unknown after
    ``timeout_ms`` (wall clock over the whole call). Exact at any number of devices."""
    if timeout_ms is not None and timeout_ms <= 0:
        raise P2Error(f"timeout must be positive, got {timeout_ms} ms")
    progs = [_program(problem, p) for p in programs]
    deadline = None if timeout_ms is None else time.perf_counter() + timeout_ms / 1000
    runner = _Runner(problem)
    out: dict[int, Verdict] = {}
    for i in sorted(range(len(progs)), key=lambda i: progs[i]):
        p = progs[i]
        if deadline is not None and time.perf_counter() > deadline:
            out[i] = Verdict(p, "unknown")
            continue
        step, fail = runner.advance(p)
        if fail is not None:
            out[i] = Verdict(p, "counterexample", step + 1, fail.group, Rule(fail.rule))
        elif runner.reached_goal():
            out[i] = Verdict(p, "proved")
        else:
            out[i] = Verdict(p, "counterexample", None, None, Rule.GOAL)
    return [out[i] for i in range(len(progs))]


def _program(problem: SynthesisProblem, program: Sequence[int]) -> tuple[int, ...]:
    n = len(problem.candidates)
    p = tuple(int(c) for c in program)
    if not p or any(not 0 <= c < n for c in p):
        raise P2Error(f"program {list(p)} is empty or names a candidate outside 0..{n - 1}")
    return p


def check_program(problem: SynthesisProblem, program: Sequence[int]) -> Verdict:
    """One program's verdict, step by step with ``apply_group`` alone (no shared states, no one-piece
    path): the plain reference that ``check_programs`` must equal verdict for verdict."""
    p = _program(problem, program)
    states = _initial(problem.num_devices)
    for t, i in enumerate(p, 1):
        cand = problem.candidates[i]
        new = list(states)
        try:
            for g in cand.groups:
                members = [states[d] for d in g]
                out = apply_group(cand.collective, g, members)
                if problem.require_progress and out == members:
                    raise _Fail(g, "progress")
                for d, st in zip(g, out):
                    new[d] = st
        except _Fail as fail:
            return Verdict(p, "counterexample", t, fail.group, Rule(fail.rule))
        states = new
    if states == _goal(problem):
        return Verdict(p, "proved")
    return Verdict(p, "counterexample", None, None, Rule.GOAL)


class Stepper:
    """The compressed interpreter as a step function, for searches (``synth.pieces``): the initial
    state, the goal state, and the state after one candidate (None when a precondition fails)."""

    def __init__(self, problem: SynthesisProblem):
        self._runner = _Runner(problem)
        self.initial: tuple[State, ...] = self._runner.initial
        self.goal: tuple[State, ...] = self._runner.goal

    def step(self, states: tuple[State, ...], i: int) -> tuple[State, ...] | None:
        cand = self._runner.problem.candidates[i]
        try:
            return self._runner._step(states, cand.collective, cand.groups)
        except _Fail:
            return None
