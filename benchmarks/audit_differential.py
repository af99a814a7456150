"""Differential of the step audit: random JAX shard_map programs with mixed chains, judged by their numbers.

Each program (seeded, deterministic) is a pytree of outputs on a 2-axis mesh of 16 CPU devices (4 x 4, 2 x 8
or 8 x 2, sometimes in a permuted device order). Every output is a chain of ops on a 2-D value: matmuls
(column-parallel, row-parallel, both), sums over a dimension (sharded or not), scalings, transposes, biases,
nonlinearities (ReLU, abs), values also returned mid-chain, and the collectives that keep it right: psum over
one axis or both, nested psums, psum_scatter + all_gather pairs, BlueConnect, a psum_scatter that keeps its
result sharded, a fori_loop adding a psum each trip, an axis_index dynamic_slice (a reshard), an all_gather;
some programs are pytrees of gradient-like partial sums reduced by one psum of the tuple. A third of the
programs carry one deliberate bug, the classes in turn (a dropped psum, a psum or all_gather over the wrong
axis, a nonlinearity or a bias before the psum, an extra psum or an accumulator summed in its loop, swapped
outputs, a sum left sharded after an axis_index slice, a slice of another device's block, a partial sum
returned). The reference is the intended global math in numpy (every collective is the identity on the
global value); the inputs are distinct integers (the first input of each chain) and small integers
(weights), bounded so that every float32 sum of a right program is exact. Ground truth: the program
run on the devices equals the reference exactly, or not.

For each program the script writes ``NNN.mlir`` (StableHLO) and ``NNN.hlo`` (compiled HLO) into ``--out``,
and, when ``p2smt.audit`` is importable, audits it three ways (the function, its StableHLO, its compiled
HLO) and tabulates wrong PROVED, wrong findings, the refusal rate of correct programs and the agreement of
the three ways. ``programs.json`` and ``summary.json`` hold every row.

    python benchmarks/audit_differential.py --out /tmp/audit-diff              # 300 programs
    python benchmarks/audit_differential.py --out /tmp/d --count 20 --no-audit
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import jax_steps as js  # starts JAX with 16 host devices
from jax_steps import Finding, P, jax, jnp, np

AXIS_NAMES = (("data", "tensor"), ("node", "gpu"), ("x", "y"))
MESHES = ((4, 4), (4, 4), (4, 4), (2, 8), (8, 2))  # devices along each mesh axis (16 in all)
EXACT = 2**20  # bound on every intermediate (x16 for a bug's over-count stays below 2**24: exact in float32)


class Kind(Enum):
    """One op of a chain; the collectives are the identity on the global value."""

    MATMUL = "matmul"
    SUM = "sum"
    SCALE = "scale"
    BIAS = "bias"
    RELU = "relu"
    ABS = "abs"
    PSUM = "psum"
    NESTED = "nested-psum"
    RS_AG = "psum_scatter+all_gather"
    BLUECONNECT = "blueconnect"
    RS_KEEP = "psum_scatter"
    SLICE = "axis_index-slice"
    GATHER = "all_gather"
    TRANSPOSE = "transpose"
    LOOP = "fori_loop"  # acc += psum(v) VALUE times: VALUE x the sum (a collective in a loop of known trip count)
    TAP = "output"  # the value here is also an output (a fork: the chain goes on)


REDUCE = {Kind.PSUM, Kind.NESTED, Kind.RS_AG, Kind.BLUECONNECT, Kind.LOOP}  # a partial sum over axes made whole in place


@dataclass(frozen=True)
class Op:
    kind: Kind
    axes: tuple[str, ...] = ()  # the collective's axes, in order (RS_AG: scatter axis first)
    dim: int = 0
    param: str = ""  # the input a MATMUL or BIAS reads
    value: int = 0  # SCALE's factor
    gather: str = ""  # RS_AG's all_gather axis (its scatter axis, unless a bug)
    joint: bool = False  # a PSUM run as one psum of the tuple of every leaf's joint op
    out: State | None = None  # TAP: the output's declared state
    shift: int = 0  # SLICE: takes block (axis_index + shift) mod the axis size (another device's, unless 0)
    inside: bool = False  # LOOP: the accumulator itself summed each trip (acc = psum(acc + v)): a bug

    def label(self) -> str:
        extra = f" {self.param}" if self.param else f" x{self.value}" if self.kind in (Kind.SCALE, Kind.LOOP) else ""
        extra += " (accumulator summed)" if self.inside else ""
        axes = f" {','.join(self.axes)}" if self.axes else ""
        gather = f" gather {self.gather}" if self.gather and self.gather != self.axes[0] else ""
        gather += f" block +{self.shift}" if self.shift else ""
        dim = f" dim {self.dim}" if self.kind in DIMMED else ""
        return f"{self.kind.value}{axes}{gather}{extra}{dim}" + (" (of the tuple)" if self.joint else "")


DIMMED = {Kind.SUM, Kind.RS_AG, Kind.BLUECONNECT, Kind.RS_KEEP, Kind.SLICE, Kind.GATHER}


@dataclass(frozen=True)
class State:
    """What a value is: its global shape, the axes each dimension is sharded over (major first), the axes it
    is a partial sum over."""

    shape: tuple[int, int]
    spec: tuple[tuple[str, ...], tuple[str, ...]]
    partial: frozenset[str] = frozenset()
    sizes: tuple[tuple[str, int], ...] = ()  # the mesh: each axis's name and size

    def size(self, axes) -> int:
        sizes = dict(self.sizes)
        return int(np.prod([sizes[a] for a in axes], dtype=int))

    def local(self, d: int) -> int:
        return self.shape[d] // self.size(self.spec[d])

    def splits(self, d: int, axes) -> bool:
        """Can dimension ``d``'s block be cut into equal pieces along ``axes``?"""
        return self.local(d) % self.size(axes) == 0

    def used(self) -> set[str]:
        return set(self.spec[0]) | set(self.spec[1]) | set(self.partial)

    def with_dim(self, d: int, axes: tuple[str, ...], size: int | None = None) -> tuple:
        spec = list(self.spec)
        spec[d] = axes
        shape = list(self.shape)
        if size is not None:
            shape[d] = size
        return tuple(shape), tuple(spec)


