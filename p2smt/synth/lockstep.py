"""Two sizes of one hierarchy run in lockstep over every program of every length: a finite decision.

For one reduction group over a kind-(d) hierarchy, the candidate instructions at two size vectors with
the same trivial levels are the same DSL labels in the same order (docs/symmetry.md, Theorem 1). This
module explores the graph of *pairs* of states (state at sizes ``a``, state at sizes ``b``) reached from
the pair of initial states by labels valid at both sizes, until no new pair appears (both state spaces
are finite, so it ends). At a pair where one label is valid at one size only, it searches the states
reachable from that size's successor for the goal: if the goal is reachable, prefix + label + path is a
program valid at one size and not at the other (a counterexample, returned); if not, no program goes
that way at either size (a dead end). Goal states end programs and must agree.

If the exploration ends without a counterexample, every program of every length is valid at ``a`` iff at
``b`` (under the chosen progress rule): a program valid at one size either stays in the explored pairs,
where validity and the goal agree at every step, or leaves them through a dead end, which it cannot.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from p2smt.errors import P2Error
from p2smt.model.dsl import problem
from p2smt.model.hierarchy import MasterScope
from p2smt.model.problem import SynthesisProblem
from p2smt.semantics.bitmatrix import Device, Machine, State
from p2smt.synth.symmetric import one_group_hierarchy

Pair = tuple[State, State]


@dataclass(frozen=True)
class Counterexample:
    """A program (labels) valid at ``valid_at`` and invalid at the other size vector."""

    labels: tuple[str, ...]
    valid_at: tuple[int, ...]


@dataclass(frozen=True)
class LockstepResult:
    """The outcome of one exhaustive lockstep exploration (``counterexample`` None: equal program sets)."""

    sizes: tuple[tuple[int, ...], tuple[int, ...]]
    master_scope: MasterScope
    require_progress: bool
    pairs: int  # reachable pairs of states explored
    states: tuple[int, int]  # distinct states of each size among them
    dead_ends: int  # one-sided valid steps after which the goal is unreachable
    counterexample: Counterexample | None


class _Side:
    """One size: its problem, machine, memoized group outcomes and goal reachability."""

    def __init__(self, sizes: Sequence[int], scope: MasterScope, progress: bool) -> None:
        self.sizes = tuple(sizes)
        self.prob: SynthesisProblem = problem(
            one_group_hierarchy([(f"l{j}", s) for j, s in enumerate(sizes)], scope), progress)
        self.machine = Machine(self.prob.num_devices)
        self.goal = self.machine.goal(self.prob.goal_groups)
        self._outcomes: dict[tuple, list[Device] | None] = {}
        self._dead: set[State] = set()

    def step(self, state: State, i: int) -> State | None:
        """The state after candidate ``i`` (None: a precondition or, if required, progress fails)."""
        cand = self.prob.candidates[i]
        new = list(state)
        for g in cand.groups:
            members = tuple(state[d] for d in g)
            key = (cand.collective, members)
            out = self._outcomes.get(key, False)
            if out is False:
                out = self.machine.apply_group(cand.collective, list(members))
                if out is not None and self.prob.require_progress and tuple(out) == members:
                    out = None
                self._outcomes[key] = out
            if out is None:
                return None
            for d, s in zip(g, out):
                new[d] = s
        return tuple(new)

    def path_to_goal(self, start: State) -> list[int] | None:
        """The candidates of a shortest path from ``start`` to the goal (not through it), or None."""
        if start in self._dead:
            return None
        parent: dict[State, tuple[State, int] | None] = {start: None}
        queue = deque([start])
        while queue:
            state = queue.popleft()
            if state == self.goal:
                path = []
                while (link := parent[state]) is not None:
                    state, i = link
                    path.append(i)
                return path[::-1]
            for i in range(len(self.prob.candidates)):
                nxt = self.step(state, i)
                if nxt is not None and nxt not in parent:
                    parent[nxt] = (state, i)
                    queue.append(nxt)
        self._dead.update(parent)  # none of them reaches the goal
        return None


def lockstep(sizes_a: Sequence[int], sizes_b: Sequence[int], master_scope: MasterScope = "per-ancestor",
             require_progress: bool = True, max_pairs: int | None = None) -> LockstepResult:
    """Decide whether one reduction group has the same programs (every length) at ``sizes_a`` and ``sizes_b``.

    ``max_pairs`` bounds the exploration (P2Error when exceeded: no decision)."""
    if [s == 1 for s in sizes_a] != [s == 1 for s in sizes_b]:
        raise P2Error("the two size vectors must have the same trivial levels")
    a, b = _Side(sizes_a, master_scope, require_progress), _Side(sizes_b, master_scope, require_progress)
    labels = [c.label for c in a.prob.candidates]
    if labels != [c.label for c in b.prob.candidates]:
        raise P2Error("the two sizes have different candidate instructions")
    start = (a.machine.initial(), b.machine.initial())
    parent: dict[Pair, tuple[Pair, int] | None] = {start: None}
    queue = deque([start])
    dead_ends = 0

    def prefix(pair: Pair) -> list[str]:
        out = []
        while (link := parent[pair]) is not None:
            pair, i = link
            out.append(labels[i])
        return out[::-1]

    def result(found: Counterexample | None) -> LockstepResult:
        states = (len({p[0] for p in parent}), len({p[1] for p in parent}))
        return LockstepResult((a.sizes, b.sizes), master_scope, require_progress, len(parent), states,
                              dead_ends, found)

    while queue:
        pair = queue.popleft()
        at_goal = (pair[0] == a.goal, pair[1] == b.goal)
        if at_goal[0] != at_goal[1]:
            return result(Counterexample(tuple(prefix(pair)), (a, b)[at_goal[1]].sizes))
        if at_goal[0]:
            continue  # a program stops at the goal
        for i in range(len(labels)):
            na, nb = a.step(pair[0], i), b.step(pair[1], i)
            if na is None and nb is None:
                continue
            if na is None or nb is None:
                side, nxt = (a, na) if nb is None else (b, nb)
                path = side.path_to_goal(nxt)
                if path is None:
                    dead_ends += 1
                    continue
                return result(Counterexample((*prefix(pair), labels[i], *(labels[j] for j in path)), side.sizes))
            if (na, nb) not in parent:
                parent[na, nb] = (pair, i)
                queue.append((na, nb))
                if max_pairs is not None and len(parent) > max_pairs:
                    raise P2Error(f"more than {max_pairs} reachable pairs of states: no decision")
    return result(None)
