"""How each StableHLO op moves a value's layout (``layout.py``), as pure functions of plain values.

A rule takes the op (``Op``: its name, location, shapes and the attributes it needs, read by ``walk.py``) and
its operands' layouts, and gives its results' layouts and any findings. Every rule is sound for the axes it
claims: where it cannot say what a value is along an axis, that axis becomes unknown with the op named.
Any pure op keeps a value replicated along an axis where all its operands are (``generic``), so ops the audit
does not know only lose what they touch.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from p2smt.auditing.layout import AxisState, Finding, FindingKind, Layout

__all__ = ["RULES", "Op", "Outcome", "apply", "generic"]

R, S, P, V, U = (AxisState.REPLICATED, AxisState.SHARDED, AxisState.PARTIAL, AxisState.VARYING,
                 AxisState.UNKNOWN)


@dataclass(frozen=True)
class Op:
    """An op as the rules see it: ``attrs`` holds plain Python values (ints, tuples, strings)."""

    name: str
    location: str
    axes: tuple[str, ...]  # the manual mesh axes in force
    operand_shapes: tuple[tuple[int, ...], ...]
    result_shapes: tuple[tuple[int, ...], ...]
    attrs: dict = field(default_factory=dict, hash=False, compare=False)

    @property
    def short(self) -> str:
        return self.name.split(".", 1)[-1]


@dataclass
class Outcome:
    """The results' layouts and the findings of one op."""

    results: list[Layout]
    findings: list[Finding] = field(default_factory=list)


def _finding(op: Op, kind: FindingKind, axis: str, message: str) -> Finding:
    return Finding(kind, message, op.short, op.location, axis)


def generic(op: Op, ins: Sequence[Layout], why: str | None = None) -> Outcome:
    """Any pure op: replicated along an axis where every operand is, unknown along the others."""
    out = []
    for shape in op.result_shapes:
        lay = Layout(((),) * len(shape))
        for a in op.axes:
            if any(x.state(a) is not R for x in ins):
                lay = lay.lost(a, why or f"{op.short} at {op.location}")
        out.append(lay)
    return Outcome(out)


def _merge_dims(op: Op, ins: Sequence[Layout], rank: int) -> tuple[tuple[tuple[str, ...], ...], set[str]]:
    """The result's dims of an elementwise op, and the axes its operands shard differently (to lose)."""
    dims, clash = [], set()
    for d in range(rank):
        seen = {x.dims[d] for x in ins if d < len(x.dims) and x.dims[d]}
        if len(seen) > 1:
            clash |= {a for axes in seen for a in axes}
            dims.append(())
        else:
            dims.append(next(iter(seen), ()))
    return tuple(dims), clash


LINEAR_UNARY = frozenset({"negate", "convert", "copy", "real", "imag", "sdy.sharding_constraint"})
LINEAR_BINARY = frozenset({"add", "subtract"})


