"""How collectives move a value's layout, once their device groups are named as mesh axes (``meshaxes.py``).

``reduced`` is the ordered tuple of mesh axes whose devices form each group (major first, as the group lists
its members), or None when the groups are no union of mesh axes: then nothing is claimed.
"""

from __future__ import annotations

from collections.abc import Sequence

from p2smt.auditing.layout import AxisState, FindingKind, Layout
from p2smt.auditing.rules import Op, Outcome, _finding

__all__ = ["all_gather", "all_reduce", "opaque", "reduce_scatter"]

R, S, P, V, U = (AxisState.REPLICATED, AxisState.SHARDED, AxisState.PARTIAL, AxisState.VARYING,
                 AxisState.UNKNOWN)


def _not_mesh(op: Op, ins: Sequence[Layout]) -> Outcome:
    out = []
    for x in ins:
        for a in op.axes:
            x = x.lost(a, f"{op.short} at {op.location} over groups that are no union of mesh axes")
        out.append(x)
    return Outcome(out)


def all_reduce(op: Op, ins: Sequence[Layout], reduced: tuple[str, ...] | None, is_sum: bool,
               constant: bool = False) -> Outcome:
    """A sum over ``reduced`` turns a partial sum into the value, replicated (and a shard into the sum of the
    value's blocks); summing a replicated value scales it by the axis's size, a finding unless it is a
    constant (``constant``: ``psum(1, axis)`` counts devices)."""
    if reduced is None:
        return _not_mesh(op, ins)
    out, findings = [], []
    for x in ins:
        for a in reduced:
            s = x.state(a)
            if s is U:
                continue
            if not is_sum:
                if s is P:
                    findings.append(_finding(op, FindingKind.NONLINEAR_ON_PARTIAL, a,
                                             f"{op.short} at {op.location} takes a maximum (not a sum) of a "
                                             f"partial sum over {a}"))
                    x = x.lost(a, f"the finding at {op.location}")
                else:
                    x = _replicated_along(x, a)
                continue
            if s is S and a in x.mixed:
                findings.append(_finding(op, FindingKind.ADDED_TO_PARTIAL, a,
                                         f"{op.short} at {op.location} sums over {a} blocks that each had a value "
                                         f"replicated over {a} added: it is counted once per device along {a} (an "
                                         "accumulator or a bias summed again?)"))
                x = x.lost(a, f"the finding at {op.location}")
            elif s in (P, V, S):  # a shard's sum over a is the sum of the value's blocks: the same on every device
                x = _replicated_along(x, a)
            elif s is R and constant:  # psum(1, a): the axis's size
                continue
            elif s is R:
                findings.append(_finding(op, FindingKind.SUM_OF_REPLICATED, a,
                                         f"{op.short} at {op.location} sums over {a} a value already replicated "
                                         f"over {a}: the result is the value times the size of {a} (a reduction "
                                         "done twice, or over the wrong axis?)"))
                x = x.lost(a, f"the finding at {op.location}")
        out.append(x)
    return Outcome(out, findings)


def _replicated_along(x: Layout, axis: str) -> Layout:
    return Layout(tuple(tuple(a for a in axes if a != axis) for axes in x.dims), x.partial - {axis},
                  tuple(v for v in x.varying if v[0] != axis), x.unknown, x.mixed - {axis})


def reduce_scatter(op: Op, ins: Sequence[Layout], reduced: tuple[str, ...] | None, dim: int) -> Outcome:
    """A reduce-scatter over ``reduced`` along ``dim`` turns a partial sum into the value sharded along
    ``dim`` (the group's order is the shards' order)."""
    if reduced is None:
        return _not_mesh(op, ins)
    out, findings = [], []
    for x in ins:
        ok = all(x.state(a) is P for a in reduced)
        if ok:
            dims = list(x.dims)
            dims[dim] = dims[dim] + reduced
            x = x.keep(tuple(dims), x.partial - set(reduced))
        else:
            for a in reduced:
                s = x.state(a)
                if s is R:
                    findings.append(_finding(op, FindingKind.SUM_OF_REPLICATED, a,
                                             f"{op.short} at {op.location} sums over {a} a value already "
                                             f"replicated over {a}: each shard is its block of the value times the "
                                             f"size of {a}"))
                    x = x.lost(a, f"the finding at {op.location}")
                elif s is not U:
                    x = x.lost(a, f"{op.short} at {op.location} scatters a value that is not a partial sum over {a}")
        out.append(x)
    return Outcome(out, findings)


def all_gather(op: Op, ins: Sequence[Layout], reduced: tuple[str, ...] | None, dim: int) -> Outcome:
    """An all-gather over ``reduced`` along ``dim`` turns a value sharded along ``dim`` over those axes (as its
    minor-most shard axes, in the group's order) into the value, replicated over them."""
    if reduced is None:
        return _not_mesh(op, ins)
    out, findings = [], []
    for i, x in enumerate(ins):
        axes = x.dims[dim] if dim < len(x.dims) else ()
        k = len(reduced)
        stacked = _stacked(op, x, i, reduced, dim)
        if stacked is not None:
            x = stacked
        elif axes[len(axes) - k:] == reduced and all(x.state(a) is S for a in reduced):
            dims = list(x.dims)
            dims[dim] = axes[:len(axes) - k]
            x = x.keep(tuple(dims))
        else:
            for a in reduced:
                s = x.state(a)
                if s is R:
                    findings.append(_finding(op, FindingKind.GATHER_OF_REPLICATED, a,
                                             f"{op.short} at {op.location} gathers over {a} a value replicated "
                                             f"over {a}: the result is copies of it, not a whole value"))
                    x = x.lost(a, f"the finding at {op.location}")
                elif s is not U:
                    x = x.lost(a, f"{op.short} at {op.location} gathers along dimension {dim} a value that is "
                                  f"not sharded there over {a} in the group's order")
        out.append(x)
    return Outcome(out, findings)


def _stacked(op: Op, x: Layout, i: int, reduced: tuple[str, ...], dim: int) -> Layout | None:
    """JAX's untiled all_gather (a new dimension of one element, gathered): the members' blocks stacked along
    ``dim`` in the group's order. When every gathered axis shards one other dimension as its minor-most axes
    (and no block had a replicated value added), the stack is a reshaped whole along them: replicated over them,
    that dimension sharded by the rest. None otherwise (the tiled rule then decides, and loses what it cannot
    follow)."""
    m = 1
    for a in reduced:
        m *= op.attrs.get("axis_sizes", {}).get(a, 0)
    if (i >= len(op.operand_shapes) or dim >= len(x.dims) or x.dims[dim] or op.operand_shapes[i][dim] != 1
            or op.result_shapes[i][dim] != m or not all(x.state(a) is S for a in reduced)
            or x.mixed & set(reduced)):  # a sum of the stack would count each block's added value once per member
        return None
    homes = {x.sharded_dim(a) for a in reduced}
    if len(homes) != 1:
        return None
    (e,) = homes
    axes = x.dims[e]
    if axes[len(axes) - len(reduced):] != reduced:
        return None
    dims = list(x.dims)
    dims[e] = axes[:len(axes) - len(reduced)]
    return x.keep(tuple(dims))


def opaque(op: Op, ins: Sequence[Layout]) -> Outcome:
    """A collective the audit does not follow (all-to-all, collective-permute, …): every axis unknown."""
    out = []
    for shape in op.result_shapes:
        lay = Layout(((),) * len(shape))
        for a in op.axes:
            lay = lay.lost(a, f"{op.short} at {op.location} (a collective the audit does not follow)")
        out.append(lay)
    return Outcome(out)
