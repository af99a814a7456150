"""Two sizes of one hierarchy run in lockstep over every program of every length: a finite decision.

For one reduction group over a kind-(d) hierarchy, the candidate instructions at two size vectors with
the same trivial levels are the same DSL labels in the same order (docs/symmetry.md, Theorem 1). This
module explores the graph of *pairs* of states (state at sizes ``a``, state at sizes ``b``) reached from
the pair of initial states by labels valid at both sizes, until no new pair appears (both state spaces
are finite, so it ends); a pair is expanded only if neither state is the goal (a program stops at the
goal). Each decision *checks* one or both sides: a checked side's programs must all be valid at the
other side.

* ``lockstep(a, b)`` checks both sides: are the program sets equal?
* ``included(a, b)`` checks ``a`` only: is every program valid at ``a`` valid at ``b``?

The counterexample searches, for a checked side X and the other side Y:

* at a pair where exactly one state is the goal, search X's states reachable from X's state for the
  goal (the empty path if X's state is the goal);
* for a label valid at X and not at Y, search X's states reachable from X's successor for the goal.

If the goal is reachable, prefix + (label) + path is a program valid at X and invalid at Y (returned):
the prefix is valid at both and passes through no goal; at X the path (a shortest one) ends at the goal
and only there; at Y the label fails, or Y's state is not the goal at the end, or Y passed through its
goal before the end. If not, no program valid at X goes that way (a dead end). A label valid at an
unchecked side only is skipped: such programs are not asked about.

Correctness (docs/symmetry.md, Theorems 3 and 3'): if the exploration ends without a counterexample,
every program P = i₁ … i_L valid at a checked side X is valid at the other side Y. By induction on
t < L, the pair of states after i₁ … i_t is explored and expanded: true for t = 0; X's state is not the
goal (P reaches it at its last step only), so Y's is not either (else the goal search from X's state
would find the rest of P), and the pair is expanded; if i_{t+1} were invalid at Y, the search from
X's successor would find the rest of P; so i_{t+1} is valid at both and the next pair is explored. At
t = L X's state is the goal, so Y's is too (else the goal search returns the empty path). So every
step of P is valid at Y, Y reaches the goal at step L and at no earlier step. Both state spaces are
finite, so the exploration ends: a decision. (A state marked "cannot reach the goal" was reached
from a start whose complete search failed, so it cannot reach it either.)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from p2smt.errors import P2Error
from p2smt.model.dsl import problem
from p2smt.model.hierarchy import ROOT, MasterScope, SynthesisHierarchy
from p2smt.model.problem import SynthesisProblem
from p2smt.semantics.bitmatrix import Device, Machine, State
from p2smt.semantics.pieces import Stepper
from p2smt.synth.search import FirstStepReport
from p2smt.synth.symmetric import generic_hierarchy, one_group_hierarchy, same_candidates, why_not_generic

Pair = tuple[State, State]


class Undecided(P2Error):
    """The exploration reached its bound on pairs of states before a decision."""


@dataclass(frozen=True)
class Counterexample:
    """A program (labels) valid at ``valid_at`` and invalid at the other size vector."""

    labels: tuple[str, ...]
    valid_at: tuple[int, ...]


@dataclass(frozen=True)
class LockstepResult:
    """The outcome of one exhaustive lockstep exploration.

    ``one_way`` False (``lockstep``): ``counterexample`` None means equal program sets. ``one_way`` True
    (``included``): it means every program valid at ``sizes[0]`` is valid at ``sizes[1]``."""

    sizes: tuple[tuple[int, ...], tuple[int, ...]]
    master_scope: MasterScope
    require_progress: bool
    one_way: bool
    pairs: int  # reachable pairs of states explored
    states: tuple[int, int]  # distinct states of each size among them
    dead_ends: int  # one-sided valid steps (or goal mismatches) after which the goal is unreachable
    counterexample: Counterexample | None


class _Side:
    """One size: its problem, its interpreter's step function, memoized outcomes and goal reachability.

    The bitmatrix interpreter by default; the compressed one (``pieces``: one token per device, no k²
    matrix) for a real size with many devices. Both decide the same Hoare rules exactly."""

    def __init__(self, prob: SynthesisProblem, sizes: Sequence[int], interpreter: str = "bitmatrix") -> None:
        prob.refuse_sharded("the generic-size inclusion proof")
        self.sizes = tuple(sizes)
        self.prob = prob
        if interpreter == "pieces":
            stepper = Stepper(prob)
            self.initial, self.goal, self._step = stepper.initial, stepper.goal, stepper.step
        else:
            machine = Machine(prob.num_devices)
            self.machine = machine
            self.initial, self.goal, self._step = machine.initial(), machine.goal(prob.goal_groups), self._matrix_step
        self._outcomes: dict[tuple, list[Device] | None] = {}
        self._dead: set[State] = set()

    @classmethod
    def of_sizes(cls, sizes: Sequence[int], scope: MasterScope, progress: bool) -> _Side:
        """One reduction group over levels of these sizes (bitmatrix interpreter)."""
        return cls(problem(one_group_hierarchy([(f"l{j}", s) for j, s in enumerate(sizes)], scope), progress),
                   sizes)

    def step(self, state: State, i: int) -> State | None:
        """The state after candidate ``i`` (None: a precondition or, if required, progress fails)."""
        return self._step(state, i)

    def _matrix_step(self, state: State, i: int) -> State | None:
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


class _Exploration:
    """The breadth-first exploration of pairs of states; ``checked``: the sides (0 = a, 1 = b) whose every
    program must be valid at the other side."""

    def __init__(self, a: _Side, b: _Side, checked: tuple[int, ...], max_pairs: int | None) -> None:
        self.sides = (a, b)
        self.checked = checked
        self.max_pairs = max_pairs
        self.labels = [c.label for c in a.prob.candidates]
        if self.labels != [c.label for c in b.prob.candidates]:
            raise P2Error("the two sizes have different candidate instructions")
        start = (a.initial, b.initial)
        self.parent: dict[Pair, tuple[Pair, int] | None] = {start: None}
        self.queue = deque([start])
        self.dead_ends = 0

    def prefix(self, pair: Pair) -> list[str]:
        """The labels that lead from the initial pair to ``pair`` (valid at both sizes)."""
        out = []
        while (link := self.parent[pair]) is not None:
            pair, i = link
            out.append(self.labels[i])
        return out[::-1]

    def search(self, side: int, start: State, head: list[str]) -> Counterexample | None:
        """``head`` + a path from ``start`` to the goal at ``side`` (a counterexample), or None (a dead end)."""
        path = self.sides[side].path_to_goal(start)
        if path is None:
            self.dead_ends += 1
            return None
        return Counterexample((*head, *(self.labels[j] for j in path)), self.sides[side].sizes)

    def at_goals_differ(self, pair: Pair) -> Counterexample | None:
        """Exactly one state of ``pair`` is the goal: a checked side's program through it, if any (the side
        at the goal first: its empty path is the shortest)."""
        at_goal = [pair[s] == self.sides[s].goal for s in (0, 1)]
        for side in sorted(self.checked, key=lambda s: not at_goal[s]):
            if (found := self.search(side, pair[side], self.prefix(pair))) is not None:
                return found
        return None

    def expand(self, pair: Pair) -> Counterexample | None:
        """Queue the new pairs after ``pair``; search after every label valid at one checked side only."""
        for i, label in enumerate(self.labels):
            nxt = (self.sides[0].step(pair[0], i), self.sides[1].step(pair[1], i))
            if nxt[0] is None and nxt[1] is None:
                continue
            if nxt[0] is None or nxt[1] is None:
                side = int(nxt[0] is None)
                if side in self.checked and (found := self.search(
                        side, nxt[side], [*self.prefix(pair), label])) is not None:
                    return found
                continue
            if nxt not in self.parent:
                self.parent[nxt] = (pair, i)
                self.queue.append(nxt)
                if self.max_pairs is not None and len(self.parent) > self.max_pairs:
                    raise Undecided(f"more than {self.max_pairs} reachable pairs of states: no decision")
        return None

    def run(self) -> Counterexample | None:
        """Explore until a counterexample or until no new pair appears."""
        while self.queue:
            pair = self.queue.popleft()
            at_goal = (pair[0] == self.sides[0].goal, pair[1] == self.sides[1].goal)
            if at_goal[0] != at_goal[1]:
                found = self.at_goals_differ(pair)
            elif at_goal[0]:
                continue  # a program stops at the goal
            else:
                found = self.expand(pair)
            if found is not None:
                return found
        return None


def _decide(sizes_a: Sequence[int], sizes_b: Sequence[int], master_scope: MasterScope, require_progress: bool,
            max_pairs: int | None, one_way: bool) -> LockstepResult:
    """The exploration of ``sizes_a`` against ``sizes_b``, checking side a only (``one_way``) or both."""
    if [s == 1 for s in sizes_a] != [s == 1 for s in sizes_b]:
        raise P2Error("the two size vectors must have the same trivial levels")
    a = _Side.of_sizes(sizes_a, master_scope, require_progress)
    b = _Side.of_sizes(sizes_b, master_scope, require_progress)
    return _explored(a, b, master_scope, require_progress, max_pairs, one_way)


def _explored(a: _Side, b: _Side, master_scope: MasterScope, require_progress: bool, max_pairs: int | None,
              one_way: bool) -> LockstepResult:
    explore = _Exploration(a, b, (0,) if one_way else (0, 1), max_pairs)
    found = explore.run()
    states = (len({p[0] for p in explore.parent}), len({p[1] for p in explore.parent}))
    return LockstepResult((a.sizes, b.sizes), master_scope, require_progress, one_way, len(explore.parent),
                          states, explore.dead_ends, found)


def lockstep(sizes_a: Sequence[int], sizes_b: Sequence[int], master_scope: MasterScope = "per-ancestor",
             require_progress: bool = True, max_pairs: int | None = None) -> LockstepResult:
    """Decide whether one reduction group has the same programs (every length) at ``sizes_a`` and ``sizes_b``.

    ``max_pairs`` bounds the exploration (P2Error when exceeded: no decision)."""
    return _decide(sizes_a, sizes_b, master_scope, require_progress, max_pairs, one_way=False)


def included(sizes_a: Sequence[int], sizes_b: Sequence[int], master_scope: MasterScope = "per-ancestor",
             require_progress: bool = True, max_pairs: int | None = None) -> LockstepResult:
    """Decide whether every program of one reduction group valid at ``sizes_a`` (every length) is valid at
    ``sizes_b``; a counterexample is valid at ``sizes_a`` and invalid at ``sizes_b``.

    ``max_pairs`` bounds the exploration (P2Error when exceeded: no decision)."""
    return _decide(sizes_a, sizes_b, master_scope, require_progress, max_pairs, one_way=True)


def real_included(real: SynthesisProblem, real_sizes: Sequence[int], generic: SynthesisProblem,
                  generic_sizes: Sequence[int], master_scope: MasterScope, max_pairs: int | None = None
                  ) -> LockstepResult:
    """``included`` with the real size given as its problem and run on the compressed interpreter: is every
    program valid at ``real`` (every length) valid at ``generic``? The two problems must be one reduction
    group over the same levels (same candidate labels). Its cost is the pairs explored times the devices,
    so it reaches sizes where the bitmatrix's k² bits per device do not."""
    if real.require_progress != generic.require_progress:
        raise P2Error("the two problems differ in the progress rule")
    a = _Side(real, real_sizes, "pieces")
    b = _Side(generic, generic_sizes)
    return _explored(a, b, master_scope, real.require_progress, max_pairs, one_way=True)