def elementwise(op: Op, ins: Sequence[Layout]) -> Outcome:
    """Elementwise ops: shards meet shards along the same dimension; a partial sum survives only linear ops
    (negate, convert, add of partial sums, a product or quotient by a replicated factor, a select on a
    replicated predicate)."""
    rank = len(op.result_shapes[0])
    if op.short in LINEAR_BINARY and len(ins) == 2 and (ins[0].zero or ins[1].zero) \
            and op.operand_shapes[0] == op.operand_shapes[1] == op.result_shapes[0]:
        return Outcome([ins[0] if ins[1].zero else ins[1]])  # x + 0, 0 + x, x - 0, 0 - x: x's layout
    dims, clash = _merge_dims(op, ins, rank)
    findings: list[Finding] = []
    additive = op.short in LINEAR_BINARY or op.short == "select"
    mixed = frozenset().union(*(x.mixed for x in ins)) | {
        a for a in op.axes
        if additive and any(x.state(a) is S for x in ins)
        and any(x.state(a) is R and i not in op.attrs.get("zeros", ()) for i, x in enumerate(ins)
                if i or op.short != "select")}
    out = Layout(dims, mixed=frozenset(a for a in mixed if any(a in d for d in dims)))
    kind = op.short
    for a in op.axes:
        states = [x.state(a) for x in ins]
        why = next((x.why(a) for x in ins if x.state(a) in (U, V)), "")
        if U in states:
            out = out.lost(a, why)
            continue
        if a in clash:
            out = out.lost(a, f"{kind} at {op.location} combines operands sharded differently along {a}")
            continue
        partial = [i for i, s in enumerate(states) if s is P]
        if V in states:
            out = out.lost(a, why) if partial else out.varies(a, why)
            continue
        if not partial:
            continue
        if any(s is S for s in states):
            out = out.lost(a, f"{kind} at {op.location} combines a partial sum and a shard along {a}")
            continue
        linear = (
            (kind in LINEAR_UNARY and op.attrs.get("linear", True))
            or (kind in LINEAR_BINARY and len(partial) == len(ins))
            or (kind == "multiply" and len(partial) == 1)
            or (kind == "divide" and partial == [0])
            or (kind == "select" and 0 not in partial and len(partial) == 2)
        )
        if linear:
            out = out.keep(partial=out.partial | {a})
            continue
        if kind in LINEAR_BINARY or (kind == "select" and 0 not in partial):
            findings.append(_finding(op, FindingKind.ADDED_TO_PARTIAL, a,
                                     f"{kind} at {op.location} combines a partial sum over {a} with a value "
                                     f"replicated over {a}: the replicated value is counted once per device "
                                     f"along {a} when the partial sums are added"))
        else:
            findings.append(_finding(op, FindingKind.NONLINEAR_ON_PARTIAL, a,
                                     f"{kind} at {op.location} is applied to a partial sum over {a} (not yet "
                                     f"reduced): {kind} of the parts is not {kind} of the sum; a psum over {a} "
                                     "is missing before it"))
        out = out.lost(a, f"the finding at {op.location}")
    return Outcome([out], findings)


def broadcast_in_dim(op: Op, ins: Sequence[Layout]) -> Outcome:
    """Operand dimension i becomes result dimension ``dims[i]``; a sharded dimension of one element that is
    stretched is not a shard any more."""
    (x,), mapping = ins, op.attrs["broadcast_dimensions"]
    rank = len(op.result_shapes[0])
    dims: list[tuple[str, ...]] = [()] * rank
    out_lost = []
    for i, target in enumerate(mapping):
        axes = x.dims[i]
        if axes and op.operand_shapes[0][i] != op.result_shapes[0][target]:
            out_lost += list(axes)
        else:
            dims[target] = axes
    out = x.keep(tuple(dims))
    for a in out_lost:
        out = out.lost(a, f"broadcast_in_dim at {op.location} stretches a dimension sharded over {a}")
    return Outcome([out])


def transpose(op: Op, ins: Sequence[Layout]) -> Outcome:
    (x,), perm = ins, op.attrs["permutation"]
    return Outcome([x.keep(tuple(x.dims[p] for p in perm))])


def _reshape_groups(src: Sequence[int], dst: Sequence[int]) -> list[tuple[list[int], list[int]]] | None:
    """Pair the dimensions of a reshape into groups of equal element counts (ones dropped), or None."""
    groups, i, j = [], 0, 0
    src = [(k, s) for k, s in enumerate(src) if s != 1]
    dst = [(k, s) for k, s in enumerate(dst) if s != 1]
    while i < len(src) and j < len(dst):
        a, b = [src[i][0]], [dst[j][0]]
        pa, pb = src[i][1], dst[j][1]
        i, j = i + 1, j + 1
        while pa != pb:
            if pa < pb and i < len(src):
                a.append(src[i][0])
                pa *= src[i][1]
                i += 1
            elif pb < pa and j < len(dst):
                b.append(dst[j][0])
                pb *= dst[j][1]
                j += 1
            else:
                return None
        groups.append((a, b))
    return groups if i == len(src) and j == len(dst) else None


