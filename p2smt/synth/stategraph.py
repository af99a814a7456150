"""The explicit search as a state graph: every state reached in fewer than ``max_len`` steps and, for every
(state, candidate), the successor or the group and rule that fail, written as the certificate that
``p2smt.certcheck`` checks (format in docs/certified.md). Untrusted: the checker and Z3 decide."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from p2smt.errors import InternalError
from p2smt.model.problem import SynthesisProblem
from p2smt.semantics.pieces import State, _getter, goal_states, initial_states, outcome
from p2smt.synth.search import FirstStepReport, search_programs

FORMAT = "p2smt-state-graph"
VERSION = 1
SHARDED_VERSION = 2
"""Version 2 adds ``sharded_goal`` (a sharded goal of docs/semantics.md §6); the AllReduce goal's certificates
stay version 1, unchanged."""

@dataclass(frozen=True)
class StateGraph:
    """States as tuples of device-state tokens (state 0 the initial one), each expanded state's edges
    (an int: the successor's id; a tuple ``(group, rule, witness)``: the failure), the device states'
    matrices (bit ``r·k + c``: chunk ``r`` holds contribution ``c``), and the goal's id (None: unreached)."""

    problem: SynthesisProblem
    max_len: int
    states: tuple[tuple[int, ...], ...]
    edges: tuple[tuple[Any, ...] | None, ...]
    matrices: tuple[int, ...]
    goal: int | None

    @property
    def steps(self) -> int:
        return sum(len(e) for e in self.edges if e is not None)

    def programs(self, on_first_step: FirstStepReport | None = None) -> list[tuple[int, ...]]:
        """The goal paths of length ≤ ``max_len`` (canonical order), read off the graph by P²'s search."""
        edges, goal = self.edges, self.goal

        def step(sid: int, i: int) -> int | None:
            e = edges[sid][i]
            return e if e.__class__ is int else None

        return search_programs(0, self.max_len, len(self.problem.candidates), step, lambda s: s == goal,
                               lambda s: s, on_first_step)

    def document(self, programs: list[tuple[int, ...]], lists: bool = True) -> dict[str, Any]:
        """The certificate (JSON-ready): the problem, the graph, and the programs it claims. ``lists=False``
        keeps the graph's own tuples (the same JSON; handed in-process to the checker, which takes both)."""
        prob = self.problem
        sh = prob.sharding
        return {
            "format": FORMAT, "version": VERSION if sh is None else SHARDED_VERSION, "devices": prob.num_devices,
            "max_len": self.max_len, "require_progress": prob.require_progress,
            "goal_groups": [list(g) for g in prob.goal_groups],
            **({} if sh is None else {"sharded_goal": {"kind": sh.kind.value, "rank": list(sh.rank),
                                                       "shards": sh.shards}}),
            "candidates": [[c.collective.value, [list(g) for g in c.groups]] for c in prob.candidates],
            "device_states": [format(m, "x") for m in self.matrices],
            "states": [list(s) for s in self.states] if lists else self.states,
            "goal": self.goal,
            "edges": [None if e is None else [x if x.__class__ is int else list(x) for x in e] for e in self.edges]
            if lists else self.edges,
            "programs": [list(p) for p in programs],
        }


def matrix(state: State, k: int) -> int:
    """A compressed device state as §4's k×k Boolean matrix, bit ``r·k + c``."""
    bits = 0
    for rows, contrib in state:
        while rows:
            low = rows & -rows
            bits |= contrib << ((low.bit_length() - 1) * k)
            rows ^= low
    return bits


def _rows(state: State) -> int:
    out = 0
    for r, _ in state:
        out |= r
    return out


def witness(rule: str, members: list[State], mats: list[int]) -> int:
    """The member on which ``rule`` fails (the fact the certificate names), found on the matrices."""
    kind = rule.rpartition(".")[2]
    rows = [_rows(s) for s in members]
    union = rows_union = 0
    for a in range(len(members)):
        if a and ((kind == "same_chunks" and rows[a] != rows[0])
                  or (kind == "disjoint" and mats[a] & union)
                  or (kind == "disjoint_chunks" and rows[a] & rows_union)
                  or (kind == "equal_sizes" and rows[a].bit_count() != rows[0].bit_count())
                  or (kind == "below_root" and mats[a] & ~mats[0])):
            return a
        union |= mats[a]
        rows_union |= rows[a]
    if kind in ("divisible", "information_increase", "progress"):
        return 0
    raise InternalError(f"state graph: the compressed interpreter says {rule} but no member breaks it")


def explore(prob: SynthesisProblem, max_len: int) -> StateGraph:
    """Breadth first from the initial state: every state first reached at depth < ``max_len`` is expanded
    with every candidate (the goal too, so that the steps out of it are certified as failures)."""
    builder = GraphBuilder(prob)
    frontier = [0]
    for _ in range(max_len):
        known = len(builder.states)
        for sid in frontier:
            builder.expand(sid)
        frontier = list(range(known, len(builder.states)))
    return builder.graph(max_len)


class GraphBuilder:
    """The state graph grown on demand: ``expand(sid)`` writes a state's row (every candidate's successor,
    or the group and rule that fail), numbering new states as they are met. ``explore`` expands breadth
    first; ``best`` expands only the states its cost bound needs (the checker then closes a partial graph)."""

    def __init__(self, prob: SynthesisProblem):
        self.prob = prob
        k = prob.num_devices
        self._tokens: dict[State, int] = {}
        self.devs: list[State] = []
        self.mats: list[int] = []
        initial = tuple(self._token(s) for s in initial_states(prob))
        self.goal_key = tuple(self._token(s) for s in goal_states(prob))
        self.plans = []
        for c in prob.candidates:
            flat = [d for g in c.groups for d in g]
            where = list(range(k))  # a device's new token: its own (devices in no group), else its group's output
            for p, d in enumerate(flat):
                where[d] = k + p
            self.plans.append((c.collective, c.groups, [_getter(g) for g in c.groups], _getter(tuple(where))))
        self._memo: dict[tuple[Any, tuple[int, ...]], tuple[int, ...] | tuple[str, int]] = {}
        self.ids: dict[tuple[int, ...], int] = {initial: 0}
        self.states: list[tuple[int, ...]] = [initial]
        self.edges: list[tuple[Any, ...] | None] = [None]

    def _token(self, s: State) -> int:
        t = self._tokens.get(s)
        if t is None:
            t = self._tokens[s] = len(self.devs)
            self.devs.append(s)
            self.mats.append(matrix(s, self.prob.num_devices))
        return t

    def expand(self, sid: int) -> tuple[Any, ...]:
        """State ``sid``'s row (computed once)."""
        done = self.edges[sid]
        if done is not None:
            return done
        state, memo, devs, progress = self.states[sid], self._memo, self.devs, self.prob.require_progress
        row: list[Any] = []
        for coll, groups, members_of, gather in self.plans:
            flat: list[int] = []
            failed = None
            for gi, (g, get) in enumerate(zip(groups, members_of)):
                members = get(state)
                out = memo.get((coll, members))
                if out is None:
                    before = [devs[t] for t in members]
                    res = outcome(coll, g, before, progress)
                    if res.__class__ is str:
                        out = (res, witness(res, before, [self.mats[t] for t in members]))
                    else:
                        out = tuple(map(self._token, res))
                    memo[coll, members] = out
                if out and out[0].__class__ is str:
                    failed = (gi, *out)
                    break
                flat += out
            if failed is not None:
                row.append(failed)
                continue
            new = gather([*state, *flat])
            tid = self.ids.get(new)
            if tid is None:
                tid = self.ids[new] = len(self.states)
                self.states.append(new)
                self.edges.append(None)
            row.append(tid)
        self.edges[sid] = done = tuple(row)
        return done

    def graph(self, max_len: int) -> StateGraph:
        return StateGraph(self.prob, max_len, tuple(self.states), tuple(self.edges), tuple(self.mats),
                          self.ids.get(self.goal_key))
