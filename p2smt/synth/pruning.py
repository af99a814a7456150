"""Named, optional prunings of a complete set of synthesized programs (docs/semantics.md §5: 93 versus P²'s 47).

The engines return the complete set of valid programs under a literal reading of docs/semantics.md §4. P² reports
47 programs for every two-level reduction hierarchy where that reading gives 93, and 3 for one level
(both readings agree). Each pruning here is a pure predicate over (problem, program) that keeps or drops
a program; ``"none"`` (the default) keeps the complete set. Names combine with ``+`` (keep a program
only if every named pruning keeps it), e.g. ``"p2-47+commute-canonical"``.

``p2-47`` — Master communicators only for AllReduce. It drops every program with a step whose
communicators leave some device out (exactly the steps only a ``Master(e')`` form can express, e.g.
``(node, Master(root), Reduce)``) unless that step is an AllReduce. P² introduces Master for one job,
the AllReduce among node masters in Reduce–AllReduce–Broadcast, and this restriction reproduces its
counts: 93 → 47 for ``[root 1, node N, gpu G]`` at every N, G in 2..8, 3 → 3 for one level. The 46
dropped programs are the tree-shaped ones that Reduce, ReduceScatter, AllGather or Broadcast among
masters, e.g. ``(node, InsideGroup, Reduce); (node, Master(root), Reduce); (node, Master(root),
Broadcast); (node, InsideGroup, Broadcast)``: valid, but outside P²'s use of Master. P² does not state
the rule; it is the only restriction of forms × collectives that gives 47, and under the "global"
Master reading it would give 55, so it also supports the per-ancestor reading. See docs/pruning.md.

The other prunings are well-defined redundancy filters. No combination of them gives 47 (the closest,
no-redundant-step+commute-canonical+strict-broadcast, keeps 46); docs/pruning.md has every count.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from p2smt.errors import P2Error
from p2smt.model.collectives import Collective
from p2smt.model.problem import SynthesisProblem
from p2smt.semantics.dense import Violation, apply_step, execute, goal_state, initial_state

Program = tuple[int, ...]
KeepFn = Callable[[SynthesisProblem, Program], bool]
DEFAULT_PRUNING = "none"


@dataclass(frozen=True)
class Pruning:
    """A named predicate: ``keep(problem, program)`` is True when the program stays in the set."""

    name: str
    description: str
    keep: KeepFn


def leaves_devices_out(problem: SynthesisProblem, index: int) -> bool:
    """True when candidate ``index``'s communicators do not cover every device (a Master-only step)."""
    covered = {d for g in problem.candidates[index].groups for d in g}
    return len(covered) < problem.num_devices


def _run(problem: SynthesisProblem, program: Program):
    steps = [(problem.candidates[i].collective, problem.candidates[i].groups) for i in program]
    return execute(problem.num_devices, steps, problem.goal_groups, problem.require_progress)


def _is_valid(problem: SynthesisProblem, program: Program) -> bool:
    """Validity by the interpreter's step rule, without the diagnostics ``execute`` collects."""
    state = initial_state(problem.num_devices)
    for t, idx in enumerate(program):
        cand = problem.candidates[idx]
        state = apply_step(state, t, cand.collective, cand.groups, problem.require_progress)
        if isinstance(state, Violation):
            return False
    return bool(np.array_equal(state, goal_state(problem.num_devices, problem.goal_groups)))


def _states(problem: SynthesisProblem, program: Program) -> list[np.ndarray]:
    """The states of a valid program; prunings are defined on valid programs only."""
    run = _run(problem, program)
    if not run.valid:
        raise P2Error(f"cannot prune an invalid program: {problem.label(program)}")
    return run.states


def _keep_all(problem: SynthesisProblem, program: Program) -> bool:
    return True


def _master_allreduce_only(problem: SynthesisProblem, program: Program) -> bool:
    return all(
        problem.candidates[i].collective is Collective.ALL_REDUCE or not leaves_devices_out(problem, i)
        for i in program
    )


def _no_redundant_step(problem: SynthesisProblem, program: Program) -> bool:
    return not any(_is_valid(problem, program[:t] + program[t + 1 :]) for t in range(len(program)))