@dataclass(frozen=True)
class InclusionProof:
    """``real_included`` of a real problem against its generic instance, for an engine: ``proved`` (every
    program valid at the real size, of any length, is valid at the generic one), the ``pairs`` of states
    explored (None: the bound was reached, no decision) and ``missed`` (the labels of a program valid at
    the real size and invalid at the generic one) when it found one."""

    proved: bool
    bound: int
    pairs: int | None = None
    missed: tuple[str, ...] | None = None

    def missed_within(self, max_len: int) -> bool:
        """Whether the generic instance provably misses a program of at most ``max_len`` steps."""
        return self.missed is not None and len(self.missed) <= max_len

    def searched(self, prob: SynthesisProblem, max_len: int, instance: str,
                 on_first_step: FirstStepReport | None = None) -> tuple[list[tuple[int, ...]], str]:
        """The exact search at the real size that replaces an ``instance`` (a name, for ``rests_on``) which
        misses a program of at most ``max_len`` steps: its programs and what they rest on."""
        from p2smt.synth.pieces import enumerate_programs

        why = f"{instance} misses {'; '.join(self.missed or ())!r}, valid at the real size"
        return enumerate_programs(prob, max_len, on_first_step), f"search at the real size ({why})"

    def stats(self) -> dict[str, Any]:
        """The engine statistics: ``completeness``, ``inclusion_pairs`` and, if any, ``generic_misses``."""
        out: dict[str, Any] = {"completeness": "proved" if self.proved else "conjectured",
                               "inclusion_pairs": self.pairs if self.pairs is not None
                               else f"more than {self.bound}: no decision"}
        if self.missed is not None:
            out["generic_misses"] = "; ".join(self.missed)
        return out


