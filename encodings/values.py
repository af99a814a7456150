"""values: every device chunk holds a symbolic integer; correct iff every device ends with its group's sum.

Data movement follows docs/semantics.md §4 chunk by chunk. An *empty* chunk (one a rule left without
contributions) holds an arbitrary value — whatever its buffer happens to contain — and a program is
correct iff for all inputs *and all contents of empty chunks* every device ends holding every chunk
with the sum of its goal group's inputs for that chunk:

* AllReduce, ReduceScatter and Reduce run over the first member's (the root's) non-empty chunks and
  add the members' values element-wise, empty ones included. So ReduceScatter then AllReduce over the
  same pair adds what the other member's emptied half holds to a reduced chunk, and two overlapping
  AllReduces add a value twice: both end with a wrong sum on a concrete input. ReduceScatter keeps
  block i of those chunks on member i (their number must divide); Reduce empties non-roots.
* AllGather: members hold disjoint chunks of equal number (buffer shapes); every member receives the
  holder's value of each chunk.
* Broadcast copies the root's chunks and values. It must not discard data: no member may hold a chunk
  the root lacks, and for every non-negative input each member's value is at most the root's (a member
  holds a sub-sum of the root's sum: P²'s s_i <= s_0 read on values). It must change some member (some
  present value differs for some input, or a chunk's presence differs).

With ``require_progress`` a non-Broadcast group's root must hold a chunk. Values are linear in the
inputs and contents for a fixed program and chunk, so checking inputs and contents in 0..9 is exact.
The synthesizer constrains a growing set of examples (chunk, inputs, contents); the checker proves a
candidate for all of them at once or returns a counterexample that becomes a new example (CEGIS).
Sharded goals (docs/semantics.md §6): a ReduceScatter/HSDP device ends with the sum on its shard's chunks and
the others empty; an AllGather device starts with its input on its shard's chunks (the others empty, holding
arbitrary contents) and ends with chunk r holding its owner's input.
"""

from __future__ import annotations

from typing import Literal

import z3
from pydantic import Field

from p2smt.model.collectives import AG, AR, BC, RED, RS
from p2smt.model.problem import SynthesisProblem
from p2smt.smt import terms as T
from p2smt.smt.base import EncodingOptions, EncodingSpec
from p2smt.smt.lazy import CheckedEncoding
from p2smt.smt.unroll import BlankingPayload, TrackState

INPUT_MAX = 9


class ValuesOptions(EncodingOptions):
    refine: Literal["witness", "prefix"] = Field(
        "witness", description="witness: add the counterexample input as an example (CEGIS); prefix: block"
    )
    seed: Literal["none", "ones", "generic"] = Field(
        "ones",
        description="first example: none, all inputs 1 on chunk 0, or distinct powers of two on chunk 0",
    )
    lemma_depth: int = Field(
        3, ge=0, le=3, description="Broadcasts excluded after up to this many steps that equalize its members"
    )
    arithmetic: Literal["bv", "int"] = Field(
        "bv", description="chunk counts as signed bit-vectors or integers"
    )


class Value(BlankingPayload):
    """A chunk's data value; ``inputs[d]`` is device d's input for this chunk and ``contents[(t, d)]``
    what device d's chunk holds when step t leaves it empty (symbolic or concrete)."""

    def __init__(
        self, inputs, contents, groups: dict[int, tuple[int, ...]], ctx: z3.Context, width: int | None = None
    ):
        self.inputs = list(inputs)
        self.contents = contents
        self.groups = groups
        if width is None:
            self.lift = lambda v: z3.IntVal(v, ctx)
        else:
            self.lift = lambda v: z3.BitVecVal(v, width, ctx)

    def blank(self, t: int, d: int):
        return self.contents[(t, d)]

    def initial(self, d: int):
        return self.inputs[d]

    def combine(self, coll, g, state: TrackState):
        if coll is AG:
            return T.add(T.ite(state.present[d], state.payload[d], 0, self.lift) for d in g)
        return T.add(state.payload[d] for d in g)

    def moved(self, coll, g, rank, new_present, state, union):
        if coll in (AR, RS, AG):
            return union()  # the step replaces the value of a chunk it leaves empty by a blank
        if coll is RED:
            return union() if rank == 0 else state.payload[g[rank]]
        return state.payload[g[0]]

    def rules(self, coll, g, state):
        if coll is not BC:
            return []
        root = state.payload[g[0]]
        return [
            ("below_root", T.and_(T.implies(state.present[d], T.le(state.payload[d], root)) for d in g[1:]))
        ]

    def goal(self, d: int, value):
        return T.eq(value, T.add(self.inputs[j] for j in self.groups.get(d, ())))

    def differs(self, a, b, present_a, present_b):
        return T.and_((present_b, T.not_(T.eq(a, b))))

    def only(self, value, contributor: int):
        return T.eq(value, self.inputs[contributor])


