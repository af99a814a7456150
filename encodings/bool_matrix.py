"""bool-matrix: the device-state matrix of Booleans (docs/semantics.md §4), the default encoding.

Cell ``s[t][d][r][c]`` — device d's chunk r holds device c's contribution after t steps — is a
Boolean term of the step choices. The synthesizer (one incremental solver) keeps, per cell of the
problem's stable partition, each device's number of non-empty chunks and of contributions per chunk
with the Hoare rules' consequences on them (its size does not grow with the devices), and the full
cell tracks (every device, every step) of a few cells: cell (chunk 0, device 0) up front
(``cells``), then each cell the checker names (``refine="witness"``; ``"prefix"`` blocks the failing
prefix instead). A chunk-0 track is followed on one device per cell of a stable partition that
singles out its column (``quotient``): its values are equal on the devices of such a cell. The
checker proves candidates (a batch per query) on *every* cell at once: by default over a symbolic
chunk whose contributions form one k-bit mask (``checker="mask"``, every column at once), or over a
symbolic cell (chunk and contribution as Z3 variables; also used to name a failing cell). So every
reported program is valid and, since each constraint is a necessary condition of validity, every
valid program is reported.
``cells="all"`` constrains every cell up front: the literal unrolled matrix (small problems only).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from p2smt.model.collectives import AG, AR, BC, RED, RS
from p2smt.model.problem import SynthesisProblem
from p2smt.smt import terms as T
from p2smt.smt.base import EncodingOptions, EncodingSpec
from p2smt.smt.lazy import CheckedEncoding
from p2smt.smt.structure import Quotient
from p2smt.smt.unroll import Payload, TrackState


class BoolMatrixOptions(EncodingOptions):
    refine: Literal["witness", "prefix"] = Field(
        "witness",
        description="refute a failing candidate by constraining the failing cell or by blocking its prefix",
    )
    cells: Literal["none", "first", "corners", "all"] = Field(
        "first", description="cells constrained up front: none, (chunk 0, device 0), four corners, or all"
    )
    weights: bool = Field(True, description="constrain per-device contribution counts (necessary conditions)")
    lemma_depth: int = Field(
        1, ge=0, le=3, description="Broadcasts excluded after up to this many steps that equalize its members"
    )
    quotient: bool = Field(
        True, description="follow chunk-0 witness tracks on one device per cell of a stable partition"
    )
    checker: Literal["mask", "column"] = Field(
        "mask",
        description="prove candidates on a symbolic chunk with all columns in one bit mask, or on a cell",
    )
    arithmetic: Literal["bv", "int"] = Field("bv", description="counts as signed bit-vectors or integers")


TRACK_BYTES = 50
"""Peak bytes per candidate, device and chunk per step of the synthesizer and the mask checker: their size
hardly grows with the devices (103, 107 and 109 MB measured at 32, 48 and 64 devices, length 4)."""
CELL_BYTES = 3_400
"""Peak bytes per candidate and cell per step with ``cells="all"`` (the literal matrix): 0.38 GB at 16 devices
(5 candidates), length 4; at 32 devices it ran past 300 s (docs/usage.md, "The Z3 encodings' memory")."""


def footprint(problem: SynthesisProblem, max_len: int, options: BoolMatrixOptions) -> int:
    """Estimated peak bytes: the synthesizer's per-cell counts and the checker's device masks, or with
    ``cells="all"`` every cell of the unrolled matrix (devices × chunks × contributions per step)."""
    k, n = problem.num_devices, len(problem.candidates)
    per_step = CELL_BYTES * k ** 3 if options.cells == "all" else TRACK_BYTES * k * k
    return int(max_len * n * per_step)


class Column(Payload):
    """The payload of a cell track: whether the chunk holds contribution ``column``."""

    def __init__(self, column, member_of):
        self.column = column
        self.member_of = member_of  # d -> term: ``column`` is in d's goal group

    def initial(self, d: int):
        return T.eq(self.column, d)

    def combine(self, coll, g, state: TrackState):
        return T.or_(state.payload[d] for d in g)

    def moved(self, coll, g, rank, new_present, state, union):
        if coll in (AR, AG):
            return union()
        if coll is RS:
            return T.and_((new_present, union()))
        if coll is RED:
            return union() if rank == 0 else False
        return state.payload[g[0]]

    def rules(self, coll, g, state):
        h = [state.payload[d] for d in g]
        if coll in (AR, RS, RED):
            return [("disjoint", T.at_most_one(h))]
        if coll is BC:
            return [("below_root", T.and_(T.implies(v, h[0]) for v in h[1:]))]
        return []

    def goal(self, d: int, value):
        return T.eq(value, self.member_of(d))

    def only(self, value, contributor: int):
        return T.eq(value, T.eq(self.column, contributor))

    def where(self, present, value):
        return T.and_((present, value))

    def differs(self, a, b, present_a, present_b):
        return T.not_(T.eq(a, b))


class Mask(Column):
    """Every column of one chunk at once as an integer bit mask (fixed plans, concrete row: reports)."""

    def __init__(self):
        super().__init__(None, None)

    def initial(self, d: int):
        return 1 << d

    def only(self, value, contributor: int):
        return T.eq(value, 1 << contributor)

    def where(self, present, value):
        return value if present else 0  # a concrete chunk

    def combine(self, coll, g, state):
        out = 0
        for d in g:
            out |= state.payload[d]
        return out

    def moved(self, coll, g, rank, new_present, state, union):
        if coll in (AR, AG):
            return union()
        if coll is RS:
            return union() if new_present else 0
        if coll is RED:
            return union() if rank == 0 else 0
        return state.payload[g[0]]


class RowMask(Payload):
    """Every column of the (symbolic) chunk at once as a k-bit vector: contribution c is bit c.

    Columns are concrete, so only the row is searched for: the checker's proofs use it.
    """

    def __init__(self, k: int, ctx, goal_masks: list[int]):
        self.k = k
        self.goal_masks = goal_masks
        self.lift = T.Numerals(k, ctx)

    def _term(self, v):
        return self.lift(v) if T.is_const(v) else v

    def _or(self, a, b):
        if T.is_const(a) and T.is_const(b):
            return a | b
        if (T.is_const(a) and a == 0) or b is a:
            return b
        if T.is_const(b) and b == 0:
            return a
        return T.bv_or(self._term(a), self._term(b))

    def _and(self, a, b):
        if T.is_const(a) and T.is_const(b):
            return a & b
        if (T.is_const(a) and a == 0) or (T.is_const(b) and b == 0):
            return 0
        return T.bv_and(self._term(a), self._term(b))

    def _zero(self, v):
        return v == 0 if T.is_const(v) else T.eq(v, self.lift(0))

    def initial(self, d: int):
        return 1 << d

    def combine(self, coll, g, state: TrackState):
        out = 0
        for d in g:
            out = self._or(out, state.payload[d])
        return out

    def moved(self, coll, g, rank, new_present, state, union):
        if coll in (AR, AG):
            return union()
        if coll is RS:
            return T.ite(new_present, union(), 0, self.lift)
        if coll is RED:
            return union() if rank == 0 else 0
        return state.payload[g[0]]

    def rules(self, coll, g, state):
        h = [state.payload[d] for d in g]
        if coll in (AR, RS, RED):  # no contribution in two members: the union so far never meets the next
            conds, acc = [], 0
            for v in h:
                conds.append(self._zero(self._and(acc, v)))
                acc = self._or(acc, v)
            return [("disjoint", T.and_(conds))]
        if coll is BC:
            root = h[0]
            inv = ~root if T.is_const(root) else T.bv_not(root)
            return [("below_root", T.and_(self._zero(self._and(v, inv)) for v in h[1:]))]
        return []

    def goal(self, d: int, value):
        mask = self.goal_masks[d]
        return T.eq(value, mask) if T.is_const(value) else T.eq(value, self.lift(mask))

    def only(self, value, contributor: int):
        mask = 1 << contributor
        return T.eq(value, mask) if T.is_const(value) else T.eq(value, self.lift(mask))

    def where(self, present, value):
        return T.ite(present, value, 0, self.lift)

    def differs(self, a, b, present_a, present_b):
        if T.is_const(a) and T.is_const(b):
            return a != b
        return T.not_(T.eq(self._term(a), self._term(b)))


def row_mask_payload(checker):
    """The checker's symbolic chunk with every column at once (no column variable)."""
    k = checker.k
    masks = [0] * k
    for g in checker.problem.goal_groups:
        m = 0
        for d in g:
            m |= 1 << d
        for d in g:
            masks[d] = m
    return RowMask(k, checker.ctx, masks), [], []


