"""Term helpers that fold Python constants before calling Z3, so fixed choices build small formulas.

Every helper accepts Python ``bool``/``int`` values or Z3 expressions; a result is a Python value
whenever all inputs that matter are Python values.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import z3
from z3 import z3core as _c

Term = Any  # bool | int | z3.ExprRef

# Direct constructors: the z3py wrappers re-check and coerce sorts on every call, which dominates the
# cost of building formulas here; arguments below are always Z3 terms of matching sorts.
_RESULT = {z3.BitVecNumRef: z3.BitVecRef, z3.IntNumRef: z3.ArithRef}


def _array(items: Sequence[z3.ExprRef]):
    arr = (z3.Ast * len(items))()
    for i, v in enumerate(items):
        arr[i] = v.ast
    return arr


def _mk_or(items: Sequence[z3.ExprRef]) -> z3.BoolRef:
    ctx = items[0].ctx
    return z3.BoolRef(_c.Z3_mk_or(ctx.ref(), len(items), _array(items)), ctx)


def _mk_and(items: Sequence[z3.ExprRef]) -> z3.BoolRef:
    ctx = items[0].ctx
    return z3.BoolRef(_c.Z3_mk_and(ctx.ref(), len(items), _array(items)), ctx)


def _mk_not(a: z3.ExprRef) -> z3.BoolRef:
    return z3.BoolRef(_c.Z3_mk_not(a.ctx.ref(), a.ast), a.ctx)


def _mk_ite(c: z3.ExprRef, a: z3.ExprRef, b: z3.ExprRef) -> z3.ExprRef:
    cls = type(a)
    cls = _RESULT.get(cls, cls)
    return cls(_c.Z3_mk_ite(c.ctx.ref(), c.ast, a.ast, b.ast), c.ctx)


def _mk_eq(a: z3.ExprRef, b: z3.ExprRef) -> z3.BoolRef:
    return z3.BoolRef(_c.Z3_mk_eq(a.ctx.ref(), a.ast, b.ast), a.ctx)


def bv_or(a: z3.ExprRef, b: z3.ExprRef) -> z3.BitVecRef:
    return z3.BitVecRef(_c.Z3_mk_bvor(a.ctx.ref(), a.ast, b.ast), a.ctx)


def bv_and(a: z3.ExprRef, b: z3.ExprRef) -> z3.BitVecRef:
    return z3.BitVecRef(_c.Z3_mk_bvand(a.ctx.ref(), a.ast, b.ast), a.ctx)


def bv_not(a: z3.ExprRef) -> z3.BitVecRef:
    return z3.BitVecRef(_c.Z3_mk_bvnot(a.ctx.ref(), a.ast), a.ctx)


class Numerals:
    """Bit-vector numerals of one width, made once each (formulas reuse a few constants many times)."""

    def __init__(self, width: int, ctx: z3.Context):
        self.width = width
        self.ctx = ctx
        self.cache: dict[int, z3.BitVecNumRef] = {}

    def __call__(self, value: int) -> z3.BitVecNumRef:
        found = self.cache.get(value)
        if found is None:
            found = self.cache[value] = z3.BitVecVal(value, self.width, self.ctx)
        return found


def is_const(v: Term) -> bool:
    return isinstance(v, (bool, int))


def ite(c: Term, a: Term, b: Term, num=None) -> Term:
    """If-then-else; ``num`` lifts Python integers to the arithmetic sort in use (bit-vector or Int)."""
    if c is True:
        return a
    if c is False:
        return b
    if a is b or (is_const(a) and is_const(b) and a == b and type(a) is type(b)):
        return a
    if a is True and b is False:
        return c
    if a is False and b is True:
        return _mk_not(c)
    if num is not None:
        if is_const(a) and not isinstance(a, bool):
            a = num(a)
        if is_const(b) and not isinstance(b, bool):
            b = num(b)
    if isinstance(a, bool):
        a = z3.BoolVal(a, c.ctx)
    if isinstance(b, bool):
        b = z3.BoolVal(b, c.ctx)
    if isinstance(a, z3.ExprRef) and isinstance(b, z3.ExprRef):
        return _mk_ite(c, a, b)
    return z3.If(c, a, b)


def or_(items: Iterable[Term]) -> Term:
    out = []
    for v in items:
        if v is True:
            return True
        if v is not False:
            out.append(v)
    if not out:
        return False
    return out[0] if len(out) == 1 else _mk_or(out)


def and_(items: Iterable[Term]) -> Term:
    out = []
    for v in items:
        if v is False:
            return False
        if v is not True:
            out.append(v)
    if not out:
        return True
    return out[0] if len(out) == 1 else _mk_and(out)


def not_(a: Term) -> Term:
    return (not a) if isinstance(a, bool) else _mk_not(a)


def implies(a: Term, b: Term) -> Term:
    return or_((not_(a), b))


def eq(a: Term, b: Term) -> Term:
    if is_const(a) and is_const(b):
        return a == b
    if a is b:
        return True
    if isinstance(a, bool):
        return b if a else _mk_not(b)
    if isinstance(b, bool):
        return a if b else _mk_not(a)
    if isinstance(a, z3.ExprRef) and isinstance(b, z3.ExprRef):
        return _mk_eq(a, b)
    return a == b


def _numeral_like(v: int, other: z3.ExprRef) -> z3.ExprRef:
    """A numeral of ``other``'s sort, made once per context (the cache lives on the context)."""
    bv = isinstance(other, z3.BitVecRef)
    ctx = other.ctx
    cache = ctx.__dict__.setdefault("_p2smt_numerals", {})
    width = _c.Z3_get_bv_sort_size(ctx.ref(), _c.Z3_get_sort(ctx.ref(), other.ast)) if bv else 0
    key = (width, v)
    found = cache.get(key)
    if found is None:
        found = cache[key] = z3.BitVecVal(v, width, ctx) if bv else z3.IntVal(v, ctx)
    return found


