"""A second concrete interpreter on a compressed state: checks and enumerates programs at any size.

``check.PlanChecker`` proves a program with a symbolic cell, but its formulas hold a term per device
and step, and Z3's time grows with them (≈1.5 s per 3-step program at 256 devices, see
``benchmarks/scale.py``). This module decides docs/semantics.md §4's Hoare rules exactly on a compressed state:
a device's state is a few *pieces* (a bit set of chunks and the bit set of contributions every one
of those chunks holds), so its size is O(pieces · k) bits instead of the interpreter's k² per device;
in valid executions a device has one piece, or a few after an AllGather of unequal members.
Programs are checked in lexicographic order along one stack of prefix states; device states are
interned (a state is a tuple of tokens), each distinct (state, instruction) step is computed once and
each group's outcome once per distinct (collective, members' states), so programs that share a
prefix or reach one state by different prefixes share the work (``check_program`` is the plain
per-program reference it is tested against). It shares no code with ``semantics.py`` or the encodings (it is an
independent re-check), and it reports the first failing step, group and rule in the interpreter's
order (steps, then groups, then rules; progress after a group's rules).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from operator import itemgetter

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


@lru_cache(maxsize=1 << 16)
def _blocks(rows: int, m: int) -> tuple[int, ...]:
    """``rows`` cut into ``m`` equal contiguous blocks in chunk order (``m`` divides its size).

    Pure and cached: the members of every group of a step usually hold the same chunks."""
    block = rows.bit_count() // m
    if block == 0:
        return (0,) * m
    runs = (rows & ~(rows << 1)).bit_count()  # maximal runs of consecutive chunks
    cuts = _cuts_by_runs(rows, m, block) if runs <= 4 * m else [_position(rows, i * block) for i in range(m)]
    cuts.append(rows.bit_length())
    return tuple(rows & (((1 << cuts[i + 1]) - 1) ^ ((1 << cuts[i]) - 1)) for i in range(m))


def _position(rows: int, j: int) -> int:
    """The bit index of the j-th set bit of ``rows`` (0-based), by bisection."""
    lo, hi = 0, rows.bit_length()
    while lo < hi:
        mid = (lo + hi) // 2
        if (rows & ((1 << (mid + 1)) - 1)).bit_count() > j:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _cuts_by_runs(rows: int, m: int, block: int) -> list[int]:
    """The bit indices of set bits 0, block, 2·block, … of ``rows``, walking its runs of set bits."""
    cuts: list[int] = []
    before = 0  # set bits below the current run
    while len(cuts) < m:
        start = (rows & -rows).bit_length() - 1
        x = rows >> start
        length = (~x & (x + 1)).bit_length() - 1
        while len(cuts) < m and len(cuts) * block < before + length:
            cuts.append(start + len(cuts) * block - before)
        before += length
        rows &= rows + (1 << start)  # clears the run
    return cuts


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


def _one_piece_group(coll: Collective, group: tuple[int, ...], states: list[State]) -> list[State] | None:
    """``apply_group`` when every member holds one piece (the usual case; Broadcast members may be
    empty), in one pass over the members with the rules in the same order; None when a member has
    another shape (``apply_group`` decides)."""
    m = len(group)
    if coll is BC:
        root = states[0]
        if len(root) != 1:
            return None
        r0, c0 = root[0]
        nr0, nc0 = ~r0, ~c0
        same = True
        for s in states:
            if s is root:
                continue
            if len(s) != 1:
                if s:
                    return None
                same = False  # an empty member is below the root and differs from it
                continue
            r, c = s[0]
            if (r is not r0 and r & nr0) or c & nc0:
                raise _Fail(group, "Broadcast.below_root")
            if same and s != root:
                same = False
        if same:
            raise _Fail(group, "Broadcast.information_increase")
        return [root] * m
    first = states[0]
    if len(first) != 1:
        return None
    r0, c0 = first[0]
    if coll is AG:
        n0 = r0.bit_count()
        seen = 0
        sizes = one = True
        for s in states:
            if len(s) != 1:
                return None
            r, c = s[0]
            if r & seen:
                raise _Fail(group, "AllGather.disjoint_chunks")
            seen |= r
            if r.bit_count() != n0:
                sizes = False
            if c != c0:
                one = False
        if not sizes:
            raise _Fail(group, "AllGather.equal_sizes")
        return [((seen, c0),)] * m if one else None
    contrib = 0
    overlap = False
    for s in states:
        if len(s) != 1:
            return None
        r, c = s[0]
        if r != r0:
            raise _Fail(group, f"{coll.value}.same_chunks")
        if contrib & c:
            overlap = True
        contrib |= c
    if overlap:
        raise _Fail(group, f"{coll.value}.disjoint")
    if coll is AR:
        return [((r0, contrib),)] * m
    if coll is RED:
        return [((r0, contrib),)] + [()] * (m - 1)
    if r0.bit_count() % m:
        raise _Fail(group, "ReduceScatter.divisible")
    return [((b, contrib),) if b else () for b in _blocks(r0, m)]


def outcome(coll: Collective, group: tuple[int, ...], before: list[State], progress: bool) -> list[State] | str:
    """The members' new states (the one-piece path, else ``apply_group``), or the name of the rule the group
    violates (``progress``: some member must change)."""
    try:
        out = _one_piece_group(coll, group, before)
        if out is None:
            out = apply_group(coll, group, before)
    except _Fail as fail:
        return fail.rule
    if progress and out == before:
        return "progress"
    return out


def _shard_rows(problem: SynthesisProblem, d: int) -> int:
    """The chunks of device d's shard (docs/semantics.md §6) as a bit set: ``b`` chunks from rank·b."""
    sh = problem.sharding
    b = problem.num_devices // sh.shards
    return ((1 << b) - 1) << (sh.rank[d] * b)