def reshape(op: Op, ins: Sequence[Layout]) -> Outcome:
    """A reshape keeps a shard where the sharded dimension is the most major of its group (merged with minor
    dimensions, or split with the shard index on the first part)."""
    (x,) = ins
    src, dst = op.operand_shapes[0], op.result_shapes[0]
    dims: list[tuple[str, ...]] = [()] * len(dst)
    groups = _reshape_groups(src, dst)
    out_lost: list[str] = []
    sharded = [d for d, axes in enumerate(x.dims) if axes]
    for d in sharded:
        group = next((g for g in groups or [] if d in g[0]), None)
        if group is None or group[0][0] != d:
            out_lost += list(x.dims[d])
        else:
            dims[group[1][0]] = x.dims[d]
    out = x.keep(tuple(dims))
    for a in out_lost:
        out = out.lost(a, f"reshape at {op.location} moves a dimension sharded over {a}")
    return Outcome([out])


def dot_general(op: Op, ins: Sequence[Layout]) -> Outcome:
    """A contraction: a dimension sharded over ``a`` on both sides and contracted gives a partial sum over
    ``a``; free and batch dimensions carry their shards; a partial sum times a replicated factor stays one."""
    lhs, rhs = ins
    lb, rb = op.attrs["lhs_batch"], op.attrs["rhs_batch"]
    lc, rc = op.attrs["lhs_contract"], op.attrs["rhs_contract"]
    lfree = [d for d in range(len(lhs.dims)) if d not in lb and d not in lc]
    rfree = [d for d in range(len(rhs.dims)) if d not in rb and d not in rc]
    order = [("b", i) for i in range(len(lb))] + [("l", d) for d in lfree] + [("r", d) for d in rfree]
    dims: list[tuple[str, ...]] = [()] * len(order)
    findings: list[Finding] = []
    out = Layout(tuple(dims))
    partial: set[str] = set()
    for a in op.axes:
        sl, sr = lhs.state(a), rhs.state(a)
        why = next((x.why(a) for x in ins if x.state(a) in (U, V)), "")
        if U in (sl, sr) or V in (sl, sr):
            out = out.lost(a, why) if U in (sl, sr) or P in (sl, sr) else out.varies(a, why)
            continue
        if sl is P and sr is P:
            findings.append(_finding(op, FindingKind.NONLINEAR_ON_PARTIAL, a,
                                     f"dot_general at {op.location} multiplies two partial sums over {a}: the "
                                     "product of the parts is not the product of the sums"))
            out = out.lost(a, f"the finding at {op.location}")
            continue
        dl, dr = lhs.sharded_dim(a), rhs.sharded_dim(a)
        if (sl is P and sr is S) or (sr is P and sl is S):
            out = out.lost(a, f"dot_general at {op.location} multiplies a partial sum by a shard along {a}")
            continue
        if sl is P or sr is P:
            partial.add(a)
            continue
        if dl is None and dr is None:
            continue
        lpos = (("c", lc.index(dl)) if dl in lc else ("b", lb.index(dl)) if dl in lb else ("l", dl)) \
            if dl is not None else None
        rpos = (("c", rc.index(dr)) if dr in rc else ("b", rb.index(dr)) if dr in rb else ("r", dr)) \
            if dr is not None else None
        same_axes = dl is None or dr is None or lhs.dims[dl] == rhs.dims[dr]
        if lpos and rpos and lpos == rpos and lpos[0] in ("c", "b") and same_axes:
            if lpos[0] == "c":
                partial.add(a)
            else:
                i = order.index(("b", lpos[1]))
                dims[i] = lhs.dims[dl]
            continue
        if lpos and rpos:
            out = out.lost(a, f"dot_general at {op.location} has both operands sharded over {a} on dimensions "
                              "that do not meet")
            continue
        side, pos = (lpos, "l") if lpos else (rpos, "r")
        if side[0] == "c":
            findings.append(_finding(op, FindingKind.ONE_SIDED_CONTRACTION, a,
                                     f"dot_general at {op.location} contracts a dimension sharded over {a} on "
                                     f"one operand only: each device multiplies its block by the whole other "
                                     "operand"))
            out = out.lost(a, f"the finding at {op.location}")
            continue
        if side[0] == "b":
            out = out.lost(a, f"dot_general at {op.location} has a batch dimension sharded over {a} on one "
                              "operand only")
            continue
        i = order.index((pos, side[1]))
        dims[i] = (lhs if pos == "l" else rhs).dims[side[1]]
    gone = {u for u, _ in out.unknown}
    mixed = frozenset(a for a in lhs.mixed | rhs.mixed if a not in gone)
    out = Layout(tuple(d if not any(x in gone for x in d) else () for d in dims), frozenset(partial) - gone,
                 out.varying, out.unknown, mixed & {a for d in dims for a in d})
    return Outcome([out], findings)