def _groups(problem: SynthesisProblem) -> dict[int, tuple[int, ...]]:
    return {d: tuple(g) for g in problem.goal_groups for d in g}


def blank_slots(problem: SynthesisProblem, steps: int) -> list[tuple[int, int]]:
    """Every (step, device) whose emptied chunk content is a free value; step 0 too under the AllGather goal,
    whose devices start with the chunks of other shards empty (docs/semantics.md §6)."""
    sh = problem.sharding
    first = 0 if sh is not None and sh.kind == "all-gather" else 1
    return [(t, d) for t in range(first, steps + 1) for d in range(problem.num_devices)]


def _domain(v):
    return z3.And(0 <= v, v <= INPUT_MAX)


class LazyBlanks(dict):
    """The checker's empty-chunk contents, each declared (with its domain) when a step first reads it, so
    a long plan's declarations are spread over the steps the proof's clock checks between; a content no
    formula reads is not a variable (witnesses give it 0)."""

    def __init__(self, checker):
        super().__init__()
        self.checker = checker

    def __missing__(self, key: tuple[int, int]):
        t, d = key
        v = self[key] = z3.Int(f"c_blank_{t}_{d}", self.checker.ctx)
        self.checker.declare(f"blank_{t}_{d}", v, _domain(v))
        return v


def input_payload(checker):
    """The checker's symbolic inputs and (lazily declared) empty-chunk contents, in 0..INPUT_MAX."""
    xs = [z3.Int(f"c_input_{d}", checker.ctx) for d in range(checker.k)]
    payload = Value(xs, LazyBlanks(checker), _groups(checker.problem), checker.ctx)
    names = [(f"input_{d}", x) for d, x in enumerate(xs)]
    return payload, names, [_domain(x) for x in xs]


ROW_BYTES = 3_000
"""Peak bytes per candidate, device and chunk per step (the value tracks of the counterexamples and the
checker): 0.25 GB of Z3 memory at 32 devices and 0.30 GB at 48 (20 candidates, length 4; docs/usage.md)."""


def footprint(problem: SynthesisProblem, max_len: int, options: ValuesOptions) -> int:
    """Estimated peak bytes of the CEGIS loop: value tracks over every device and chunk, per step and candidate."""
    k = problem.num_devices
    return int(ROW_BYTES * max_len * len(problem.candidates) * k * k)


class ValuesEncoding(CheckedEncoding):
    """Examples are tracked with bit-vector values wide enough for every correct program's sums (a
    wrap-around can only let a wrong candidate through, which the checker, over integers, refutes)."""

    name = "values"
    strict_rows = False

    def payload_factory(self):
        return input_payload

    def concrete_payload(self, inputs, contents):
        """A payload with concrete inputs and contents (a fixed plan evaluates to Python integers)."""
        return Value(inputs, contents, _groups(self.problem), self.context)

    def witness_payload(self, witness):
        row, inputs, blanks = witness
        contents = dict(zip(blank_slots(self.problem, self.max_len), blanks))
        # a correct program's values that rules or the goal read are sums of inputs: they fit
        width = (sum(inputs) + max(blanks, default=0) + 1).bit_length() + 2
        return row, Value(inputs, contents, _groups(self.problem), self.context, width)

    def witness_of(self, found):
        k = self.problem.num_devices
        blanks = tuple(found.get(f"blank_{t}_{d}", 0) for t, d in blank_slots(self.problem, self.max_len))
        return (found["chunk"], tuple(found[f"input_{d}"] for d in range(k)), blanks)

    def initial_witnesses(self):
        k = self.problem.num_devices
        zeros = (0,) * len(blank_slots(self.problem, self.max_len))
        if self.options.seed == "ones":
            return [(0, (1,) * k, zeros)]
        if self.options.seed == "generic":
            return [(0, tuple(1 << d for d in range(k)), zeros)]
        return []

    def statistics(self):
        """The CEGIS figures under their usual names: checker rounds and counterexample inputs."""
        out = super().statistics()
        return {**out, "cegis_iterations": out["checks"], "counterexamples": out["witnesses"]}


ENCODING = EncodingSpec(
    name="values",
    description="symbolic data values per chunk; CEGIS over counterexample inputs (stale buffers kept)",
    options=ValuesOptions,
    factory=lambda problem, max_len, options: ValuesEncoding(problem, max_len, options),
    footprint=footprint,
)