def pspec(spec: tuple[tuple[str, ...], ...]) -> P:
    return P(*[None if not a else a[0] if len(a) == 1 else a for a in spec])


@dataclass
class Program:
    index: int
    names: tuple[str, str]
    shape: tuple[int, int]
    order: tuple[int, ...]
    inputs: dict[str, np.ndarray] = field(default_factory=dict)
    in_specs: dict[str, P] = field(default_factory=dict)
    leaves: list[list[Op]] = field(default_factory=list)
    starts: list[str] = field(default_factory=list)  # each leaf's first input
    outs: list[State] = field(default_factory=list)
    swap: tuple[int, int] | None = None
    bug: Finding | None = None

    @property
    def joint(self) -> list[int]:
        """The leaves reduced together by one psum of their tuple."""
        return [i for i, ops in enumerate(self.leaves) if any(op.joint for op in ops)]

    @property
    def taps(self) -> list[State]:
        """The declared states of the values also returned mid-chain (leaf by leaf, in op order)."""
        return [op.out for ops in self.leaves for op in ops if op.kind is Kind.TAP]

    @property
    def sizes(self) -> tuple[tuple[str, int], ...]:
        return tuple(zip(self.names, self.shape, strict=True))

    def describe(self) -> list[str]:
        return [f"{self.starts[i]}: " + "; ".join(op.label() for op in ops) for i, ops in enumerate(self.leaves)]