def reduce(op: Op, ins: Sequence[Layout]) -> Outcome:
    """A reduction over dimensions: summing (from zero) a dimension sharded over ``a`` gives a partial sum over
    ``a``; a maximum (or another reduction, or a sum from another start, counted once per device) of it gives a
    value that varies along ``a``."""
    n = len(op.result_shapes)
    if n != 1 or len(ins) != 2:
        return generic(op, ins)
    x, init = ins
    reduced = op.attrs["dimensions"]
    is_sum = op.attrs.get("sum", False) and op.attrs.get("zero_init", False)
    dims = tuple(axes for d, axes in enumerate(x.dims) if d not in reduced)
    out = x.keep(dims)
    findings: list[Finding] = []
    for a in op.axes:
        if init.state(a) is not R:
            out = out.lost(a, f"reduce at {op.location} starts from a value that is not replicated over {a}")
            continue
        d = x.sharded_dim(a)
        if is_sum:
            if d is not None and d in reduced:
                out = out.keep(partial=out.partial | {a})
            continue
        if x.state(a) is P:
            findings.append(_finding(op, FindingKind.NONLINEAR_ON_PARTIAL, a,
                                     f"reduce at {op.location} takes a maximum or another non-sum reduction of a "
                                     f"partial sum over {a}"))
            out = out.lost(a, f"the finding at {op.location}")
        elif d is not None and d in reduced:
            out = out.varies(a, f"reduce at {op.location} reduces (not a sum) a dimension sharded over {a}, "
                                "so each device holds its own block's result")
    return Outcome([out], findings)


def slice_(op: Op, ins: Sequence[Layout]) -> Outcome:
    """A static slice keeps a shard only where it takes the whole local dimension."""
    x = ins[0]
    starts, limits, strides = op.attrs["start"], op.attrs["limit"], op.attrs["strides"]
    out = x
    for d, axes in enumerate(x.dims):
        whole = starts[d] == 0 and limits[d] == op.operand_shapes[0][d] and strides[d] == 1
        if axes and not whole:
            for a in axes:
                out = out.lost(a, f"slice at {op.location} cuts a dimension sharded over {a}")
    return Outcome([out])


def _own_block(offset, size: int, full: int, axis_sizes) -> tuple[str, ...] | None:
    """The mesh axes (major first) whose coordinates make ``offset`` the start of each device's own block of
    ``size`` out of ``full`` (``offset = size · row-major index over them``), or None."""
    if offset is None or offset.const != 0 or not offset.coeffs or any(k <= 0 for _, k in offset.coeffs):
        return None
    ranked = sorted(offset.coeffs, key=lambda t: -t[1])
    if ranked[-1][1] != size:
        return None
    for (_, k), (b, k2) in itertools.pairwise(ranked):
        if k != k2 * axis_sizes[b]:
            return None
    count = 1
    for a, _ in ranked:
        count *= axis_sizes[a]
    return tuple(a for a, _ in ranked) if size * count == full else None


