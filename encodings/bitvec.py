"""bitvec: the literal unrolled device-state matrix of docs/semantics.md §4, one k-bit vector per state row.

Row ``(d, r)`` after ``t`` steps is a bit-vector over contributions (bit c: device c's chunk r is
summed in). Per step one candidate or STOP is chosen; each candidate's Hoare preconditions and
postconditions are built per group: union is ``bvor``, disjointness a running union (``(acc & x) ==
0``, no popcount), emptiness ``== 0``, Broadcast's ``s_i <= s_0`` is ``(x & ~root) == 0``. The
ReduceScatter block of a chunk depends on how many non-empty chunks lie below it: that count is a
sum of row-emptiness literals, compared exactly (by case split over its few distinct literals, or by
bit-vector arithmetic when there are many). ``require_progress``: every group of a step changes a
member's row. The goal holds on the last state; if a step could follow the goal, earlier states must
differ from it (the enumerative engine stops at the goal). Every model is a valid program and vice
versa, so nothing is re-checked. Terms are hash-consed and constant-folded in Python before they
reach Z3, so rows that are the same term (all rows of a device until a ReduceScatter splits them)
are built and bit-blasted once.
"""

from __future__ import annotations

import time
from typing import Any, Literal

import z3
from pydantic import Field

from p2smt.model.collectives import AG, AR, BC, RED, RS, Collective
from p2smt.model.problem import SynthesisProblem
from p2smt.smt.base import Encoding, EncodingOptions, EncodingSpec, Program
from p2smt.smt.choices import StepChoices
from p2smt.smt.structure import goal_is_terminal

CASE_SPLIT_ATOMS = 3  # counts over more distinct literals than this use bit-vector arithmetic

BYTES_PER_BIT = {None: 500, "reduce-scatter": 160, "all-gather": 50}
"""Peak bytes per bit of a row term, by goal (None: AllReduce), measured (peak RSS less the 0.1 GB of a bare
process): AllReduce at 32 devices (20 candidates) peaked at 0.24, 0.93 and 1.95 GB for lengths 2, 3, 4; at 48
devices, length 4, it held 7.0 GB when stopped after 900 s; at 64 it grew past 23 GiB. The sharded goals fold
most rows to constants: 1.09 GB for ReduceScatter at 64 devices, length 2; 1.50 GB for AllGather at 64, length 4
(docs/usage.md, "The Z3 encodings' memory")."""


def row_terms(problem: SynthesisProblem, steps: int) -> float:
    """The row terms an unrolling of ``steps`` steps builds, about 2.5 per candidate, device and chunk per step
    past the first and a half (131k at 32 devices and length 4, 573k at 64: measured ``terms``)."""
    k = problem.num_devices
    return 2.5 * len(problem.candidates) * k * k * max(steps - 1.5, 0.5)


def footprint(problem: SynthesisProblem, max_len: int, options: BitvecOptions) -> int:
    """Estimated peak bytes: each row term is a ``devices``-bit vector that Z3 bit-blasts; ``exact`` padding
    builds one unrolling per length."""
    lengths = range(1, max_len + 1) if options.padding == "exact" else (max_len,)
    bits = sum(row_terms(problem, n) for n in lengths) * problem.num_devices
    kind = None if problem.sharding is None else problem.sharding.kind.value
    return int(bits * BYTES_PER_BIT[kind])


class BitvecOptions(EncodingOptions):
    choice: Literal["onehot", "index"] = Field(
        "onehot", description="instruction choice per step: one-hot Booleans (PbEq) or a bit-vector index"
    )
    padding: Literal["stop", "exact"] = Field(
        "stop",
        description="stop: one unrolling padded with STOP, lengths by assumptions; exact: a fresh "
        "exact-length unrolling per length",
    )
    lemmas: bool = Field(
        False,
        description="add implied exclusions of consecutive steps over the same groups (sound: each is "
        "a consequence of the rules under require_progress; no program is lost)",
    )