def _swap_reaches(problem: SynthesisProblem, state: np.ndarray, first: int, second: int, target) -> bool:
    """Whether running ``first`` then ``second`` from ``state`` is valid and ends in ``target``."""
    for t, idx in enumerate((first, second)):
        cand = problem.candidates[idx]
        state = apply_step(state, t, cand.collective, cand.groups, problem.require_progress)
        if isinstance(state, Violation):
            return False
    return bool(np.array_equal(state, target))


def _commute_canonical(problem: SynthesisProblem, program: Program) -> bool:
    states = _states(problem, program)
    return not any(
        program[t + 1] < program[t]
        and _swap_reaches(problem, states[t], program[t + 1], program[t], states[t + 2])
        for t in range(len(program) - 1)
    )


def _strict_broadcast(problem: SynthesisProblem, program: Program) -> bool:
    states = _states(problem, program)
    for t, idx in enumerate(program):
        cand = problem.candidates[idx]
        if cand.collective is not Collective.BROADCAST:
            continue
        for g in cand.groups:
            root = states[t][g[0]]
            if any(np.array_equal(states[t][d], root) for d in g[1:]):
                return False
    return True


_SPLIT_ALL_REDUCE = {
    (Collective.REDUCE, Collective.BROADCAST),
    (Collective.REDUCE_SCATTER, Collective.ALL_GATHER),
}


def _no_split_allreduce(problem: SynthesisProblem, program: Program) -> bool:
    if len(program) <= 2:
        return True
    for a, b in pairwise(program):
        ca, cb = problem.candidates[a], problem.candidates[b]
        if ca.groups == cb.groups and (ca.collective, cb.collective) in _SPLIT_ALL_REDUCE:
            return False
    return True


PRUNINGS: dict[str, Pruning] = {
    p.name: p
    for p in (
        Pruning("none", "keep the complete set of valid programs (default)", _keep_all),
        Pruning(
            "p2-47",
            "steps over Master communicators (some devices idle) must be AllReduce; gives P²'s 3 and 47",
            _master_allreduce_only,
        ),
        Pruning(
            "no-redundant-step",
            "drop a program if deleting one of its steps still leaves a valid program",
            _no_redundant_step,
        ),
        Pruning(
            "commute-canonical",
            "of two adjacent steps that commute (same state either order) keep the lower-index-first order",
            _commute_canonical,
        ),
        Pruning(
            "strict-broadcast",
            "every Broadcast must change every non-root member (no member already equal to the root)",
            _strict_broadcast,
        ),
        Pruning(
            "no-split-allreduce",
            "no adjacent Reduce;Broadcast or ReduceScatter;AllGather over the same groups, "
            "unless that pair is the whole program",
            _no_split_allreduce,
        ),
    )
}


def pruning_names() -> tuple[str, ...]:
    """The registered pruning names, default first."""
    return tuple(PRUNINGS)


def get_pruning(name: str) -> Pruning:
    """The pruning called ``name``; ``a+b`` keeps a program only if both ``a`` and ``b`` keep it."""
    parts = [p.strip() for p in name.split("+")]
    unknown = [p for p in parts if p not in PRUNINGS]
    if unknown:
        raise P2Error(f"unknown pruning {unknown[0]!r}; known: {', '.join(PRUNINGS)}")
    if len(parts) == 1:
        return PRUNINGS[parts[0]]
    chosen = tuple(PRUNINGS[p] for p in parts)

    def keep(problem: SynthesisProblem, program: Program) -> bool:
        return all(p.keep(problem, program) for p in chosen)

    return Pruning("+".join(parts), "; ".join(p.description for p in chosen), keep)


def apply_pruning(name: str, problem: SynthesisProblem, programs: Sequence[Program]) -> list[Program]:
    """The programs that pruning ``name`` keeps, in their given order (programs must be valid)."""
    pruning = get_pruning(name)
    if name != "none":
        problem.refuse_sharded(f"--prune {name} (its rules are stated on the AllReduce goal)")
    n = len(problem.candidates)
    for program in programs:
        if any(not 0 <= i < n for i in program):
            raise P2Error(f"program {tuple(program)} names a candidate outside 0..{n - 1}")
    return [tuple(p) for p in programs if pruning.keep(problem, tuple(p))]
