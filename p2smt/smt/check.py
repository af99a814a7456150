"""Exact checks of fixed programs: one Z3 query covers every chunk and payload through a symbolic witness.

For a fixed program every step's choice is a constant, so per-device chunk counts fold to Python
integers and each track formula contains only the chosen steps. A *node* holds the state after a
prefix (nodes are cached, so programs that share a prefix share its formulas). A ∀-precondition or
the goal fails for the program iff some witness (chunk ``row``, payload) violates it: that is one
satisfiability query. Existential rules (Broadcast adds information) are satisfiable queries too.
The first failing step is found by checking steps in order, as the Hoare semantics stops there.
Rules are only asked of every row at once, so their consequences on the counts of non-empty chunks
below the row (which the synthesizer's single-row tracks need) are left out (``forall_rows``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import z3

from p2smt.model.collectives import Collective
from p2smt.model.problem import SynthesisProblem
from p2smt.smt import terms as T
from p2smt.smt.budget import ResourceBudget
from p2smt.smt.counts import after as counts_after
from p2smt.smt.structure import Structure
from p2smt.smt.terms import Term
from p2smt.smt.unroll import BC, Arith, Payload, Semantics, TrackState

PayloadFactory = Callable[["PlanChecker"], tuple[Payload, list[Any], list[Term]]]


@dataclass(frozen=True)
class Failure:
    """Why a program is invalid: ``step`` (0-based; None: all steps apply but the goal fails),
    the group (index within the step's candidate), the rule, and a witness assignment if any."""

    step: int | None
    group: int | None
    rule: str
    witness: dict[str, int] = field(default_factory=dict)
    early_goal: bool = False


class Unknown(Exception):
    """A solver call returned unknown (timeout or resource limit)."""


class Node:
    """The state after ``prefix``; ``rules``/``progress``/``increase`` describe its last step."""

    __slots__ = (
        "_goal",
        "_viol",
        "checked",
        "counts",
        "increase",
        "per_chunk",
        "prefix",
        "progress",
        "rules",
        "signature",
        "state",
    )

    def __init__(self, prefix, counts, state, rules, progress, increase):
        self.prefix = prefix
        self.counts = counts
        self.state = state
        self.rules = rules
        self.progress = progress
        self.increase = increase
        self.per_chunk: list[int | None] = []
        self.checked: dict[str, Failure | None | bool] = {}
        self._viol = None
        self._goal = None
        self.signature: tuple | None = None


class PlanChecker:
    """Checks programs of ``problem`` exactly; the payload (column or value) comes from the encoding."""

    def __init__(
        self,
        problem: SynthesisProblem,
        payload_factory: PayloadFactory,
        *,
        chunks: int | None = None,
        strict_rows: bool = True,
        ctx: z3.Context | None = None,
        timeout_ms: int | None = None,
        arith: str = "int",
        structure: Structure | None = None,
        logic: str | None = None,
    ):
        self.problem = problem
        self.s = structure or Structure(problem)
        self.k = problem.num_devices
        self.chunks = chunks if chunks is not None else self.k
        self.ctx = ctx or z3.Context()
        self.arith = Arith(self.ctx, arith, self.k * self.chunks, "c_")
        self.row = self.arith.var("row")
        self.payload, self.payload_vars, domain = payload_factory(self)
        self.sem = Semantics(
            self.s, self.payload, self.row, self.arith, strict_rows, self.chunks, forall_rows=True
        )
        self.solver = z3.SolverFor(logic, ctx=self.ctx) if logic else z3.Solver(ctx=self.ctx)
        if timeout_ms is not None:
            self.solver.set("timeout", int(timeout_ms))
        self._base = [0 <= self.row, self.row < self.chunks, *domain]
        self.solver.add(*self._base)
        sharding = problem.sharding
        start = self.chunks // sharding.shards if sharding is not None and sharding.kind == "all-gather" else self.chunks
        root = Node((), [start] * self.k, self.sem.initial(), [], [], [])
        root.per_chunk = [1 if strict_rows else None] * self.k
        self.nodes: dict[tuple[int, ...], Node] = {(): root}
        self.calls = 0
        self.solver_seconds = 0.0  # in Z3's checks and models (the rest of a proof builds its formulas)
        self.budget: ResourceBudget | None = None  # the Z3 work the checks may spend (None: unlimited)
        self._model = None
        self.record = False  # keep each query's SMT-LIB2 text in ``log`` (for --emit-smt2)
        self.log: list[tuple[str, str]] = []

    def declare(self, name: str, var: Term, domain: Term) -> None:
        """A payload variable made after the checker (a lazy encoding's): named in witnesses, with its
        domain asserted in every query from now on."""
        self.payload_vars.append((name, var))
        self._base.append(domain)
        self.solver.add(domain)

    # ------------------------------------------------------------------ nodes

    def node(self, prefix: Sequence[int]) -> Node:
        prefix = tuple(prefix)
        found = self.nodes.get(prefix)
        if found is None:
            parent = self.node(prefix[:-1])
            found = self._child(parent, prefix[-1])
            self.nodes[prefix] = found
        return found

    def _child(self, parent: Node, c: int) -> Node:
        s = self.s
        coll = s.problem.candidates[c].collective
        n = parent.counts
        counts = list(n)
        per_chunk = list(parent.per_chunk)
        rules, progress, increase = [], [], []
        for gi, gid in enumerate(s.cand_groups[c]):
            g = s.groups[gid]
            rules.append(self.sem.rules(parent.state, c, gi, n.__getitem__))
            progress.append(len(g) >= 2 and n[g[0]] > 0)
            increase.append(None if coll is BC else True)  # built when counts do not settle it
            for d, (count, per) in zip(g, counts_after(coll, [(n[d], parent.per_chunk[d]) for d in g])):
                counts[d] = count
                per_chunk[d] = per

        def quotient(cand: int, gi: int) -> int:
            g = s.group_of(cand, gi)
            return n[g[0]] // len(g)

        state = self.sem.step(parent.state, [(True, c)], n.__getitem__, quotient, len(parent.prefix))
        node = Node(parent.prefix + (c,), counts, state, rules, progress, increase)
        node.per_chunk = per_chunk
        return node

    # ------------------------------------------------------------------ queries

    def violation(self, node: Node) -> Term:
        """Some ∀-precondition of the node's last step fails on some witness."""
        if node._viol is None:
            parts = [T.not_(cond) for group in node.rules for _, cond in group]
            node._viol = T.or_(parts)
        return node._viol

    def _goal_by_counts(self, node: Node) -> bool:
        """Whether, if every step is valid, the goal holds by counting alone: one goal group of all
        devices, every chunk non-empty on every device and holding k contributions (disjoint unions
        of distinct contributions, so all of them)."""
        if not self.sem.strict_rows or len(self.problem.goal_groups) != 1 or self.problem.sharding is not None:
            return False
        if len(self.problem.goal_groups[0]) != self.k or not node.per_chunk:
            return False
        return all(v == self.chunks for v in node.counts) and all(v == self.k for v in node.per_chunk)

    def goal_fails(self, node: Node) -> Term:
        if node._goal is None:
            node._goal = T.not_(self.sem.goal(node.state))
        return node._goal

    def sat(self, formula: Term, kind: str = "check", prefer_first_row: bool = True) -> bool:
        """Whether ``formula`` has a witness; raises Unknown when the solver gives up.

        A witness on chunk 0 is preferred when one exists (its track needs no rank arithmetic)."""
        if formula is False:
            return False
        if formula is True:
            formula = z3.BoolVal(True, self.ctx)  # every witness fails: still name one
        self.calls += 1
        self.solver.push()
        self.solver.add(formula)
        if self.record:
            text = z3.Solver(ctx=self.ctx)  # the query as asserted (a QF_FD solver prints its internals)
            text.add(*self._base, formula)
            self.log.append((kind, text.sexpr() + "(check-sat)\n"))
        start = time.perf_counter()
        try:
            res = self._check()
            if res == z3.unknown:
                raise Unknown(self.solver.reason_unknown())
            self._model = self.solver.model() if res == z3.sat else None
            if res == z3.sat and prefer_first_row and self._check(self.row == 0) == z3.sat:
                self._model = self.solver.model()
            return res == z3.sat
        finally:
            self.solver_seconds += time.perf_counter() - start
            self.solver.pop()

    def _check(self, *assumptions: Term) -> z3.CheckSatResult:
        """One check within ``budget`` (raises Unknown when it is spent)."""
        if self.budget is not None and not self.budget.arm(self.solver):
            raise Unknown("the proof's resource budget is spent")
        res = self.solver.check(*assumptions)
        if self.budget is not None:
            self.budget.note(self.solver)
        return res

    def witness(self) -> dict[str, int]:
        m = self._model
        out = {"chunk": self.arith.value(m.eval(self.row, model_completion=True))}
        for name, var in self.payload_vars:
            val = m.eval(var, model_completion=True)
            out[name] = self.arith.value(val) if not z3.is_int_value(val) else val.as_long()
        return out

    # ------------------------------------------------------------------ programs

    def first_failure(self, program: Sequence[int], *, terminal_goal: bool = True, detail: bool = False,
                      on_step: Callable[[int], None] | None = None):
        """None when ``program`` is valid, else the first Failure (Hoare semantics order).

        Each prefix's last step is checked once (cached on its node); ``detail`` also finds the first
        failing group and rule of a failing step, as the interpreter reports them, and calls ``on_step(t)``
        once steps 1..t are proved to apply.
        """
        program = tuple(program)
        self.log = []
        nodes = [self.node(program[: t + 1]) for t in range(len(program))]
        last = nodes[-1] if nodes else self.nodes[()]
        fresh = [nd for nd in nodes if "plain" not in nd.checked]
        static = any(cond is False for nd in fresh for grp in nd.rules for _, cond in grp)
        # one query for every unchecked step and the goal: the common case of a valid program
        quick = not detail and not static and terminal_goal
        goal = False if self._goal_by_counts(last) else self.goal_fails(last)
        if quick and not self.sat(T.or_([*(self.violation(nd) for nd in fresh), goal]), "forall"):
            for t, nd in enumerate(nodes):
                if "plain" not in nd.checked:
                    fail = self._exists_failure(t, nd)
                    nd.checked["plain"] = fail
                    if fail is not None:
                        return fail
                elif nd.checked["plain"] is not None:
                    return nd.checked["plain"]
            return None
        for t, nd in enumerate(nodes):
            fail = self._node_failure(t, nd, detail)
            if fail is not None:
                return fail
            if on_step is not None:
                on_step(t + 1)
            if not terminal_goal and t + 1 < len(nodes) and not self.sat(self.goal_fails(nd), "exists"):
                return Failure(t + 1, None, "progress", early_goal=True)
        if self.sat(self.goal_fails(last), "forall"):
            return Failure(None, None, "goal", self.witness())
        return None

    def failures(
        self, programs: Sequence[Sequence[int]], *, terminal_goal: bool = True
    ) -> list[Failure | None]:
        """``first_failure`` of every program; one query proves the common case that all are valid.

        The query asks for a witness violating some ∀-rule of an unchecked step or some goal of any of
        the programs; when it has one, the programs whose formulas the witness falsifies are checked
        one by one (exactly as ``first_failure``) and the query is repeated without them.
        """
        programs = [tuple(p) for p in programs]
        out: list[Failure | None] = [None] * len(programs)
        if not terminal_goal:
            return [self.first_failure(p, terminal_goal=False) for p in programs]
        self.log = []
        log: list[tuple[str, str]] = []
        pending: dict[int, tuple[list[Node], list[Term]]] = {}
        for i, p in enumerate(programs):
            nodes = [self.node(p[: t + 1]) for t in range(len(p))]
            last = nodes[-1] if nodes else self.nodes[()]
            fresh = [nd for nd in nodes if "plain" not in nd.checked]
            settled = any(nd.checked.get("plain") is not None for nd in nodes if nd not in fresh)
            static = any(cond is False for nd in fresh for grp in nd.rules for _, cond in grp)
            goal = False if self._goal_by_counts(last) else self.goal_fails(last)
            terms = [*(self.violation(nd) for nd in fresh), goal]
            if settled or static or any(v is True for v in terms):
                out[i] = self.first_failure(p)
                log += self.log
            else:
                pending[i] = (nodes, [v for v in terms if v is not False])
        while pending:
            formula = T.or_(v for _, terms in pending.values() for v in terms)
            self.log = []
            found = self.sat(formula, "forall-batch", prefer_first_row=False)
            log += self.log
            if not found:
                break
            model = self._model
            bad = [
                i
                for i, (_, terms) in pending.items()
                if any(z3.is_true(model.eval(v, model_completion=True)) for v in terms)
            ]
            if not bad:
                raise Unknown("the batch witness falsifies none of the programs")
            for i in bad:
                out[i] = self.first_failure(programs[i])
                log += self.log
                del pending[i]
        for i, (nodes, _) in pending.items():
            for t, nd in enumerate(nodes):
                if "plain" not in nd.checked:
                    nd.checked["plain"] = self._exists_failure(t, nd)
                if nd.checked["plain"] is not None:
                    out[i] = nd.checked["plain"]
                    break
        self.log = log
        return out

    def _node_failure(self, t: int, nd: Node, detail: bool) -> Failure | None:
        key = "detail" if detail else "plain"
        if nd.checked.get(key, False) is not False:
            return nd.checked[key]
        fail = self._step_failure(t, nd, detail)
        nd.checked[key] = fail
        if fail is None:
            nd.checked["plain"] = nd.checked["detail"] = None
        return fail

    def _step_failure(self, t: int, nd: Node, detail: bool) -> Failure | None:
        static = any(cond is False for grp in nd.rules for _, cond in grp)
        if not detail and not static and not self.sat(self.violation(nd), "forall"):
            return self._exists_failure(t, nd)
        for gi, group in enumerate(nd.rules):
            for name, cond in group:
                if cond is False:
                    return Failure(t, gi, name)
                if cond is not True and self.sat(T.not_(cond), "forall"):
                    return Failure(t, gi, name, self.witness())
            fail = self._group_exists(t, nd, gi)
            if fail is not None:
                return fail
        return None

    def _exists_failure(self, t: int, nd: Node) -> Failure | None:
        for gi in range(len(nd.rules)):
            fail = self._group_exists(t, nd, gi)
            if fail is not None:
                return fail
        return None

    def _group_exists(self, t: int, nd: Node, gi: int) -> Failure | None:
        cand = nd.prefix[-1]
        coll = self.problem.candidates[cand].collective
        if coll is Collective.BROADCAST:
            g = self.s.group_of(cand, gi)
            parent = self.node(nd.prefix[:-1])
            n, per = parent.counts, parent.per_chunk
            if any(n[d] < n[g[0]] for d in g[1:]):
                return None  # a member lacks a chunk the root holds: information increases
            root_per = per[g[0]]
            members = [per[d] for d in g[1:]]
            if n[g[0]] > 0 and root_per is not None and any(p is not None and p < root_per for p in members):
                return None  # a member's chunks hold fewer contributions than the root's
            if nd.increase[gi] is None:
                nd.increase[gi] = self.sem.differs(parent.state, g)
            if not self.sat(nd.increase[gi], "exists"):
                return Failure(t, gi, "information_increase")
        elif self.problem.require_progress and not nd.progress[gi]:
            return Failure(t, gi, "progress")
        return None

    def signature(self, prefix: Sequence[int]) -> tuple:
        """What the rest of a program's checks depend on after ``prefix``: the chunk and contribution
        counts per device and the track's formulas (by identity: Z3 shares equal terms)."""
        nd = self.node(prefix)
        if nd.signature is None:
            st = nd.state
            terms = (_identity(v) for column in (st.present, st.below, st.payload) for v in column)
            nd.signature = (tuple(nd.counts), tuple(nd.per_chunk), tuple(terms))
        return nd.signature

    def state(self, program: Sequence[int]) -> TrackState:
        return self.node(program).state

    def counts(self, program: Sequence[int]) -> list[int]:
        return self.node(program).counts


def _identity(v: Term) -> tuple:
    """A term's identity: a Python value, or the address of a Z3 term (shared, kept alive by its node)."""
    return (type(v), v) if T.is_const(v) else (z3.ExprRef, v.ast.value)


class SameStates:
    """Programs implied by the valid ones found so far: a step's validity depends only on the state
    before it, so when A+B is valid and A' (a prefix of another valid program) leaves the very state A
    leaves (``PlanChecker.signature``), A'+B is valid too. Each is still proved by the checker."""

    def __init__(self, checker: PlanChecker, max_len: int):
        self.checker = checker
        self.max_len = max_len
        self.prefixes: dict[tuple, dict[tuple[int, ...], None]] = {}
        self.suffixes: dict[tuple, dict[tuple[int, ...], None]] = {}

    def add(self, program: Sequence[int]) -> list[tuple[int, ...]]:
        """The new programs that ``program`` (valid) implies with the earlier ones, in a fixed order."""
        program = tuple(program)
        out: dict[tuple[int, ...], None] = {}
        for i in range(1, len(program) + 1):
            key = self.checker.signature(program[:i])
            prefixes = self.prefixes.setdefault(key, {})
            suffixes = self.suffixes.setdefault(key, {})
            pre, suf = program[:i], program[i:]
            if pre not in prefixes:
                prefixes[pre] = None
                out.update((pre + s, None) for s in suffixes if len(pre) + len(s) <= self.max_len)
            if suf not in suffixes:
                suffixes[suf] = None
                out.update((p + suf, None) for p in prefixes if len(p) + len(suf) <= self.max_len)
        out.pop(program, None)
        return list(out)
