"""The unrolled problem: step choices, chunk counts and contribution weights, and witness tracks.

A program of at most ``T`` steps is a choice per step among the candidates plus STOP (``choices.py``; STOP only
followed by STOP). Per device the number of non-empty chunks ``n`` and the number of contributions
per non-empty chunk ``c`` follow Hoare rules that depend only on a group as a set and on its root, so
they are kept per cell of the stable partition (``structure.py``): their encoding does not grow with
the number of devices.

The state matrix itself is observed through *tracks*: a track follows one chunk ``row`` on every
device (whether it is non-empty, and how many non-empty chunks lie below it, which is all
ReduceScatter's block layout needs) plus a payload (a contribution column for the Boolean semantics,
a data value for the value semantics). A track over a symbolic row and payload stands for every cell
at once; this is how plans are proved (``check.py``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import z3

from p2smt.errors import P2Error
from p2smt.model.collectives import AG, AR, BC, RED, RS, Collective
from p2smt.smt import terms as T
from p2smt.smt.choices import StepChoices
from p2smt.smt.structure import Structure
from p2smt.smt.terms import Term

RULE_ORDER = ("same_chunks", "disjoint", "disjoint_chunks", "equal_sizes", "divisible", "below_root")


class Arith:
    """Numbers as signed bit-vectors of a width that cannot wrap around, or as mathematical integers."""

    def __init__(self, ctx: z3.Context, kind: str, bound: int, prefix: str):
        self.ctx = ctx
        self.kind = kind
        self.width = (max(bound, 1) * 4).bit_length() + 1
        self.prefix = prefix
        self._lits: dict[int, z3.ExprRef] = {}

    def var(self, name: str) -> z3.ExprRef:
        if self.kind == "int":
            return z3.Int(f"{self.prefix}{name}", self.ctx)
        return z3.BitVec(f"{self.prefix}{name}", self.width, self.ctx)

    def lit(self, value: int) -> z3.ExprRef:
        found = self._lits.get(value)
        if found is None:
            if self.kind == "int":
                found = z3.IntVal(value, self.ctx)
            else:
                found = z3.BitVecVal(value, self.width, self.ctx)
            self._lits[value] = found
        return found

    def value(self, v: z3.ExprRef) -> int:
        return v.as_signed_long() if z3.is_bv_value(v) else v.as_long()


class CellCounts:
    """Per cell and step: non-empty chunk count ``n`` and per-chunk contribution count ``c``.

    ``n`` is exact. ``c`` (how many contributions each non-empty chunk holds) is exact while ``known``:
    the device's non-empty chunks all hold equally many contributions; a device whose chunks differ
    (an AllGather of members with different ``c``) leaves ``c`` unconstrained from then on. Every rule
    built here is a necessary condition of validity, so valid programs always remain models.
    Stored values are narrow (at most ``chunks`` or ``k``); sums over groups are computed wider.
    """

    def __init__(
        self,
        s: Structure,
        choices: StepChoices,
        chunks: int,
        ctx: z3.Context,
        kind: str,
        require_progress: bool,
        same_chunks: bool = True,
        contributions: bool = True,
    ):
        self.s = s
        self.same_chunks = same_chunks  # AllReduce/ReduceScatter/Reduce members hold equally many chunks
        self.contributions = contributions  # per-chunk contribution counts (Boolean semantics only)
        self.ch = choices
        self.chunks = chunks
        self.require_progress = require_progress
        big = max((len(g) for g in s.groups), default=1)
        self.an = Arith(ctx, kind, chunks, "s_n")
        self.ac = Arith(ctx, kind, s.k, "s_c")
        self.wide = Arith(ctx, kind, big * max(s.k, chunks), "s_w")
        self.background: list[Term] = []
        self._wide: dict[int, tuple[Term, Term]] = {}  # id -> (widened, original: keeps the id alive)
        cells = s.cells
        sharding = s.problem.sharding
        self.sharding = sharding  # a sharded goal (§6): AllGather starts from one shard; both end differently
        start = chunks // sharding.shards if sharding is not None and sharding.kind == "all-gather" else chunks
        self.n: list[list[Term]] = [[start] * cells]
        self.c: list[list[Term]] = [[1] * cells]
        self.known: list[list[Term]] = [[True] * cells]
        self._fresh: dict[tuple, tuple[Term, set]] = {}
        self._flushed = 0
        for t in range(choices.steps):
            self._step(t)

    def widen(self, v: Term) -> Term:
        if T.is_const(v) or self.wide.kind == "int":
            return v
        key = v.get_id()
        found = self._wide.get(key)
        if found is None:
            found = self._wide[key] = (z3.SignExt(self.wide.width - v.size(), v), v)
        return found[0]

    def quotient(self, t: int, c: int, gi: int) -> Term:
        """ReduceScatter's block size (a fresh bounded variable with ``choose -> m * q == n``)."""
        g = self.s.group_of(c, gi)
        n = self.n[t][self.s.cell[g[0]]]
        m = len(g)
        if T.is_const(n):
            return n // m
        key = (t, n.get_id(), m)
        if key not in self._fresh:
            v = self.an.var(f"q_{t}_{len(self._fresh)}")
            self.background.append(z3.And(0 <= v, v <= self.chunks))
            self._fresh[key] = (v, set())
        v, guards = self._fresh[key]
        guard = self.ch.x[t][c]
        if guard.get_id() not in guards:
            guards.add(guard.get_id())
            self.background.append(z3.Implies(guard, self.widen(v) * m == self.widen(n)))
        return v

    def flush(self) -> list[Term]:
        """Background constraints created since the last flush."""
        out = self.background[self._flushed :]
        self._flushed = len(self.background)
        return out

    def union_c(self, t: int, mult) -> Term:
        """Contributions per chunk of a union (wide): the members' counts added."""
        return T.add(T.mul(k, self.widen(self.c[t][x])) for x, k in mult)

    def _values(self, t: int, c: int, cell: int) -> tuple[Term, Term, Term] | None:
        s = self.s
        slot = next((sl for sl in s.slots[s.rep[cell]] if sl.cand == c), None)
        if slot is None:
            return None
        coll = s.problem.candidates[c].collective
        g = s.group_of(c, slot.group)
        head = s.cell[g[0]]
        mult = s.cell_counts(g)
        n, cc, kn = self.n[t], self.c[t], self.known[t]
        if coll is BC:
            return n[head], cc[head], kn[head]
        if coll is RED and slot.rank > 0:
            return 0, 0, True
        all_known = T.and_(kn[x] for x, _ in mult)
        if coll is AG:
            same = T.all_equal([cc[x] for x, _ in mult])
            return T.mul(len(g), n[head]), cc[head], T.and_((all_known, same))
        union = self.union_c(t, mult)
        narrow = (
            union if T.is_const(union) or self.ac.kind == "int" else z3.Extract(self.ac.width - 1, 0, union)
        )
        q = self.quotient(t, c, slot.group) if coll is RS else n[head]
        return q, narrow, all_known

    def _step(self, t: int) -> None:
        cells = self.s.cells
        lifts = (self.an.lit, self.ac.lit, None)
        out: list[list[Term]] = [[], [], []]
        for cell in range(cells):
            orig = (self.n[t][cell], self.c[t][cell], self.known[t][cell])
            options: list[dict] = [{}, {}, {}]
            for c in range(len(self.s.problem.candidates)):
                new = self._values(t, c, cell)
                if new is None:
                    continue
                for i in range(3):
                    v = new[i]
                    if v is orig[i]:
                        continue
                    key = ("k", type(v).__name__, v) if T.is_const(v) else ("z", v.get_id())
                    options[i].setdefault(key, [v, []])[1].append(self.ch.x[t][c])
            for i in range(3 if self.contributions else 1):
                value = orig[i]
                for v, guards in options[i].values():
                    value = T.ite(T.or_(guards), v, value, lifts[i])
                out[i].append(value)
            if not self.contributions:
                out[1].append(orig[1])
                out[2].append(orig[2])
        self.n.append(out[0])
        self.c.append(out[1])
        self.known.append(out[2])

    def rules(self, t: int, c: int) -> Term:
        """Necessary conditions for choosing candidate ``c`` at step ``t``."""
        s = self.s
        coll = s.problem.candidates[c].collective
        out: list[Term] = []
        seen: set = set()
        n, cc, kn = self.n[t], self.c[t], self.known[t]
        for gi in range(len(s.cand_groups[c])):
            g = s.group_of(c, gi)
            head = s.cell[g[0]]
            mult = s.cell_counts(g)
            if (head, mult) in seen:
                continue
            seen.add((head, mult))
            cells = [x for x, _ in mult]
            known = T.and_(kn[x] for x in cells)
            if coll in (AR, RS, RED) and self.same_chunks:
                out.append(T.all_equal([n[x] for x in cells]))
            if coll in (AR, RS, RED) and self.contributions:
                out.append(T.implies(known, T.le(self.union_c(t, mult), s.k)))
            if coll is AG:
                out.append(T.all_equal([n[x] for x in cells]))
                out.append(T.le(n[head], self.chunks // len(g)))
            if coll is BC:
                if len(g) < 2:
                    return False
                others = [x for x in cells if x != head]
                out.append(T.and_(T.le(n[x], n[head]) for x in others))
                if not self.contributions:
                    continue
                # members in the root's cell have its counts: given member <= root they equal it
                out.append(T.implies(known, T.and_(T.le(cc[x], cc[head]) for x in others)))
                strict = T.or_(T.or_((T.lt(n[x], n[head]), T.lt(cc[x], cc[head]))) for x in others)
                out.append(T.implies(known, strict))
            elif self.require_progress:
                out.append(len(g) >= 2 and T.lt(0, n[head]))
        return T.and_(out)

    def goal(self) -> Term:
        last = self.ch.steps
        parts = []
        sharded = self.sharding is not None and self.sharding.kind == "reduce-scatter"
        for cell in range(self.s.cells):
            size = self.s.goal_size[self.s.rep[cell]]
            full = (self.chunks // self.sharding.shards if sharded else self.chunks) if size else 0
            if self.sharding is not None and self.sharding.kind == "all-gather":
                parts.append(T.eq(self.n[last][cell], full))  # one contribution per chunk, each its owner's
                if self.contributions and size:
                    parts += [self.known[last][cell], T.eq(self.c[last][cell], 1)]
                continue
            parts.append(T.eq(self.n[last][cell], full))
            if self.contributions and size:
                parts += [self.known[last][cell], T.eq(self.c[last][cell], size)]
        return T.and_(parts)


def equal_state_lemmas(s: Structure, ch: StepChoices, depth: int = 2) -> list[Term]:
    """Clauses excluding a Broadcast right after steps that leave all its members in the root's state.

    From any state, the last ``1..depth`` steps determine which devices certainly hold equal states:
    an AllReduce/AllGather group's members hold one union (two groups whose members were pairwise
    equal hold equal unions), Broadcast members hold the root's state, Reduce non-roots are empty,
    ReduceScatter members of rank i of pairwise-equal groups hold equal blocks. A Broadcast over a
    group of such equal devices adds nothing, so the sequence is invalid (in both semantics).
    """
    cands = s.problem.candidates
    bcast = [
        (c, s.group_of(c, gi))
        for c, cand in enumerate(cands)
        if cand.collective is BC
        for gi in range(len(s.cand_groups[c]))
        if len(s.group_of(c, gi)) >= 2
    ]
    if not bcast or depth < 1:
        return []

    def after(classes: tuple, c: int) -> tuple:
        new = list(classes)
        coll = cands[c].collective
        for gi, gid in enumerate(s.cand_groups[c]):
            g = s.groups[gid]
            members = tuple(sorted(classes[d] for d in g))
            for rank, d in enumerate(g):
                if coll in (AR, AG):
                    new[d] = ("union", members)
                elif coll is BC:
                    new[d] = classes[g[0]]
                elif coll is RED:
                    new[d] = ("reduce", members) if rank == 0 else ("empty",)
                else:
                    new[d] = ("block", members, rank)
        return tuple(new)

    out: list[Term] = []
    start = tuple(("device", d) for d in range(s.k))
    seqs = [((c,), after(start, c)) for c in range(len(cands))]
    for length in range(1, depth + 1):
        for seq, classes in seqs:
            done: set[int] = set()
            for cb, g in bcast:
                if cb in done or len({classes[d] for d in g}) != 1:
                    continue
                done.add(cb)  # one group that gains nothing fails the whole step
                if length > 1 and any(
                    len({cls[d] for d in g}) == 1 for cls in _suffix_classes(seq, after, start)
                ):
                    continue  # a shorter suffix already forbids it
                for t in range(length, ch.steps):
                    lits = [ch.x[t - length + i][c] for i, c in enumerate(seq)] + [ch.x[t][cb]]
                    out.append(T.or_(T.not_(v) for v in lits))
        if length < depth:
            seqs = [(seq + (c,), after(classes, c)) for seq, classes in seqs for c in range(len(cands))]
    return out


def _suffix_classes(seq, after, start):
    for i in range(1, len(seq)):
        classes = start
        for c in seq[i:]:
            classes = after(classes, c)
        yield classes


# ---------------------------------------------------------------------- tracks


@dataclass
class TrackState:
    """One step of a track: per device, chunk ``row`` non-empty, non-empty chunks below it, payload."""

    present: list[Term]
    below: list[Term]
    payload: list[Term]


class Payload(ABC):
    """What a track carries besides the row (subclasses: a contribution column, a data value)."""

    lift: Callable[[int], Term] | None = None

    @abstractmethod
    def initial(self, d: int) -> Term:
        """Device d's payload before the first step."""

    @abstractmethod
    def moved(
        self,
        coll: Collective,
        g: tuple[int, ...],
        rank: int,
        new_present: Term,
        state: TrackState,
        union: Callable[[], Term],
    ) -> Term:
        """The payload member ``rank`` of ``g`` receives; ``union()`` is the members' combination."""

    @abstractmethod
    def combine(self, coll: Collective, g: tuple[int, ...], state: TrackState) -> Term:
        """The members' payloads combined (union of contributions, sum of values)."""

    def rules(self, coll: Collective, g: tuple[int, ...], state: TrackState) -> list[tuple[str, Term]]:
        return []

    @abstractmethod
    def goal(self, d: int, value: Term) -> Term:
        """Device d's final payload ``value`` is what the reduction asks for."""

    @abstractmethod
    def differs(self, a: Term, b: Term, present_a: Term, present_b: Term) -> Term:
        """Two members' payloads differ (for the progress rule)."""

    def only(self, value: Term, contributor: int) -> Term:
        """The payload ``value`` is exactly device ``contributor``'s contribution (the AllGather goal, §6)."""
        raise P2Error(f"{type(self).__name__} payloads do not state the all-gather goal")

    def where(self, present: Term, value: Term) -> Term:
        """``value`` on a chunk that is ``present``, the empty payload elsewhere (the AllGather start, §6)."""
        raise P2Error(f"{type(self).__name__} payloads do not state the all-gather goal")


class BlankingPayload(Payload):
    """A payload whose emptied chunks hold an arbitrary value after every step (data values)."""

    @abstractmethod
    def blank(self, t: int, d: int) -> Term:
        """The arbitrary content of device d's chunk when a step ``t`` leaves it empty."""


class Semantics:
    """How one step acts on a track, given each device's chunk count before the step."""

    def __init__(
        self,
        s: Structure,
        payload: Payload,
        row: Term,
        arith: Arith,
        strict_rows: bool,
        chunks: int,
        forall_rows: bool = False,
    ):
        # forall_rows: the rules are only ever asked of every row at once (the checker), so the
        # consequences on counts of non-empty chunks below the row, implied by the per-row rules
        # holding on all rows, are left out
        self.forall_rows = forall_rows
        self.s = s
        self.chunks = chunks
        self.payload = payload
        self.row = row
        self.a = arith
        self.strict_rows = strict_rows
        self.sharding = s.problem.sharding

    def _shard(self, d: int) -> tuple[int, int]:
        """The first chunk of device d's shard and the shard's size ``b`` (docs/semantics.md §6)."""
        b = self.chunks // self.sharding.shards
        return self.sharding.rank[d] * b, b

    def _in_shard(self, d: int) -> Term:
        lo, b = self._shard(d)
        return T.and_((T.le(lo, self.row), T.lt(self.row, lo + b)))

    def initial(self) -> TrackState:
        k = self.s.k
        payload = [self.payload.initial(d) for d in range(k)]
        if self.sharding is not None and self.sharding.kind == "all-gather":  # d holds its own shard only
            below = [T.clamp(T.sub(self.row, self._shard(d)[0]), 0, self._shard(d)[1], self.a.lit) for d in range(k)]
            present = [self._in_shard(d) for d in range(k)]
            if isinstance(self.payload, BlankingPayload):  # an empty chunk holds an arbitrary value from the start
                held = [T.ite(p, v, self.payload.blank(0, d), self.payload.lift)
                        for d, (p, v) in enumerate(zip(present, payload))]
            else:
                held = [self.payload.where(p, v) for p, v in zip(present, payload)]
            return TrackState(present, below, held)
        return TrackState([True] * k, [self.row] * k, payload)

    def step(
        self,
        state: TrackState,
        options: Sequence[tuple[Term, int]],
        count: Callable[[int], Term],
        quotient: Callable[[int, int], Term],
        t: int = 0,
    ) -> TrackState:
        """The state after step ``t`` when candidate ``c`` runs under ``guard`` for each ``(guard, c)`` in
        ``options`` (at most one guard holds; none: STOP)."""
        s = self.s
        present, below, payload = list(state.present), list(state.below), list(state.payload)
        unions: dict[tuple[int, Collective], Term] = {}
        for guard, c in reversed(options):
            coll = s.problem.candidates[c].collective
            done: set[int] = set()
            for gi, gid in enumerate(s.cand_groups[c]):
                if gid in done:  # a quotient maps several groups to one
                    continue
                done.add(gid)
                g = s.groups[gid]
                key = (gid, coll)

                def union(g=g, key=key, coll=coll):
                    if key not in unions:
                        unions[key] = self.payload.combine(coll, g, state)
                    return unions[key]

                q = quotient(c, gi) if coll is RS else None
                gathered = self._gathered(g, state) if coll is AG else None
                for rank, d in enumerate(g):
                    p, b = gathered or self._row_after(coll, g, rank, state, q)
                    v = self.payload.moved(coll, g, rank, p, state, union)
                    present[d] = T.ite(guard, p, present[d])
                    below[d] = T.ite(guard, b, below[d], self.a.lit)
                    payload[d] = T.ite(guard, v, payload[d], self.payload.lift)
        if isinstance(self.payload, BlankingPayload):  # every empty chunk: an arbitrary value after each step
            for d in range(s.k):
                payload[d] = T.ite(present[d], payload[d], self.payload.blank(t + 1, d), self.payload.lift)
        return TrackState(present, below, payload)

    @staticmethod
    def _gathered(g: tuple[int, ...], st: TrackState) -> tuple[Term, Term]:
        """What every member of an AllGather group holds at the row (built once for all members)."""
        return T.or_(st.present[d] for d in g), T.add(st.below[d] for d in g)

    def _row_after(self, coll: Collective, g: tuple[int, ...], rank: int, st: TrackState, q: Term):
        p, b = st.present, st.below
        head = g[0]
        if coll in (AR, BC):
            return p[head], b[head]
        if coll is RED:
            return (p[head], b[head]) if rank == 0 else (False, 0)
        if coll is AG:
            return self._gathered(g, st)
        bh = b[head]
        if T.is_const(bh) and bh == 0:  # the first non-empty chunk opens block 0
            return (T.and_((p[head], T.lt(0, q))) if rank == 0 else False), 0
        lo = T.mul(rank, q)
        inside = T.and_((p[head], T.le(lo, bh), T.lt(bh, T.add((lo, q)))))
        return inside, T.clamp(T.sub(bh, lo), 0, q, self.a.lit)

    def rules(self, st: TrackState, c: int, gi: int, count: Callable[[int], Term]) -> list[tuple[str, Term]]:
        """The ∀-preconditions of candidate ``c``'s group ``gi`` on this track, in rule order."""
        s = self.s
        coll = s.problem.candidates[c].collective
        g = s.group_of(c, gi)
        p = [st.present[d] for d in g]
        b = [st.below[d] for d in g]
        n = [count(d) for d in g]
        found: dict[str, list[Term]] = {}

        def add(name: str, cond: Term) -> None:
            found.setdefault(name, []).append(cond)

        if coll in (AR, RS, RED) and self.strict_rows:
            same_below = True if self.forall_rows else T.all_equal(b)
            add("same_chunks", T.and_((T.all_equal(n), T.all_equal(p), same_below)))
        if coll is RS and T.is_const(n[0]):
            add("divisible", n[0] % len(g) == 0)
        if coll is AG:
            below = True if self.forall_rows else T.le(T.add(b), self.row)
            add("disjoint_chunks", T.and_((T.at_most_one(p), below, T.le(T.add(n), self.chunks))))
            add("equal_sizes", T.all_equal(n))
        if coll is BC:  # rows: a member chunk the root lacks would be overwritten (lost)
            add(
                "below_root",
                T.and_(
                    T.and_((T.implies(v, p[0]), self.forall_rows or T.le(w, b[0]), T.le(m, n[0])))
                    for v, w, m in zip(p[1:], b[1:], n[1:])
                ),
            )
        for name, cond in self.payload.rules(coll, g, st):
            add(name, cond)
        return [(name, T.and_(found[name])) for name in RULE_ORDER if name in found]

    def goal(self, st: TrackState) -> Term:
        """Every device holds chunk ``row`` with exactly its goal group's payload (devices outside every
        goal group end empty)."""
        parts = []
        kind = self.sharding.kind if self.sharding is not None else None
        for d in range(self.s.k):
            if not self.s.goal_size[d]:
                parts.append(T.not_(st.present[d]))
            elif kind == "reduce-scatter":  # d's shard holds the group's payload, every other chunk is empty
                inside = self._in_shard(d)
                parts.append(T.and_((T.eq(st.present[d], inside),
                                     T.implies(inside, self.payload.goal(d, st.payload[d])))))
            elif kind == "all-gather":  # chunk r holds the contribution of the member whose shard r is
                owners = self.sharding.owners(self._goal_group(d), self.chunks)
                parts.append(T.and_((st.present[d], T.and_(
                    T.implies(T.eq(self.row, r), self.payload.only(st.payload[d], o)) for r, o in enumerate(owners)))))
            else:
                parts.append(T.and_((st.present[d], self.payload.goal(d, st.payload[d]))))
        return T.and_(parts)

    def _goal_group(self, d: int) -> tuple[int, ...]:
        return next(tuple(g) for g in self.s.problem.goal_groups if d in g)

    def differs(self, st: TrackState, g: tuple[int, ...]) -> Term:
        """Some member's state differs from the root's on this track (Broadcast's information increase)."""
        p, v = st.present, st.payload
        root = g[0]
        return T.or_(
            T.or_((T.not_(T.eq(p[d], p[root])), self.payload.differs(v[d], v[root], p[d], p[root])))
            for d in g[1:]
        )