def dynamic_slice(op: Op, ins: Sequence[Layout]) -> Outcome:
    """A slice at computed offsets. At ``size · axis_index`` of a value replicated over those axes it takes
    each device's own block (a shard); at other offsets that differ along ``a`` the result varies along ``a``."""
    x, offsets = ins[0], ins[1:]
    sizes = op.attrs["slice_sizes"]
    affine = op.attrs.get("offsets") or [None] * len(offsets)
    axis_sizes = op.attrs.get("axis_sizes", {})
    full = op.operand_shapes[0]
    out = x
    taken: dict[int, tuple[str, ...]] = {}
    for d, axes in enumerate(x.dims):
        if sizes[d] == full[d]:
            continue
        own = _own_block(affine[d], sizes[d], full[d], axis_sizes)
        if own is not None and all(x.state(a) is R for a in own):
            taken[d] = own  # the device's own block of its block: a finer shard, the outer axes kept
            continue
        for a in axes:
            out = out.lost(a, f"dynamic_slice at {op.location} cuts a dimension sharded over {a}")
    for a in op.axes:
        moving = [i for i, o in enumerate(offsets) if o.state(a) is not R and sizes[i] != full[i]]
        if not moving or moving == [d for d, axes in taken.items() if a in axes]:
            continue
        taken = {d: axes for d, axes in taken.items() if a not in axes}
        if any(offsets[i].state(a) is U for i in moving) or out.state(a) is P:
            out = out.lost(a, f"dynamic_slice at {op.location} at an offset that is not the same on every device "
                              f"along {a}")
        else:
            out = out.varies(a, f"dynamic_slice at {op.location} at an offset that depends on the device's position "
                                f"along {a}, not at its own block")
    if taken:
        dims = list(out.dims)
        for d, axes in taken.items():
            dims[d] = dims[d] + axes
        out = out.keep(tuple(dims))
    return Outcome([out])


def concatenate(op: Op, ins: Sequence[Layout]) -> Outcome:
    """Concatenation along an unsharded dimension is elementwise for layouts (the same as ``add`` for partial
    sums: every piece must be one)."""
    d = op.attrs["dimension"]
    out = elementwise(Op("stablehlo.add", op.location, op.axes, op.operand_shapes, op.result_shapes), ins)
    lay = out.results[0]
    for a in lay.dims[d]:
        lay = lay.lost(a, f"concatenate at {op.location} along a dimension sharded over {a}")
    return Outcome([lay], out.findings)


def identity(op: Op, ins: Sequence[Layout]) -> Outcome:
    """Ops whose results are their operands (an optimization barrier, a sharding annotation)."""
    return Outcome(list(ins))


RULES: dict[str, Callable[[Op, Sequence[Layout]], Outcome]] = {
    "stablehlo.broadcast_in_dim": broadcast_in_dim,
    "stablehlo.transpose": transpose,
    "stablehlo.reshape": reshape,
    "stablehlo.dot_general": dot_general,
    "stablehlo.dot": dot_general,
    "stablehlo.reduce": reduce,
    "stablehlo.slice": slice_,
    "stablehlo.dynamic_slice": dynamic_slice,
    "stablehlo.concatenate": concatenate,
    "stablehlo.optimization_barrier": identity,
    "sdy.sharding_constraint": identity,
}
ELEMENTWISE = frozenset({
    "abs", "add", "and", "atan2", "cbrt", "ceil", "clamp", "compare", "convert", "copy", "cosine", "divide",
    "exponential", "exponential_minus_one", "floor", "imag", "is_finite", "log", "log_plus_one", "logistic",
    "maximum", "minimum", "multiply", "negate", "not", "or", "popcnt", "power", "real", "reduce_precision",
    "remainder", "round_nearest_afz", "round_nearest_even", "rsqrt", "select", "shift_left",
    "shift_right_arithmetic", "shift_right_logical", "sign", "sine", "sqrt", "subtract", "tan", "tanh", "xor",
    "bitcast_convert", "erf", "count_leading_zeros",
})
for _name in ELEMENTWISE:
    RULES.setdefault(f"stablehlo.{_name}", elementwise)
RULES["chlo.erf"] = elementwise


def apply(op: Op, ins: Sequence[Layout]) -> Outcome:
    """The rule for ``op`` (``generic`` for ops without one)."""
    rule = RULES.get(op.name)
    return rule(op, ins) if rule is not None else generic(op, ins)