def _terms(a: Term, b: Term) -> tuple[z3.ExprRef, z3.ExprRef]:
    """Both operands as Z3 terms: a Python integer becomes a numeral of the other's sort."""
    if is_const(a):
        return _numeral_like(a, b), b
    if is_const(b):
        return a, _numeral_like(b, a)
    return a, b


def _compare(a: Term, b: Term, strict: bool) -> Term:
    a, b = _terms(a, b)
    ctx = a.ctx
    if isinstance(a, z3.BitVecRef):
        mk = _c.Z3_mk_bvslt if strict else _c.Z3_mk_bvsle
    else:
        mk = _c.Z3_mk_lt if strict else _c.Z3_mk_le
    return z3.BoolRef(mk(ctx.ref(), a.ast, b.ast), ctx)


def le(a: Term, b: Term) -> Term:
    if is_const(a) and is_const(b):
        return a <= b
    if a is b:
        return True
    return _compare(a, b, False)


def lt(a: Term, b: Term) -> Term:
    if is_const(a) and is_const(b):
        return a < b
    if a is b:
        return False
    return _compare(a, b, True)


def add(items: Iterable[Term]) -> Term:
    const = 0
    out = []
    for v in items:
        if is_const(v):
            const += int(v)
        else:
            out.append(v)
    if not out:
        return const
    first = out[0]
    ctx = first.ctx
    if isinstance(first, z3.BitVecRef):
        if const:
            out.append(z3.BitVecVal(const, first.size(), ctx))
        acc = first.ast
        for v in out[1:]:
            acc = _c.Z3_mk_bvadd(ctx.ref(), acc, v.ast)
        return z3.BitVecRef(acc, ctx) if len(out) > 1 else first
    if const:
        out.append(z3.IntVal(const, ctx))
    if len(out) == 1:
        return first
    return z3.ArithRef(_c.Z3_mk_add(ctx.ref(), len(out), _array(out)), ctx)


def sub(a: Term, b: Term) -> Term:
    if is_const(a) and is_const(b):
        return a - b
    if is_const(b) and b == 0:
        return a
    a, b = _terms(a, b)
    ctx = a.ctx
    if isinstance(a, z3.BitVecRef):
        return z3.BitVecRef(_c.Z3_mk_bvsub(ctx.ref(), a.ast, b.ast), ctx)
    return z3.ArithRef(_c.Z3_mk_sub(ctx.ref(), 2, _array([a, b])), ctx)


def mul(c: int, a: Term) -> Term:
    if is_const(a):
        return c * a
    if c == 0:
        return 0
    if c == 1:
        return a
    return c * a


def div(a: Term, m: int) -> Term:
    """Integer division by a positive constant (exact whenever the divisibility rule holds)."""
    if is_const(a):
        return a // m
    return a if m == 1 else a / m


def divisible(a: Term, m: int) -> Term:
    if is_const(a):
        return a % m == 0
    return True if m == 1 else a % m == 0


def clamp(a: Term, lo: Term, hi: Term, num=None) -> Term:
    """min(max(a, lo), hi) for lo <= hi."""
    if is_const(a) and is_const(lo) and is_const(hi):
        return min(max(a, lo), hi)
    return ite(le(a, lo), lo, ite(le(hi, a), hi, a, num), num)


def at_most_one(items: Sequence[Term]) -> Term:
    """At most one of the Booleans holds (native cardinality constraint when symbolic)."""
    sym = [v for v in items if v is not False]
    trues = sum(1 for v in sym if v is True)
    if trues > 1:
        return False
    rest = [v for v in sym if v is not True]
    if not rest:
        return True
    if trues == 1:
        return and_(not_(v) for v in rest)
    if len(rest) == 1:
        return True
    if len(rest) == 2:
        return _mk_not(_mk_and(rest))
    ctx = rest[0].ctx
    return z3.BoolRef(_c.Z3_mk_atmost(ctx.ref(), len(rest), _array(rest), 1), ctx)


def all_equal(items: Sequence[Term]) -> Term:
    if not items:
        return True
    first = items[0]
    return and_(eq(first, v) for v in items[1:])