def _members(problem: SynthesisProblem, column):
    owner = {d: i for i, g in enumerate(problem.goal_groups) for d in g}
    if isinstance(column, int):
        return lambda d: owner.get(d) is not None and owner.get(d) == owner.get(column)
    by_group = {i: T.or_(column == d for d in g) for i, g in enumerate(problem.goal_groups)}
    return lambda d: by_group[owner[d]] if d in owner else False


def column_payload(checker):
    """The checker's symbolic cell column (with its domain)."""
    column = checker.arith.var("column")
    payload = Column(column, _members(checker.problem, column))
    return payload, [("column", column)], [0 <= column, column < checker.k]


class BoolMatrixEncoding(CheckedEncoding):
    name = "bool-matrix"

    def payload_factory(self):
        return column_payload

    def proof_checker(self):
        if self.options.checker == "mask":
            return self.new_checker(payload=row_mask_payload, arith="bv", logic="QF_FD")
        return self.new_checker()

    def mask_payload(self):
        """All contributions of a chunk as one bit mask, for reporting the states of a fixed plan."""
        return Mask()

    def witness_payload(self, witness):
        row, column = witness
        return row, Column(column, _members(self.problem, column))

    def witness_view(self, witness):
        row, column = witness
        if row != 0 or not self.options.quotient or self.problem.sharding is not None:
            return None  # a shard rank tells the devices of a cell apart (§6): every device is followed
        # chunk 0 is never below another chunk: its track depends on a device's role (root or not)
        # and the members' cells only, so it is equal on the devices of a cell that singles out column
        view = Quotient(self.s, column)
        return view, Column(view.device, view.same_goal.__getitem__)

    def witness_of(self, found):
        return (found["chunk"], found["column"])

    def initial_witnesses(self):
        k, chunks = self.problem.num_devices, self.chunks
        if self.options.cells == "all":
            return [(r, c) for r in range(chunks) for c in range(k)]
        if self.options.cells == "corners":
            return list(dict.fromkeys([(0, 0), (chunks - 1, k - 1), (chunks - 1, 0), (0, k - 1)]))
        if self.options.cells == "first":
            return [(0, 0)]  # chunk 0 lies below every other chunk: its track needs no rank arithmetic
        return []


ENCODING = EncodingSpec(
    name="bool-matrix",
    description="device-state matrix of Booleans; every candidate proved on all cells by a symbolic cell",
    options=BoolMatrixOptions,
    factory=lambda problem, max_len, options: BoolMatrixEncoding(problem, max_len, options),
    footprint=footprint,
)