def inclusion_proof(prob: SynthesisProblem, small: SynthesisProblem, h: SynthesisHierarchy, size: int,
                    bound: int) -> InclusionProof:
    """``real_included`` of ``prob`` (built from ``h``) against its generic instance ``small`` (every
    non-trivial level of size ``size``), at most ``bound`` pairs of states."""
    sizes = tuple(s for name, s in h.levels if name != ROOT)
    generic_sizes = tuple(size if s > 1 else 1 for s in sizes)
    try:
        found = real_included(prob, sizes, small, generic_sizes, h.master_scope, bound)
    except Undecided:
        return InclusionProof(False, bound)
    cex = found.counterexample
    return InclusionProof(cex is None, bound, found.pairs, None if cex is None else cex.labels)


def generic_completeness(prob: SynthesisProblem, h: SynthesisHierarchy | None, size: int, bound: int
                         ) -> InclusionProof | None:
    """``inclusion_proof`` against the size-``size`` instance of ``h``, or None when ``prob`` has no generic
    instance (the symmetric engine's conditions: one reduction group over a kind-(d) hierarchy, and the
    instance has its candidates)."""
    if why_not_generic(h, prob.num_devices) is not None:
        return None
    small = problem(generic_hierarchy(h, size), prob.require_progress)
    if not same_candidates(small, prob):
        return None
    return inclusion_proof(prob, small, h, size, bound)