class Dag:
    """Hash-consed, constant-folded Boolean and bit-vector terms of one Z3 context, by integer handle."""

    def __init__(self, ctx: z3.Context, width: int):
        self.ctx, self.width = ctx, width
        self.terms: list[z3.ExprRef] = []
        self.values: list[Any] = []
        self.nodes: list[tuple | None] = []
        self.memo: dict[tuple, int] = {}
        self.TRUE = self._make(("const", True), lambda: z3.BoolVal(True, ctx), True)
        self.FALSE = self._make(("const", False), lambda: z3.BoolVal(False, ctx), False)
        self.arith_groups = 0

    def _make(self, key: tuple, build, value: Any = None, node: tuple | None = None) -> int:
        h = self.memo.get(key)
        if h is None:
            h = len(self.terms)
            self.terms.append(build())
            self.values.append(value)
            self.nodes.append(node)
            self.memo[key] = h
        return h

    def z(self, h: int) -> z3.ExprRef:
        return self.terms[h]

    # ---------------------------------------------------------------- Booleans

    def lit(self, b: z3.BoolRef) -> int:
        return self._make(("lit", b.get_id()), lambda: b)

    def boolean(self, v: bool) -> int:
        return self.TRUE if v else self.FALSE

    def not_(self, a: int) -> int:
        v = self.values[a]
        if v is not None:
            return self.boolean(not v)
        node = self.nodes[a]
        if node is not None and node[0] == "not":
            return node[1]
        return self._make(("not", a), lambda: z3.Not(self.terms[a]), node=("not", a))

    def _junction(self, hs, absorbing: bool) -> int:
        keep: set[int] = set()
        for h in hs:
            v = self.values[h]
            if v is absorbing:
                return self.boolean(absorbing)
            if v is None:
                keep.add(h)
        for h in keep:
            node = self.nodes[h]
            if node is not None and node[0] == "not" and node[1] in keep:
                return self.boolean(absorbing)
        if not keep:
            return self.boolean(not absorbing)
        if len(keep) == 1:
            return next(iter(keep))
        args = tuple(sorted(keep))
        op = z3.Or if absorbing else z3.And
        return self._make(("or" if absorbing else "and", args), lambda: op([self.terms[h] for h in args]))

    def and_(self, hs) -> int:
        return self._junction(hs, False)

    def or_(self, hs) -> int:
        return self._junction(hs, True)

    def iff(self, a: int, b: int) -> int:
        if a == b:
            return self.TRUE
        va, vb = self.values[a], self.values[b]
        if va is not None and vb is not None:
            return self.boolean(va == vb)
        if va is not None:
            return b if va else self.not_(b)
        if vb is not None:
            return a if vb else self.not_(a)
        if self.not_(a) == b:
            return self.FALSE
        a, b = min(a, b), max(a, b)
        return self._make(("iff", a, b), lambda: self.terms[a] == self.terms[b])

    def ite_b(self, c: int, a: int, b: int) -> int:
        vc = self.values[c]
        if vc is not None:
            return a if vc else b
        if a == b:
            return a
        va, vb = self.values[a], self.values[b]
        if va is True and vb is False:
            return c
        if va is False and vb is True:
            return self.not_(c)
        if vb is False:
            return self.and_((c, a))
        if va is True:
            return self.or_((c, b))
        if va is False:
            return self.and_((self.not_(c), b))
        if vb is True:
            return self.or_((self.not_(c), a))
        return self._make(("iteb", c, a, b), lambda: z3.If(self.terms[c], self.terms[a], self.terms[b]))

    def at_most_one(self, hs) -> int:
        """Sequential at-most-one (no cardinality operator, linear size)."""
        hs = [h for h in hs if self.values[h] is not False]
        if sum(1 for h in hs if self.values[h] is True) > 1:
            return self.FALSE
        conds, seen = [], self.FALSE
        for h in hs:
            conds.append(self.not_(self.and_((seen, h))))
            seen = self.or_((seen, h))
        return self.and_(conds)

    # ---------------------------------------------------------------- bit-vectors (one state row)

    def bv(self, v: int) -> int:
        return self._make(("bv", v), lambda: z3.BitVecVal(v, self.width, self.ctx), v)

    def bor(self, a: int, b: int) -> int:
        va, vb = self.values[a], self.values[b]
        if va is not None and vb is not None:
            return self.bv(va | vb)
        if va == 0 or a == b:
            return b
        if vb == 0:
            return a
        a, b = min(a, b), max(a, b)
        return self._make(("bor", a, b), lambda: self.terms[a] | self.terms[b], node=("bor", a, b))

    def ite(self, c: int, a: int, b: int) -> int:
        vc = self.values[c]
        if vc is not None:
            return a if vc else b
        if a == b:
            return a
        return self._make(
            ("ite", c, a, b), lambda: z3.If(self.terms[c], self.terms[a], self.terms[b]), node=("ite", c, a, b)
        )

    def nonempty(self, a: int) -> int:
        """``a != 0``, pushed through ``ite`` and ``bvor`` down to shared literals."""
        key = ("nz", a)
        if key in self.memo:
            return self.memo[key]
        v, node = self.values[a], self.nodes[a]
        if v is not None:
            out = self.boolean(v != 0)
        elif node is not None and node[0] == "ite":
            out = self.ite_b(node[1], self.nonempty(node[2]), self.nonempty(node[3]))
        elif node is not None and node[0] == "bor":
            out = self.or_((self.nonempty(node[1]), self.nonempty(node[2])))
        else:
            zero = z3.BitVecVal(0, self.width, self.ctx)
            out = self._make(("nzterm", a), lambda: self.terms[a] != zero)
        self.memo[key] = out
        return out

    def disjoint(self, a: int, b: int) -> int:
        """``(a & b) == 0``."""
        va, vb = self.values[a], self.values[b]
        if va == 0 or vb == 0:
            return self.TRUE
        if va is not None and vb is not None:
            return self.boolean(va & vb == 0)
        if a == b:
            return self.not_(self.nonempty(a))
        a, b = min(a, b), max(a, b)
        zero = z3.BitVecVal(0, self.width, self.ctx)
        return self._make(("disj", a, b), lambda: self.terms[a] & self.terms[b] == zero)

    def below(self, a: int, b: int) -> int:
        """``a <= b`` bitwise: ``(a & ~b) == 0``."""
        va, vb = self.values[a], self.values[b]
        if va == 0 or a == b:
            return self.TRUE
        if va is not None and vb is not None:
            return self.boolean(va & ~vb == 0)
        zero = z3.BitVecVal(0, self.width, self.ctx)
        return self._make(("below", a, b), lambda: self.terms[a] & ~self.terms[b] == zero)

    def equal(self, a: int, b: int) -> int:
        if a == b:
            return self.TRUE
        key = ("equal", min(a, b), max(a, b))
        if key not in self.memo:
            self.memo[key] = self._equal(a, b)
        return self.memo[key]

    def _equal(self, a: int, b: int) -> int:
        va, vb = self.values[a], self.values[b]
        if va is not None and vb is not None:
            return self.boolean(va == vb)
        a, b = min(a, b), max(a, b)
        return self._make(("eq", a, b), lambda: self.terms[a] == self.terms[b])

    # ---------------------------------------------------------------- counts of true literals

    def count(self, hs) -> tuple[int, tuple[tuple[int, int], ...]]:
        """The number of true literals among ``hs``: (constant, ((literal, coefficient), ...))."""
        const, coeffs = 0, {}
        for h in hs:
            v = self.values[h]
            if v is None:
                coeffs[h] = coeffs.get(h, 0) + 1
            elif v:
                const += 1
        return const, tuple(sorted(coeffs.items()))

    def predicate(self, kind: tuple, counts: tuple) -> int:
        """An exact test over counts of few literals (a case split over them); ``kind`` is
        ("block", i, m), ("divisible", m) or ("equal",)."""
        key = ("pred", kind, counts)
        if key not in self.memo:
            atoms = sorted({h for _, co in counts for h, _ in co})
            self.memo[key] = self._case_split(kind, counts, atoms, 0, {})
        return self.memo[key]

    @staticmethod
    def _holds(kind: tuple, nums: list[int]) -> bool:
        if kind[0] == "block":  # rank p of a chunk among n non-empty ones lies in block i of m
            _, i, m = kind
            p, n = nums
            return i * n <= m * p < (i + 1) * n
        if kind[0] == "divisible":
            return nums[0] % kind[1] == 0
        return nums[0] == nums[1]

    def _case_split(self, kind, counts, atoms, at, assign) -> int:
        if at == len(atoms):
            nums = [c + sum(k for h, k in co if assign[h]) for c, co in counts]
            return self.boolean(self._holds(kind, nums))
        assign[atoms[at]] = True
        hi = self._case_split(kind, counts, atoms, at + 1, assign)
        assign[atoms[at]] = False
        lo = self._case_split(kind, counts, atoms, at + 1, assign)
        return self.ite_b(atoms[at], hi, lo)

    # ---------------------------------------------------------------- unsigned numbers of width w

    def num(self, v: int, w: int) -> int:
        return self._make(("num", v, w), lambda: z3.BitVecVal(v, w, self.ctx), v)

    def add_bit(self, p: int, e: int, w: int) -> int:
        """``p + (1 if e else 0)``."""
        ve, vp = self.values[e], self.values[p]
        if ve is False:
            return p
        if ve is True and vp is not None:
            return self.num(vp + 1, w)
        one, zero = z3.BitVecVal(1, w, self.ctx), z3.BitVecVal(0, w, self.ctx)
        if ve is True:
            return self._make(("inc", p), lambda: self.terms[p] + one)
        if vp == 0:
            return self._make(("bit", e, w), lambda: z3.If(self.terms[e], one, zero))
        return self._make(("addbit", p, e), lambda: self.terms[p] + z3.If(self.terms[e], one, zero))

    def popcount(self, hs, w: int) -> int:
        acc = self.num(0, w)
        for h in hs:
            acc = self.add_bit(acc, h, w)
        return acc

    def times(self, p: int, c: int, w: int) -> int:
        vp = self.values[p]
        if vp is not None:
            return self.num(vp * c, w)
        if c == 1:
            return p
        if c == 0:
            return self.num(0, w)
        return self._make(("times", p, c), lambda: self.terms[p] * z3.BitVecVal(c, w, self.ctx))

    def div(self, p: int, c: int, w: int) -> int:
        vp = self.values[p]
        if vp is not None:
            return self.num(vp // c, w)
        return self._make(("div", p, c), lambda: z3.UDiv(self.terms[p], z3.BitVecVal(c, w, self.ctx)))

    def divisible(self, p: int, c: int, w: int) -> int:
        vp = self.values[p]
        if vp is not None:
            return self.boolean(vp % c == 0)
        zero = z3.BitVecVal(0, w, self.ctx)
        return self._make(("divisible", p, c), lambda: z3.URem(self.terms[p], z3.BitVecVal(c, w, self.ctx)) == zero)

    def ule(self, a: int, b: int) -> int:
        va, vb = self.values[a], self.values[b]
        if va is not None and vb is not None:
            return self.boolean(va <= vb)
        if a == b or va == 0:
            return self.TRUE
        return self._make(("ule", a, b), lambda: z3.ULE(self.terms[a], self.terms[b]))


State = list[list[int]]  # state[d][r]: handle of device d's chunk-r row


def goal_rows(problem: SynthesisProblem) -> list[list[int]]:
    """``rows[d][r]``: the contributions device d's chunk r holds at the goal, as a mask: its goal group's
    (AllReduce), its group's on its shard's chunks only (ReduceScatter/HSDP), the owner of r's alone
    (AllGather; docs/semantics.md §6); devices outside every goal group end empty."""
    k, sh = problem.num_devices, problem.sharding
    rows = [[0] * k for _ in range(k)]
    for g in problem.goal_groups:
        mask = sum(1 << c for c in g)
        owners = sh.owners(tuple(g), k) if sh is not None and sh.kind == "all-gather" else None
        for d in g:
            for r in range(k):
                if owners is not None:
                    rows[d][r] = 1 << owners[r]
                elif sh is None or r in sh.shard(d, k):
                    rows[d][r] = mask
    return rows


class Unroller:
    """Builds steps of docs/semantics.md §4 on row handles: each candidate's validity and new rows."""

    def __init__(self, dag: Dag, problem: SynthesisProblem):
        self.dag, self.problem = dag, problem
        self.k = problem.num_devices
        self.touching = [
            sorted({d for g in c.groups for d in g}) for c in problem.candidates
        ]
        self.goal_rows = [[dag.bv(v) for v in row] for row in goal_rows(problem)]

    def initial(self) -> State:
        sh = self.problem.sharding
        if sh is not None and sh.kind == "all-gather":  # d holds its own contribution in its own shard only
            return [[self.dag.bv(1 << d if r in sh.shard(d, self.k) else 0) for r in range(self.k)]
                    for d in range(self.k)]
        return [[self.dag.bv(1 << d)] * self.k for d in range(self.k)]

    def goal(self, state: State) -> int:
        dag = self.dag
        return dag.and_(dag.equal(h, g) for rows, goal in zip(state, self.goal_rows) for h, g in zip(rows, goal))

    def candidate(self, state: State, j: int) -> tuple[int, dict[int, list[int]]]:
        """(validity handle, {device: new rows}) of candidate ``j`` applied to ``state``."""
        cand = self.problem.candidates[j]
        conds, new = [], {}
        for g in cand.groups:
            ok, rows = self._group(cand.collective, [state[d] for d in g])
            conds.append(ok)
            if self.problem.require_progress:
                conds.append(self._changes(cand.collective, [state[d] for d in g]))
            new.update(zip(g, rows))
        return self.dag.and_(conds), new

    def _changes(self, coll: Collective, members: list[list[int]]) -> int:
        """Whether the group changes some member's state, given the group's preconditions hold.

        Broadcast: its information-increase precondition says so. Otherwise a single member never
        changes; with two or more, the first member holding a non-empty chunk suffices: the others
        hold it too (AllReduce, ReduceScatter, Reduce: same chunks) and then gain contributions, lose
        the chunk, or become empty; or (AllGather: disjoint chunks of equal number) another member
        lacks it and gains it. With no non-empty chunk at the first member every rule is the identity
        (AllGather: equal numbers of chunks make every member empty)."""
        if coll is BC:
            return self.dag.TRUE
        if len(members) < 2:
            return self.dag.FALSE
        return self.dag.or_(self.dag.nonempty(h) for h in set(members[0]))

    def _group(self, coll: Collective, members: list[list[int]]) -> tuple[int, list[list[int]]]:
        dag, m, k = self.dag, len(members), self.k
        cols = [tuple(x[r] for x in members) for r in range(k)]
        conds: list[int] = []
        if coll is BC:
            root = members[0]
            pairs = {(x[r], root[r]) for x in members[1:] for r in range(k)}
            conds.extend(dag.below(a, b) for a, b in pairs)
            conds.append(dag.or_(dag.not_(dag.equal(a, b)) for a, b in pairs))
            return dag.and_(conds), [list(root) for _ in range(m)]
        union = [self._union(c, coll is not AG, conds) for c in dict.fromkeys(cols)]
        union_of = dict(zip(dict.fromkeys(cols), union))
        u = [union_of[c] for c in cols]
        if coll is AG:
            nz = [[dag.nonempty(h) for h in x] for x in members]
            conds.extend(dag.at_most_one(c) for c in dict.fromkeys(tuple(n[r] for n in nz) for r in range(k)))
            conds.extend(self._equal_counts(nz))
            return dag.and_(conds), [list(u) for _ in range(m)]
        if coll is AR:
            return dag.and_(conds), [list(u) for _ in range(m)]
        if coll is RED:
            zero = dag.bv(0)
            return dag.and_(conds), [list(u)] + [[zero] * k for _ in range(m - 1)]
        return self._scatter(u, m, conds)

    def _few(self, literals) -> bool:
        """Whether counts over these literals are small enough to case-split on."""
        dag = self.dag
        return len({h for h in literals if dag.values[h] is None}) <= CASE_SPLIT_ATOMS

    def _equal_counts(self, nz: list[list[int]]) -> list[int]:
        """AllGather: every member holds as many non-empty chunks as the first."""
        dag = self.dag
        if self._few(h for n in nz for h in n):
            first = dag.count(nz[0])
            return [dag.predicate(("equal",), (first, dag.count(n))) for n in nz[1:]]
        self.dag.arith_groups += 1
        w = (self.k + 1).bit_length()
        first = dag.popcount(nz[0], w)
        return [dag.equal(first, dag.popcount(n, w)) for n in nz[1:]]

    def _scatter(self, u: list[int], m: int, conds: list[int]) -> tuple[int, list[list[int]]]:
        """ReduceScatter: member i keeps the union's non-empty chunks of rank block i (of m equal
        blocks in chunk order); their number must be divisible by m."""
        dag, k = self.dag, self.k
        nz = [dag.nonempty(h) for h in u]
        zero, rows = dag.bv(0), [[] for _ in range(m)]
        if self._few(nz):
            total = dag.count(nz)
            conds.append(dag.predicate(("divisible", m), (total,)))
            for r in range(k):
                below = dag.count(nz[:r])
                for i in range(m):
                    rows[i].append(dag.ite(dag.predicate(("block", i, m), (below, total)), u[r], zero))
            return dag.and_(conds), rows
        self.dag.arith_groups += 1
        w = (k * m + 1).bit_length() + 1
        prefix = [dag.num(0, w)]
        for h in nz:
            prefix.append(dag.add_bit(prefix[-1], h, w))
        total = prefix[k]
        conds.append(dag.divisible(total, m, w))
        if m & (m - 1) == 0:  # block size n / m is a shift: compare ranks with i * (n / m)
            size = dag.div(total, m, w)
            bounds = [dag.times(size, i, w) for i in range(m + 1)]
            ranks = prefix[:k]
        else:  # compare m * rank with i * n
            bounds = [dag.times(total, i, w) for i in range(m + 1)]
            ranks = [dag.times(p, m, w) for p in prefix[:k]]
        for r in range(k):
            reached = [dag.TRUE] + [dag.ule(bounds[i], ranks[r]) for i in range(1, m)] + [dag.FALSE]
            for i in range(m):
                inside = dag.and_((reached[i], dag.not_(reached[i + 1])))
                rows[i].append(dag.ite(inside, u[r], zero))
        return dag.and_(conds), rows

    def _union(self, col: tuple[int, ...], reduce: bool, conds: list[int]) -> int:
        """Union of a chunk over the members; for reductions, every member's chunk must be empty
        exactly when the first member's is, and disjoint from the union of those before it."""
        dag = self.dag
        acc = col[0]
        if reduce:
            first = dag.nonempty(col[0])
            for h in col[1:]:
                conds.append(dag.iff(dag.nonempty(h), first))
        for h in col[1:]:
            if reduce:
                conds.append(dag.disjoint(acc, h))
            acc = dag.bor(acc, h)
        return acc


class BitvecEncoding(Encoding):
    name = "bitvec"
    logic = "QF_FD"

    def __init__(self, problem: SynthesisProblem, max_len: int, options: BitvecOptions):
        super().__init__(problem, max_len)
        self.options = options
        self.dag = Dag(self.context, max(problem.num_devices, 1))
        self.unroller = Unroller(self.dag, problem)
        self.n = len(problem.candidates)
        self.terminal = goal_is_terminal(problem)
        self._solver: z3.Solver | None = None
        self._unrollings: dict[int, tuple[StepChoices, z3.BoolRef | None]] = {}
        self._active = 0
        self._retired: set[int] = set()
        self.build_seconds = 0.0
        self.assertions = 0

    # ------------------------------------------------------------------ unrolling

    def _unroll(self, steps: int, stop: bool, prefix: str) -> tuple[StepChoices, list[z3.BoolRef]]:
        """Choices and constraints of ``steps`` steps; with ``stop`` the last state is after STOP padding."""
        start = time.perf_counter()
        dag, un = self.dag, self.unroller
        ch = StepChoices(self.context, steps, self.n, self.options.choice, stop, prefix)
        out: list[z3.BoolRef] = list(ch.constraints())
        state = un.initial()
        for t in range(steps):
            sel = [dag.lit(ch.select(t, j)) for j in range(self.n)]
            effects: dict[int, list[tuple[int, list[int]]]] = {}
            for j in range(self.n):
                ok, rows = un.candidate(state, j)
                if dag.values[ok] is False:
                    out.append(z3.Not(dag.z(sel[j])))
                    continue
                if dag.values[ok] is not True:
                    out.append(z3.Implies(dag.z(sel[j]), dag.z(ok)))
                for d, new in rows.items():
                    effects.setdefault(d, []).append((sel[j], new))
            nxt = []
            for d in range(un.k):
                rows = list(state[d])
                for r in range(un.k):
                    rows[r] = self._mux(state[d][r], [(s, new[r]) for s, new in effects.get(d, [])])
                nxt.append(rows)
            if not self.terminal and t >= 1:
                not_goal = dag.z(dag.not_(un.goal(state)))
                out.append(z3.Implies(z3.Not(ch.stop(t)), not_goal) if stop else not_goal)
            state = nxt
        out.append(dag.z(un.goal(state)))
        if self.options.lemmas and self.problem.require_progress:
            out.extend(self._lemmas(ch, steps))
        self.build_seconds += time.perf_counter() - start
        out = [c for c in out if not z3.is_true(c)]
        self.assertions += len(out)
        return ch, out

    def _mux(self, old: int, branches: list[tuple[int, int]]) -> int:
        """The row after the step: the chosen candidate's new row, or ``old`` if none touches it.
        Candidates with the same new row share one branch; exactly one candidate is chosen."""
        dag = self.dag
        by_row: dict[int, list[int]] = {}
        for s, row in branches:
            if row != old:
                by_row.setdefault(row, []).append(s)
        acc = old
        for row, sels in reversed(by_row.items()):
            acc = dag.ite(dag.or_(sels), row, acc)
        return acc

    def _lemmas(self, ch: StepChoices, steps: int) -> list[z3.BoolRef]:
        return [
            z3.Or(z3.Not(ch.select(t, a)), z3.Not(ch.select(t + 1, b)))
            for t in range(steps - 1)
            for a, b in self.lemma_pairs()
        ]

    def lemma_pairs(self) -> list[tuple[int, int]]:
        """Candidate pairs (a, b) that cannot be consecutive steps under require_progress, as they
        act on the same groups: after AllReduce, AllGather or Broadcast the members are equal (any
        next collective on them double counts, overlaps or adds nothing); after ReduceScatter only
        AllGather, after Reduce only Broadcast can follow on the very same groups."""
        if not self.problem.require_progress:
            return []
        cands = self.problem.candidates
        allowed = {(RS, AG), (RED, BC)}
        pairs = []
        for a, ca in enumerate(cands):
            for b, cb in enumerate(cands):
                if ca.collective in (AR, AG, BC):
                    same = {frozenset(g) for g in ca.groups} == {frozenset(g) for g in cb.groups}
                else:
                    same = ca.groups == cb.groups and (ca.collective, cb.collective) not in allowed
                if same:
                    pairs.append((a, b))
        return pairs

    # ------------------------------------------------------------------ engine interface

    def declare(self, solver: z3.Solver) -> None:
        self._solver = solver
        if self.options.padding == "stop":
            ch, cons = self._unroll(self.max_len, True, "s_")
            solver.add(*cons)
            self._unrollings[self.max_len] = (ch, None)

    def length_assumptions(self, length: int) -> list[z3.BoolRef]:
        if self.options.padding == "stop":
            return self._unrollings[self.max_len][0].length_assumptions(length)
        if self._solver is None:
            raise RuntimeError("declare() was not called")
        if length not in self._unrollings:
            guard = z3.Bool(f"len_{length}", self.context)
            ch, cons = self._unroll(length, False, f"l{length}_")
            self._solver.add(*[z3.Implies(guard, c) for c in cons])
            self._unrollings[length] = (ch, guard)
        for old, (_, g) in self._unrollings.items():
            if old != length and old not in self._retired:
                self._solver.add(z3.Not(g))  # a finished length: its unrolling is switched off for good
                self._retired.add(old)
        self._active = length
        return [self._unrollings[length][1]]

    def _choices(self) -> StepChoices:
        key = self.max_len if self.options.padding == "stop" else self._active
        return self._unrollings[key][0]

    def decode(self, model: z3.ModelRef) -> Program:
        return self._choices().decode(model)

    def blocking_clause(self, program: Program) -> z3.BoolRef:
        return self._choices().blocking_clause(program)

    def statistics(self) -> dict[str, Any]:
        return {
            "terms": len(self.dag.terms),
            "assertions": self.assertions,
            "build_seconds": round(self.build_seconds, 6),
            "arith_groups": self.dag.arith_groups,
        }


ENCODING = EncodingSpec(
    name="bitvec",
    description="literal unrolled device-state matrix, one bit-vector per state row (exact, no refinement)",
    options=BitvecOptions,
    factory=lambda problem, max_len, options: BitvecEncoding(problem, max_len, options),
    footprint=footprint,
)
