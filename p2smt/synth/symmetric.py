"""The ``symmetric`` engine: P²'s search on a generic small instance, whose cost does not grow with sizes.

The groups of every DSL instruction depend on a level's size only through "is it 1": a group varies a
fixed set of levels and Master fixes the same levels at index 0 at every size ≥ 2. The engine
therefore searches the hierarchy with every non-trivial level set to ``size`` (2 by default) on the
``bitmatrix`` interpreter (``problem.search_programs``: prune on failing preconditions, memoize
suffixes) and maps the programs back by DSL label; it costs the same at 16 and at 65,536 devices.
``cross_check`` searches a second generic size too (3) and fails loudly if the sets differ.
What the result rests on is in ``stats["rests_on"]``: the size-independence of the program set
(docs/symmetry.md: proved for lengths ≤ 2, machine-checked by exhaustive comparison beyond) plus
the driver's real-size re-check where the interpreters still run. Problems that are not one
reduction group over a kind-(d) hierarchy fall back to the same search at the real size.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from p2smt.errors import InternalError
from p2smt.model.collectives import AG, AR, BC
from p2smt.model.dsl import problem
from p2smt.model.hierarchy import SynthesisHierarchy
from p2smt.model.problem import SynthesisProblem, canonical_order
from p2smt.semantics.bitmatrix import Machine, State

GENERIC_SIZE = 2
CROSS_CHECK_SIZE = 3


def search(prob: SynthesisProblem, max_len: int) -> list[tuple[int, ...]]:
    """Every valid program of ``prob`` up to ``max_len`` (canonical order) on the bitmatrix state.

    P²'s search (as ``problem.search_programs``: prune a step whose precondition fails, stop at the
    goal, memoize the suffixes of a state and remaining length) with one lookahead: the last step of a program is only tried with candidates
    that can end in the goal (an AllReduce, AllGather or Broadcast whose groups cover every device
    not yet in its goal state), which skips most of the work at the deepest level.
    """
    machine = Machine(prob.num_devices)
    cands = prob.candidates
    goal = machine.goal(prob.goal_groups)
    progress = prob.require_progress
    covers = [sum(1 << d for g in c.groups for d in g) for c in cands]
    finishing = [c.collective in (AR, AG, BC) for c in cands]
    unfinished: dict[State, int] = {}

    def step(state: State, i: int) -> State | None:
        return machine.step(state, cands[i].collective, cands[i].groups, progress)

    def last_step(state: State, i: int) -> State | None:
        todo = unfinished.get(state)
        if todo is None:
            todo = unfinished[state] = sum(1 << d for d, (s, g) in enumerate(zip(state, goal)) if s != g)
        if not finishing[i] or todo & ~covers[i]:
            return None
        return step(state, i)

    memo: dict[tuple[State, int], list[tuple[int, ...]]] = {}

    def suffixes(state: State, remaining: int) -> list[tuple[int, ...]]:
        found = memo.get((state, remaining))
        if found is not None:
            return found
        out: list[tuple[int, ...]] = []
        advance = step if remaining > 1 else last_step
        for i in range(len(cands)):
            nxt = advance(state, i)
            if nxt is None:
                continue
            if nxt == goal:
                out.append((i,))
            elif remaining > 1:
                out.extend((i, *rest) for rest in suffixes(nxt, remaining - 1))
        memo[state, remaining] = out
        return out

    return canonical_order(suffixes(machine.initial(), max_len)) if max_len >= 1 else []


def generic_hierarchy(h: SynthesisHierarchy, size: int) -> SynthesisHierarchy:
    """``h`` with every level of size > 1 set to ``size`` (one replica, one goal group)."""
    levels = tuple((name, s if s == 1 else size) for name, s in h.levels)
    k = 1
    for _, s in levels:
        k *= s
    return replace(h, levels=levels, replicas=(tuple(range(k)),), goal_groups=(tuple(range(k)),))


def _why_not_generic(prob: SynthesisProblem) -> str | None:
    h = prob.hierarchy
    if not isinstance(h, SynthesisHierarchy):
        return "the problem has no synthesis hierarchy"
    if h.kind != "d" or h.goal_groups != (tuple(range(prob.num_devices)),):
        return "the goal is not one reduction group over a kind-(d) hierarchy"
    return None


def _generic_programs(prob: SynthesisProblem, size: int, max_len: int) -> list[tuple[int, ...]] | None:
    """The programs of the generic instance, as candidate indices of ``prob`` (None: labels differ)."""
    small = problem(generic_hierarchy(prob.hierarchy, size), prob.require_progress)
    real = [(c.label, c.collective) for c in prob.candidates]
    if [(c.label, c.collective) for c in small.candidates] != real:
        return None
    return search(small, max_len)  # same candidate order, so the indices carry over


def synthesize(
    prob: SynthesisProblem, max_len: int, size: int = GENERIC_SIZE, cross_check: int | None = None
) -> tuple[list[tuple[int, ...]], dict[str, Any]]:
    """Programs (canonical order) and stats (``rests_on`` says what the result rests on)."""
    why = _why_not_generic(prob)
    programs = None if why else _generic_programs(prob, size, max_len)
    if programs is None:
        why = why or "the generic instance has other candidate instructions"
        return search(prob, max_len), {"rests_on": f"search at the real size ({why})", "generic_size": None}
    stats: dict[str, Any] = {"generic_size": size, "generic_devices": _devices(prob.hierarchy, size)}
    checks = [size]
    if cross_check and cross_check != size and _devices(prob.hierarchy, cross_check) <= prob.num_devices:
        other = _generic_programs(prob, cross_check, max_len)
        if other != programs:
            raise InternalError(
                f"the generic instances of sizes {size} and {cross_check} have different program sets "
                f"({len(programs)} vs {len(other or [])} programs): the size-independence does not hold here"
            )
        checks.append(cross_check)
    exact = all(s in (1, size) for s in prob.hierarchy.sizes)
    stats["rests_on"] = (
        "exact: the generic instance is the problem itself" if exact else
        "the size-independence of the program set (docs/symmetry.md), with equal program sets at generic "
        f"sizes {' and '.join(map(str, checks))}; the driver re-checks every program at the real size "
        "where its interpreters run"
    )
    return canonical_order(programs), stats


def _devices(h: SynthesisHierarchy, size: int) -> int:
    k = 1
    for s in h.sizes:
        k *= 1 if s == 1 else size
    return k