def _initial(problem: SynthesisProblem) -> list[State]:
    """Device d holds its own contribution in every chunk; under the AllGather goal in its shard only."""
    k = problem.num_devices
    full = (1 << k) - 1
    if problem.sharding is not None and problem.sharding.kind == "all-gather":
        return [((_shard_rows(problem, d), 1 << d),) for d in range(k)]
    return [((full, 1 << d),) for d in range(k)]


def _goal(problem: SynthesisProblem) -> list[State]:
    """Every chunk of a device holds exactly the contributions of its goal group (others: nothing); under a
    ReduceScatter goal only its shard's chunks do, under the AllGather goal each chunk holds its owner's."""
    full = (1 << problem.num_devices) - 1
    kind = problem.sharding.kind if problem.sharding is not None else None
    goal: list[State] = [()] * problem.num_devices
    for g in problem.goal_groups:
        mask = sum(1 << d for d in g)
        for d in g:
            if kind == "all-gather":
                goal[d] = _canon({1 << o: _shard_rows(problem, o) for o in g})
            else:
                goal[d] = ((_shard_rows(problem, d) if kind else full, mask),)
    return goal


def initial_states(problem: SynthesisProblem) -> list[State]:
    """The problem's initial device states (§4, or §6's AllGather start), compressed."""
    return _initial(problem)


def goal_states(problem: SynthesisProblem) -> list[State]:
    """The problem's goal device states (§4, or §6's sharded goals), compressed."""
    return _goal(problem)


Tokens = tuple[int, ...]  # a state as its devices' tokens (indices of interned device states)


@dataclass(frozen=True)
class _Plan:
    """How one instruction reads and writes a state in C loops: ``members[j](state)`` is group j's
    members' tokens; ``gather(outputs of every group, then the state)`` is the new state."""

    groups: tuple[tuple[int, ...], ...]
    members: tuple[Callable[[Tokens], Tokens], ...]
    gather: Callable[[list[int]], Tokens]

    @classmethod
    def of(cls, groups, k: int) -> _Plan:
        where = list(range(sum(map(len, groups)), sum(map(len, groups)) + k))  # devices in no group: the state
        for p, d in enumerate(d for g in groups for d in g):
            where[d] = p
        return cls(tuple(groups), tuple(_getter(g) for g in groups), _getter(tuple(where)))


def _getter(indices: tuple[int, ...]) -> Callable[[Sequence[int]], Tokens]:
    """``lambda s: tuple(s[i] for i in indices)``, in C (``itemgetter`` returns a bare item for one index)."""
    if len(indices) == 1:
        (i,) = indices
        return lambda s: (s[i],)
    return itemgetter(*indices)