class Gen:
    """Draws one program from a seeded generator."""

    def __init__(self, rng: np.random.Generator, prog: Program):
        self.rng, self.p = rng, prog

    def pick(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def add_input(self, stem: str, value: np.ndarray, spec: tuple) -> str:
        name = f"{stem}{len(self.p.inputs)}"
        self.p.inputs[name] = value
        self.p.in_specs[name] = pspec(spec)
        return name

    def start(self, contraction_sharded: bool = False) -> State:
        a, b = self.p.names
        specs = [((), (a,)), ((), (b,)), ((a,), (b,)), ((b,), (a,)), ((), (a, b)), ((), (a,)), ((b,), (a,)),
                 ((), (b, a))]
        if not contraction_sharded:
            specs += [((a,), ()), ((), ()), ((a, b), ())]
        rows, cols = self.pick(specs)
        blank = State((1, 1), ((), ()), sizes=self.p.sizes)
        shape = tuple(self.pick([4, 8]) * blank.size(s) for s in (rows, cols))
        name = self.add_input("x", js.distinct(shape, int(self.rng.integers(-8, 9))), (rows, cols))
        self.p.starts.append(name)
        return State(shape, (rows, cols), sizes=self.p.sizes)

    def free(self, s: State) -> list[str]:
        return [a for a in self.p.names if a not in s.used()]

    def options(self, s: State) -> list[tuple[Kind, int]]:
        """The ops that keep the chain right from state ``s``, with weights."""
        opts = [(Kind.MATMUL, 6 if s.spec[1] and not s.partial else 3), (Kind.SUM, 2 if s.spec[0] else 1),
                (Kind.SCALE, 1), (Kind.TRANSPOSE, 1)]
        if not s.partial:
            opts += [(Kind.BIAS, 1), (Kind.RELU, 1), (Kind.ABS, 1), (Kind.TAP, 1)]
        else:
            opts += [(Kind.PSUM, 3), (Kind.NESTED, 1), (Kind.RS_AG, 2), (Kind.BLUECONNECT, 1), (Kind.RS_KEEP, 1),
                     (Kind.LOOP, 2)]
        if any(s.splits(d, (a,)) for d in (0, 1) for a in self.free(s)):
            opts.append((Kind.SLICE, 1))
        if s.spec[0] or s.spec[1]:
            opts.append((Kind.GATHER, 1))
        return opts

    def op(self, s: State, kind: Kind) -> tuple[Op, State] | None:
        """A right op of ``kind`` from ``s`` and the state after it, or None when it does not apply."""
        rng = self.rng
        if kind is Kind.MATMUL:
            wc = self.pick([(), *[(a,) for a in self.free(s)]])  # output columns sharded over a free axis
            k = self.pick([4, 8]) * s.size(wc)
            w = js.small_ints((s.shape[1], k), int(rng.integers(1 << 30)))
            name = self.add_input("w", w, (s.spec[1], wc))
            return Op(kind, param=name), replace(s, shape=(s.shape[0], k), spec=(s.spec[0], wc),
                                                 partial=s.partial | set(s.spec[1]))
        if kind is Kind.SUM:
            d = int(rng.integers(2))
            shape, spec = s.with_dim(d, (), 1)
            return Op(kind, dim=d), replace(s, shape=shape, spec=spec, partial=s.partial | set(s.spec[d]))
        if kind is Kind.SCALE:
            return Op(kind, value=self.pick([-2, 2, 3])), s
        if kind is Kind.BIAS:
            b = js.small_ints((1, s.shape[1]), int(rng.integers(1 << 30)))
            return Op(kind, param=self.add_input("b", b, ((), s.spec[1]))), s
        if kind in (Kind.RELU, Kind.ABS):
            return Op(kind), s
        if kind is Kind.TRANSPOSE:
            return Op(kind), replace(s, shape=s.shape[::-1], spec=s.spec[::-1])
        if kind is Kind.TAP:
            return Op(kind, out=s), s
        if kind is Kind.LOOP:
            axes = tuple(str(a) for a in rng.permutation(sorted(s.partial)))
            return Op(kind, axes, value=self.pick([2, 3])), replace(s, partial=frozenset())
        if kind in (Kind.PSUM, Kind.NESTED):
            axes = tuple(rng.permutation(sorted(s.partial)))
            if kind is Kind.PSUM and len(axes) == 2 and rng.random() < 0.3:
                axes = axes[:1]  # reduce over one axis now, the other later
            return Op(kind, axes), replace(s, partial=s.partial - set(axes))
        if kind in (Kind.RS_AG, Kind.BLUECONNECT, Kind.RS_KEEP):
            axes = tuple(str(a) for a in rng.permutation(sorted(s.partial)))
            if kind is Kind.BLUECONNECT and len(axes) < 2:
                return None
            dims = [d for d in (0, 1) if s.splits(d, axes if kind is Kind.BLUECONNECT else axes[:1])]
            if not dims:
                return None
            d = self.pick(dims)
            op = Op(kind, axes, d, gather=axes[0])
            if kind is Kind.RS_KEEP:
                shape, spec = s.with_dim(d, (*s.spec[d], axes[0]))
                return op, replace(s, shape=shape, spec=spec, partial=frozenset())
            return op, replace(s, partial=frozenset())
        if kind is Kind.SLICE:
            cuts = [(d, a) for d in (0, 1) for a in self.free(s) if s.splits(d, (a,))]
            if not cuts:
                return None
            d, a = self.pick(cuts)
            shape, spec = s.with_dim(d, (*s.spec[d], a))
            return Op(kind, (a,), d), replace(s, shape=shape, spec=spec)
        if kind is Kind.GATHER:
            d = self.pick([d for d in (0, 1) if s.spec[d]])
            shape, spec = s.with_dim(d, s.spec[d][:-1])
            return Op(kind, (s.spec[d][-1],), d), replace(s, shape=shape, spec=spec)
        raise AssertionError(kind)

    def close(self, s: State) -> tuple[list[Op], State]:
        """Ops that make a partial sum whole at the end of a chain."""
        ops = []
        while s.partial:
            got = self.op(s, self.pick([Kind.PSUM, Kind.PSUM, Kind.NESTED, Kind.RS_AG]))
            if got:
                ops.append(got[0])
                s = got[1]
        return ops, s

    def gradient_leaf(self) -> tuple[list[Op], State]:
        """A partial sum left open (a row-parallel matmul, then maybe linear ops), as a gradient's leaf is
        before its psum."""
        s = self.start(contraction_sharded=True)
        op, s = self.op(s, Kind.MATMUL)
        ops = [op]
        for _ in range(int(self.rng.integers(0, 2))):
            got = self.op(s, self.pick([Kind.SCALE, Kind.MATMUL, Kind.SUM]))
            if got:
                ops.append(got[0])
                s = got[1]
        return ops, s

    def leaf(self) -> tuple[list[Op], State]:
        """A chain of 1-4 right ops from a fresh input; it may end as a partial sum (``close`` ends it)."""
        s = self.start()
        ops: list[Op] = []
        for _ in range(int(self.rng.integers(1, 5))):
            opts = self.options(s)
            weights = np.array([w for _, w in opts], float)
            for _ in range(8):
                got = self.op(s, opts[int(self.rng.choice(len(opts), p=weights / weights.sum()))][0])
                if got:
                    ops.append(got[0])
                    s = got[1]
                    break
        return ops, s


BUGS = (Finding.MISSING_REDUCTION, Finding.WRONG_AXIS, Finding.NONLINEAR_ON_PARTIAL, Finding.BIAS_ON_PARTIAL,
        Finding.DOUBLE_COUNT, Finding.SWAPPED_OUTPUTS, Finding.SHARDED_AFTER_SLICE, Finding.PARTIAL_TO_OUTPUT,
        Finding.PERMUTED_SLICE)


def draw(index: int, seed: int, bug_rate: float) -> Program:
    """Program ``index`` of the corpus: the first draw whose sums stay exact, with or without a bug (whether
    and which decided first, so every class gets its share)."""
    first = np.random.default_rng([seed, index])
    want = BUGS[index % len(BUGS)] if first.random() < bug_rate else None  # the classes in turn
    for attempt in range(2000):
        rng = np.random.default_rng([seed, index, attempt])
        order = tuple(range(16)) if rng.random() < 0.85 else tuple(int(i) for i in rng.permutation(16))
        prog = Program(index, AXIS_NAMES[int(rng.integers(len(AXIS_NAMES)))],
                       MESHES[int(rng.integers(len(MESHES)))], order)
        gen = Gen(rng, prog)
        pytree = rng.random() < 0.2  # every leaf a gradient: partial sums reduced together
        for _ in range(int(rng.choice([1, 2, 3], p=[0.4, 0.35, 0.25])) + pytree):
            ops, s = gen.gradient_leaf() if pytree else gen.leaf()
            prog.leaves.append(ops)
            prog.outs.append(s)
        partial = [i for i, s in enumerate(prog.outs) if s.partial]
        common = frozenset.intersection(*[prog.outs[i].partial for i in partial]) if partial else frozenset()
        if len(partial) > 1 and common and rng.random() < 0.8:  # one psum of the tuple over their common axes
            axes = tuple(str(a) for a in rng.permutation(sorted(common)))
            for i in partial:
                prog.leaves[i].append(Op(Kind.PSUM, axes, joint=True))
                prog.outs[i] = replace(prog.outs[i], partial=prog.outs[i].partial - common)
        for i, s in enumerate(prog.outs):
            more, prog.outs[i] = gen.close(s)
            prog.leaves[i] += more
        if not any(op.kind in REDUCE or op.kind is Kind.RS_KEEP for ops in prog.leaves for op in ops):
            continue  # no partial sum made whole anywhere: not a chain worth auditing
        if want is not None and not inject(rng, prog, want):
            continue  # this bug does not fit this program: draw again
        if bound(prog) < EXACT:
            return prog
    raise RuntimeError(f"program {index}: no exact draw in 2000 attempts")


def inject(rng: np.random.Generator, prog: Program, finding: Finding) -> bool:
    """Put a bug of class ``finding`` in ``prog`` (its reference stays the intended math); False when none fits."""
    a, b = prog.names
    sites: list[tuple[Finding, Any]] = []
    for i, ops in enumerate(prog.leaves):
        for j, op in enumerate(ops):
            if op.kind is Kind.LOOP:
                sites.append((Finding.DOUBLE_COUNT, (i, j)))
                sites.append((Finding.NONLINEAR_ON_PARTIAL, (i, j)))
            if op.kind in (Kind.PSUM, Kind.NESTED, Kind.RS_AG) and not op.joint:
                sites.append((Finding.MISSING_REDUCTION, (i, j)))
                sites.append((Finding.NONLINEAR_ON_PARTIAL, (i, j)))
                sites.append((Finding.BIAS_ON_PARTIAL, (i, j)))
                other = b if op.axes[0] == a else a
                if len(op.axes) == 1 and (op.kind is not Kind.RS_AG or replay(prog, i, j).splits(op.dim, (other,))):
                    sites.append((Finding.WRONG_AXIS, (i, j)))
            if j and replay(prog, i, j).partial:
                sites.append((Finding.PARTIAL_TO_OUTPUT, (i, j)))
            if op.kind is Kind.SLICE:
                sites.append((Finding.PERMUTED_SLICE, (i, j)))
            if op.kind is Kind.GATHER:  # the major axis of two, or an axis the dimension is not sharded over
                held = replay(prog, i, j).spec[op.dim]
                wrong = held[0] if len(held) == 2 else next((x for x in (a, b) if x not in held), "")
                if wrong and wrong != op.axes[0] and prog.shape[0] == prog.shape[1]:  # the same block size
                    sites.append((Finding.WRONG_AXIS, (i, j, wrong)))
    for i, s in enumerate(prog.outs):
        free = [x for x in (a, b) if x not in s.used()]
        if free:
            sites.append((Finding.DOUBLE_COUNT, (i, free[0])))
        for d in (0, 1):
            if free and s.splits(d, free[:1]):
                sites.append((Finding.SHARDED_AFTER_SLICE, (i, d, free[0])))
    local = [tuple(s.local(d) for d in (0, 1)) for s in prog.outs]
    for i in range(len(prog.outs)):
        for k in range(i + 1, len(prog.outs)):
            if local[i] == local[k] and prog.outs[i].spec != prog.outs[k].spec:
                sites.append((Finding.SWAPPED_OUTPUTS, (i, k)))
    where = [w for f, w in sites if f is finding]
    loops = [w for w in where if finding is Finding.DOUBLE_COUNT and isinstance(w[1], int)]
    if loops and rng.random() < 0.5:
        where = loops  # an accumulator summed in its loop, as often as an extra psum
    if not where:
        return False
    site = where[int(rng.integers(len(where)))]
    prog.bug = finding
    if finding is Finding.SWAPPED_OUTPUTS:
        prog.swap = site
        return True
    if finding is Finding.DOUBLE_COUNT and len(site) == 2 and isinstance(site[1], int):
        prog.leaves[site[0]][site[1]] = replace(prog.leaves[site[0]][site[1]], inside=True)
        return True
    if finding in (Finding.DOUBLE_COUNT, Finding.SHARDED_AFTER_SLICE):
        i = site[0]
        s = prog.outs[i]
        if finding is Finding.DOUBLE_COUNT:
            prog.leaves[i].append(Op(Kind.PSUM, (site[1],)))
        else:  # slice to this device's block along a free axis, sum it, and never sum the blocks over that axis
            _, d, axis = site
            prog.leaves[i] += [Op(Kind.SLICE, (axis,), d), Op(Kind.SUM, dim=d)]
            shape, spec = s.with_dim(d, (), 1)
            prog.outs[i] = replace(s, shape=shape, spec=spec, partial=frozenset())
            if s.spec[d]:
                prog.leaves[i].append(Op(Kind.PSUM, s.spec[d]))
        return True
    i, j = site[:2]
    op = prog.leaves[i][j]
    if finding is Finding.WRONG_AXIS and op.kind is Kind.GATHER:
        prog.leaves[i][j] = replace(op, axes=(site[2],))
    elif finding is Finding.PERMUTED_SLICE:
        prog.leaves[i][j] = replace(op, shift=1)
    elif finding is Finding.MISSING_REDUCTION:
        del prog.leaves[i][j]
    elif finding is Finding.WRONG_AXIS:
        other = b if op.axes[0] == a else a
        if op.kind is Kind.RS_AG and rng.random() < 0.5:
            prog.leaves[i][j] = replace(op, gather=other)  # scattered over one axis, gathered over the other
        else:
            prog.leaves[i][j] = replace(op, axes=(other,), gather=other)
    elif finding is Finding.PARTIAL_TO_OUTPUT:  # a partial sum returned mid-chain, declared as if summed
        prog.leaves[i].insert(j, Op(Kind.TAP, out=replace(replay(prog, i, j), partial=frozenset())))
    elif finding is Finding.NONLINEAR_ON_PARTIAL:
        prog.leaves[i].insert(j, Op(Kind.RELU if rng.random() < 0.5 else Kind.ABS))
    else:  # a bias of the partial sum's width, added before the psum
        before = replay(prog, i, j)
        bias = js.small_ints((1, before.shape[1]), int(rng.integers(1 << 30)))
        name = f"b{len(prog.inputs)}"
        prog.inputs[name] = bias
        prog.in_specs[name] = pspec(((), before.spec[1]))
        prog.leaves[i].insert(j, Op(Kind.BIAS, param=name))
    return True


def replay(prog: Program, leaf: int, upto: int) -> State:
    """The global shape and sharding of leaf ``leaf`` before its op ``upto`` (from the inputs' specs)."""
    x = prog.inputs[prog.starts[leaf]]
    spec = prog.in_specs[prog.starts[leaf]]
    axes = [() if e is None else (e,) if isinstance(e, str) else tuple(e) for e in (*spec, None, None)[:2]]
    s = State(x.shape, (axes[0], axes[1]), sizes=prog.sizes)
    for op in prog.leaves[leaf][:upto]:
        if op.kind is Kind.MATMUL:
            w = prog.in_specs[op.param]
            wc = () if w[1] is None else (w[1],) if isinstance(w[1], str) else tuple(w[1])
            s = replace(s, shape=(s.shape[0], prog.inputs[op.param].shape[1]), spec=(s.spec[0], wc),
                        partial=s.partial | set(s.spec[1]))
        elif op.kind is Kind.SUM:
            shape, sp = s.with_dim(op.dim, (), 1)
            s = replace(s, shape=shape, spec=sp, partial=s.partial | set(s.spec[op.dim]))
        elif op.kind in (Kind.SLICE, Kind.RS_KEEP):
            shape, sp = s.with_dim(op.dim, (*s.spec[op.dim], op.axes[0]))
            s = replace(s, shape=shape, spec=sp, partial=s.partial - set(op.axes) if op.kind is Kind.RS_KEEP
                        else s.partial)
        elif op.kind is Kind.GATHER:
            shape, sp = s.with_dim(op.dim, s.spec[op.dim][:-1])
            s = replace(s, shape=shape, spec=sp)
        elif op.kind is Kind.TRANSPOSE:
            s = replace(s, shape=s.shape[::-1], spec=s.spec[::-1])
        elif op.kind in REDUCE:
            s = replace(s, partial=s.partial - set(op.axes))
    return s


# ---------------------------------------------------------------- the two meanings of a program


def global_op(op: Op, v: np.ndarray, inputs: dict, magnitude: bool = False) -> np.ndarray:
    """``op`` on the global value (collectives: the identity). ``magnitude``: on absolute values, an upper
    bound of every partial sum's size."""
    k = op.kind
    if k is Kind.MATMUL:
        w = inputs[op.param]
        return v @ (np.abs(w) if magnitude else w)
    if k is Kind.SUM:
        return v.sum(op.dim, keepdims=True)
    if k is Kind.SCALE:
        return v * (abs(op.value) if magnitude else op.value)
    if k is Kind.BIAS:
        return v + (np.abs(inputs[op.param]) if magnitude else inputs[op.param])
    if k is Kind.RELU:
        return v if magnitude else np.maximum(v, 0)
    if k is Kind.ABS:
        return np.abs(v)
    if k is Kind.TRANSPOSE:
        return v.T
    if k is Kind.LOOP:
        return v * op.value
    return v


def reference(prog: Program, inputs: dict) -> tuple:
    """The intended outputs: each leaf's ops on global numpy values (int64), the leaves in declared order,
    then the taps (leaf by leaf, in op order)."""
    outs, taps = [], []
    ints = {k: a.astype(np.int64) for k, a in inputs.items()}
    for i, ops in enumerate(prog.leaves):
        v = ints[prog.starts[i]]
        for op in ops:
            v = global_op(op, v, ints)
            if op.kind is Kind.TAP:
                taps.append(v.astype(np.float32))
        outs.append(v.astype(np.float32))
    return (*outs, *taps)


def bound(prog: Program) -> int:
    """The largest absolute value any intermediate or partial sum can take, bugs' over-counts aside."""
    top = 0
    inputs = {k: np.abs(a).astype(np.int64) for k, a in prog.inputs.items()}
    for i, ops in enumerate(prog.leaves):
        v = inputs[prog.starts[i]]
        for op in ops:
            v = global_op(op, v, inputs, magnitude=True)
            top = max(top, int(v.max(initial=0)))
    return top


def local_op(op: Op, v, env: dict):
    """``op`` on one device's block, inside shard_map."""
    lax, k = jax.lax, op.kind
    if k is Kind.MATMUL:
        return v @ env[op.param]
    if k is Kind.SUM:
        return jnp.sum(v, axis=op.dim, keepdims=True)
    if k is Kind.SCALE:
        return v * op.value
    if k is Kind.BIAS:
        return v + env[op.param]
    if k is Kind.RELU:
        return jnp.maximum(v, 0)
    if k is Kind.ABS:
        return jnp.abs(v)
    if k is Kind.TRANSPOSE:
        return v.T
    if k is Kind.TAP:
        return v
    if k is Kind.PSUM:
        return lax.psum(v, op.axes)
    if k is Kind.NESTED:
        for a in op.axes:
            v = lax.psum(v, a)
        return v
    if k is Kind.LOOP:
        def trip(_, acc):
            return lax.psum(acc + v, op.axes) if op.inside else acc + lax.psum(v, op.axes)

        return lax.fori_loop(0, op.value, trip, jnp.zeros_like(v))
    d = op.dim
    if k in (Kind.RS_AG, Kind.RS_KEEP):
        v = lax.psum_scatter(v, op.axes[0], scatter_dimension=d, tiled=True)
        if len(op.axes) > 1:
            v = lax.psum(v, op.axes[1:])
        return v if k is Kind.RS_KEEP else lax.all_gather(v, op.gather, axis=d, tiled=True)
    if k is Kind.BLUECONNECT:
        first, second = op.axes
        v = lax.psum_scatter(v, first, scatter_dimension=d, tiled=True)
        v = lax.psum_scatter(v, second, scatter_dimension=d, tiled=True)
        return lax.all_gather(lax.all_gather(v, second, axis=d, tiled=True), first, axis=d, tiled=True)
    if k is Kind.SLICE:
        n = v.shape[d] // jax.lax.axis_size(op.axes[0])
        block = lax.axis_index(op.axes[0])
        if op.shift:
            block = (block + op.shift) % lax.axis_size(op.axes[0])
        return lax.dynamic_slice_in_dim(v, block * n, n, axis=d)
    if k is Kind.GATHER:
        return lax.all_gather(v, op.axes[0], axis=d, tiled=True)
    raise AssertionError(k)


def build(prog: Program):
    """The jitted program, its argument (a dict of sharded inputs) and its mesh."""
    mesh = js.Mesh(np.array(jax.devices())[list(prog.order)].reshape(prog.shape), prog.names)

    def body(env):
        vals, taps = [env[name] for name in prog.starts], {}

        def run(i: int, start: int, stop: int) -> None:
            for j in range(start, stop):
                vals[i] = local_op(prog.leaves[i][j], vals[i], env)
                if prog.leaves[i][j].kind is Kind.TAP:
                    taps[i, j] = vals[i]

        stops = [next((j for j, op in enumerate(ops) if op.joint), len(ops)) for ops in prog.leaves]
        for i, stop in enumerate(stops):  # each leaf up to its op of the tuple's psum
            run(i, 0, stop)
        joint = [i for i, ops in enumerate(prog.leaves) if stops[i] < len(ops)]
        if joint:
            summed = jax.lax.psum(tuple(vals[i] for i in joint), prog.leaves[joint[0]][stops[joint[0]]].axes)
            for i, v in zip(joint, summed, strict=True):
                vals[i] = v
        for i, ops in enumerate(prog.leaves):
            run(i, stops[i] + (i in joint), len(ops))
        if prog.swap:
            i, k = prog.swap
            vals[i], vals[k] = vals[k], vals[i]
        return (*vals, *(taps[key] for key in sorted(taps)))

    out_specs = tuple(pspec(s.spec) for s in (*prog.outs, *prog.taps))
    fn = js.smap(body, mesh, (dict(prog.in_specs),), out_specs)
    args = ({k: js.put(mesh, a, prog.in_specs[k]) for k, a in prog.inputs.items()},)
    return fn, args, mesh


# ---------------------------------------------------------------- the audit, three ways


WAYS = ("function", "stablehlo", "hlo")


def audit_api() -> SimpleNamespace | None:
    """``p2smt.audit`` and ``p2smt.audit_text`` when this p2smt has them (the audit layer), else None."""
    try:
        import p2smt

        found = {name: getattr(p2smt, name) for name in ("audit", "audit_text")}
    except (ImportError, AttributeError):
        return None
    for name, value in found.items():
        if isinstance(value, ModuleType):  # the subpackage p2smt.audit shadowing the function of that name
            found[name] = getattr(value, name, None)
    return SimpleNamespace(**found) if all(callable(v) for v in found.values()) else None


def audit_three_ways(audit_mod, fn, args, mesh, texts: dict, system: str, nodes: int, order,
                     specs: tuple = ()) -> dict:
    """Each way's verdict name (REFUSED for a P2Error, ERROR: TYPE for anything else) and report. The compiled
    HLO declares no output shardings: its outputs are judged against ``specs`` (the out_specs, as --expect)."""
    from p2smt.auditing import Expected
    from p2smt.errors import P2Error

    device_order = list(order) if list(order) != sorted(order) else None
    expect = {i: Expected(tuple(tuple(axes) for axes in spec)) for i, spec in enumerate(specs)}
    calls = {"function": lambda: audit_mod.audit(fn, *args, system=system, nodes=nodes, mesh=mesh),
             "stablehlo": lambda: audit_mod.audit_text(texts["mlir"], system=system, nodes=nodes,
                                                       device_order=device_order),
             "hlo": lambda: audit_mod.audit_text(texts["hlo"], system=system, nodes=nodes,
                                                 device_order=device_order, expect=expect,
                                                 mesh=[(str(n), int(s)) for n, s in mesh.shape.items()])}
    out = {}
    for way, call in calls.items():
        start = time.perf_counter()
        try:
            report = call()
            out[way] = {"verdict": report.verdict.name, "report": report.to_json()}
        except P2Error as e:
            out[way] = {"verdict": "REFUSED", "error": str(e)}
        except Exception as e:  # noqa: BLE001  (a crash is a result of the differential, reported as such)
            out[way] = {"verdict": f"ERROR: {type(e).__name__}", "error": str(e)[:500]}
        out[way]["seconds"] = round(time.perf_counter() - start, 3)
    return out


NEGATIVE = {"FINDINGS", "COUNTEREXAMPLE"}


def tabulate(rows: list[dict]) -> dict:
    """Per way: verdicts on right and wrong programs, wrong PROVED, wrong findings, refusal rate; agreement."""
    table: dict[str, Any] = {}
    audited = [r for r in rows if "audit" in r]
    for way in WAYS:
        right = Counter(r["audit"][way]["verdict"] for r in audited if r["correct"])
        wrong = Counter(r["audit"][way]["verdict"] for r in audited if not r["correct"])
        n_right = sum(right.values())
        not_proved = sum(n for v, n in right.items() if v != "PROVED" and v not in NEGATIVE)
        table[way] = {"on_correct": dict(right), "on_wrong": dict(wrong),
                      "wrong_proved": [r["index"] for r in audited if not r["correct"]
                                       and r["audit"][way]["verdict"] == "PROVED"],
                      "wrong_findings": [r["index"] for r in audited if r["correct"]
                                         and r["audit"][way]["verdict"] in NEGATIVE],
                      "refused_or_unverified_on_correct": not_proved,
                      "refusal_rate_on_correct": round(not_proved / n_right, 4) if n_right else None}
    agree = [r for r in audited if len({r["audit"][w]["verdict"] for w in WAYS}) == 1]
    table["agreement"] = {"all_three": len(agree), "of": len(audited),
                          "disagreeing": [r["index"] for r in audited if r not in agree]}
    for way in WAYS:
        bugs: dict[str, Counter] = {}
        for r in audited:
            if r["bug"]:
                bugs.setdefault(r["bug"], Counter())[
                    f"{'wrong' if not r['correct'] else 'benign'}:{r['audit'][way]['verdict']}"] += 1
        table[way]["by_bug"] = {k: dict(v) for k, v in sorted(bugs.items())}
    table["audit_seconds"] = round(sum(r["audit"][w]["seconds"] for r in audited for w in WAYS), 1)
    return table


def print_table(table: dict) -> None:
    print(f"{'way':>10} {'wrong PROVED':>13} {'wrong FINDINGS':>15} {'not proved (correct)':>22}  verdicts on "
          "correct | on wrong")
    for way in WAYS:
        t = table[way]
        print(f"{way:>10} {len(t['wrong_proved']):>13} {len(t['wrong_findings']):>15} "
              f"{t['refused_or_unverified_on_correct']:>12} ({t['refusal_rate_on_correct']})  "
              f"{t['on_correct']} | {t['on_wrong']}")
    a = table["agreement"]
    print(f"all three ways agree on {a['all_three']} of {a['of']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for NNN.mlir, NNN.hlo, programs.json, summary.json")
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bug-rate", type=float, default=1 / 3)
    ap.add_argument("--system", default="a100-4x16")
    ap.add_argument("--nodes", type=int, default=1)
    ap.add_argument("--no-audit", action="store_true", help="generation and ground truth only")
    args = ap.parse_args(argv)
    if args.count < 1 or not 0 <= args.bug_rate <= 1:
        print("audit_differential: --count must be positive and --bug-rate in [0, 1]", file=sys.stderr)
        return 2
    js.require_devices()
    audit_mod = None if args.no_audit else audit_api()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, start, generator_errors = [], time.perf_counter(), []
    for index in range(args.count):
        prog = draw(index, args.seed, args.bug_rate)
        fn, fargs, mesh = build(prog)
        lowered = fn.lower(*fargs)
        compiled = lowered.compile()
        texts = {"mlir": lowered.as_text(), "hlo": compiled.as_text()}
        for suffix, text in texts.items():
            (out / f"{index:03d}.{suffix}").write_text(text)
        got = jax.tree.map(np.asarray, compiled(*fargs))
        correct = js.same(got, reference(prog, prog.inputs))
        row = {"index": index, "axes": list(prog.names), "mesh": list(prog.shape), "device_order": list(prog.order),
               "leaves": prog.describe(), "joint_psum": list(prog.joint), "swap": list(prog.swap or ()),
               "out_specs": [str(pspec(s.spec)) for s in (*prog.outs, *prog.taps)],
               "bug": prog.bug.value if prog.bug else None, "correct": correct}
        if prog.bug is None and not correct:
            generator_errors.append(index)  # a program meant right computed something else: the generator's bug
        if audit_mod is not None:
            row["audit"] = audit_three_ways(audit_mod, fn, fargs, mesh, texts, args.system, args.nodes, prog.order,
                                            tuple(s.spec for s in (*prog.outs, *prog.taps)))
        rows.append(row)
    seconds = round(time.perf_counter() - start, 1)
    split = Counter("correct" if r["correct"] else "wrong" for r in rows)
    benign = [r["index"] for r in rows if r["bug"] and r["correct"]]
    summary: dict[str, Any] = {"programs": len(rows), "correct": split["correct"], "wrong": split["wrong"],
                               "bugs": dict(Counter(r["bug"] for r in rows if r["bug"])),
                               "benign_bugs": benign, "generator_errors": generator_errors,
                               "seconds": seconds, "audited": audit_mod is not None}
    print(f"{len(rows)} programs in {seconds} s: {split['correct']} correct, {split['wrong']} wrong "
          f"({len(benign)} with a bug that left the numbers right); bugs {summary['bugs']}")
    if audit_mod is not None:
        summary["table"] = tabulate(rows)
        print_table(summary["table"])
    else:
        print("not audited (--no-audit, or p2smt.audit is not importable here): generation and ground truth only")
    (out / "programs.json").write_text(json.dumps(rows, indent=1) + "\n")
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    if generator_errors:
        print(f"generator error: programs {generator_errors} carry no bug but compute something else",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