class _Table(list):
    """Values numbered in order of first sight: ``id(v)`` is v's index (a new one for a new value)."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: dict[Hashable, int] = {}

    def id(self, value: Hashable) -> int:
        found = self.ids.setdefault(value, len(self))
        if found == len(self):
            self.append(value)
        return found


class _Interned:
    """The compressed state with every distinct device state interned once and named by a token (its
    index), so a state is a tuple of small integers: cheap to hash and compare. ``step`` raises _Fail
    with the violated rule. A group's outcome depends only on its members' states, so it is computed
    once per distinct (collective, members' tokens) and shared by every group and step that has them."""

    def __init__(self, problem: SynthesisProblem):
        self.problem = problem
        self.states: _Table = _Table()  # device states by token
        self.token = self.states.id
        self.outcomes: dict[Collective, dict[Tokens, Tokens | str]] = {c: {} for c in Collective}
        self.initial: Tokens = tuple(self.token(s) for s in _initial(problem))
        self.goal: Tokens = tuple(self.token(s) for s in _goal(problem))
        self.plans: list[_Plan | None] = [None] * len(problem.candidates)

    def step(self, state: Tokens, i: int) -> Tokens:
        """The state after candidate ``i``, or raises _Fail (groups in order)."""
        plan = self.plans[i]
        if plan is None:
            plan = self.plans[i] = _Plan.of(self.problem.candidates[i].groups, self.problem.num_devices)
        coll = self.problem.candidates[i].collective
        memo = self.outcomes[coll]
        flat: list[int] = []
        for g, members_of in zip(plan.groups, plan.members):
            members = members_of(state)
            out = memo.get(members)
            if out is None:
                out = memo[members] = self._outcome(coll, g, members)
            if out.__class__ is str:
                raise _Fail(g, out)
            flat += out
        flat += state
        return plan.gather(flat)

    def _outcome(self, coll: Collective, group: tuple[int, ...], members: Tokens) -> Tokens | str:
        """The members' new tokens, or the name of the rule the group violates."""
        before = [self.states[t] for t in members]
        out = outcome(coll, group, before, self.problem.require_progress)
        if out.__class__ is str:
            return out
        if out[0] is out[-1] and out.count(out[0]) == len(out):  # AllReduce, AllGather, Broadcast
            return (members[0] if out[0] is before[0] else self.token(out[0]),) * len(out)
        return tuple(map(self.token, out))


class _Runner:
    """The states along the current prefix (a stack of state ids), for programs taken in lexicographic
    order; every distinct state is kept once and each (state, candidate) step is computed once, so
    programs that reach one state by different prefixes share its suffixes' work.

    ``machine`` has ``initial``, ``goal`` and ``step(state, i)`` (raising _Fail); ``states`` interns whole
    states (``id(state)``, ``states[id]``): a ``_Table`` of token tuples here, numpy arrays in
    ``semantics.vectorized``."""

    def __init__(self, machine, states=None):
        self.machine = machine
        self.states = _Table() if states is None else states  # whole states by id
        self.successor: dict[tuple[int, int], int | _Fail] = {}
        self.stack: list[int] = [self.states.id(machine.initial)]
        self.prefix: list[int] = []
        self.goal_id = self.states.id(machine.goal)
        self.failed_at: int | None = None  # prefix length whose last step failed
        self.failure: _Fail | None = None

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
            try:
                found = self.states.id(self.machine.step(self.states[sid], i))
            except _Fail as fail:
                found = fail
            self.successor[sid, i] = found
        return found

    def reached_goal(self) -> bool:
        return self.stack[-1] == self.goal_id


def check_programs(
    problem: SynthesisProblem, programs: Sequence[Sequence[int]], timeout_ms: int | None = None
) -> list[Verdict]:
    """One verdict per program (in the given order): proved, counterexample, or unknown after
    ``timeout_ms`` (wall clock over the whole call). Exact at any number of devices."""
    return run_checks(problem, programs, timeout_ms, lambda: _Runner(_Interned(problem)))


def run_checks(problem: SynthesisProblem, programs: Sequence[Sequence[int]], timeout_ms: int | None,
               runner_of: Callable[[], _Runner]) -> list[Verdict]:
    """``check_programs`` on the runner ``runner_of()`` builds (after the arguments are validated): the
    programs in lexicographic order along its prefix states, the verdicts in the given order."""
    if timeout_ms is not None and timeout_ms <= 0:
        raise P2Error(f"timeout must be positive, got {timeout_ms} ms")
    progs = [_program(problem, p) for p in programs]
    deadline = None if timeout_ms is None else time.perf_counter() + timeout_ms / 1000
    runner = runner_of()
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
    states = _initial(problem)
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
    state, the goal state, and the state after one candidate (None when a precondition fails);
    states are tuples of device-state tokens."""

    def __init__(self, problem: SynthesisProblem):
        self._machine = _Interned(problem)
        self.initial: Tokens = self._machine.initial
        self.goal: Tokens = self._machine.goal

    def step(self, state: Tokens, i: int) -> Tokens | None:
        try:
            return self._machine.step(state, i)
        except _Fail:
            return None

    def chunks_held(self, token: int) -> int:
        """How many chunks the device state a token names holds (its non-empty rows)."""
        return _rows(self._machine.states[token]).bit_count()
