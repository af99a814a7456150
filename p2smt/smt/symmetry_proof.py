"""Z3 certificate that the DSL's communicators are size-generic, the lemma the ``symmetric`` engine uses.

For every instruction shape (slice i, InsideGroup | Parallel(j) | Master(j), both master scopes) on
up to 4 levels below the root, every pattern of trivial levels (size 1) and every size from 2 to
``max_size`` of the others, Z3 proves from the concrete rule (P², MLSys 2022 §3: a group varies the
levels j+1..i, or i+1..n for InsideGroup; Master keeps only the devices at index 0 below the slice,
and with the global scope above the ancestor too; rank order is the device order; groups of one
device are not formed) that

* a shape forms groups at these sizes exactly when it forms them at size 2, and
* two shapes form the same groups at these sizes exactly when they do at size 2,

so the deduplicated candidate instructions, their order and which of them share groups are those of
the size-2 instance. The rule is restated here on devices' digits; this module imports neither
``p2smt.semantics`` nor the DSL's group builder.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import z3

from p2smt.model.hierarchy import MasterScope


@dataclass(frozen=True)
class Shape:
    """Slice ``level`` (1-based below the root, 0 = root) with ``form`` and ancestor ``ancestor``."""

    level: int
    form: str  # "InsideGroup" | "Parallel" | "Master"
    ancestor: int | None = None


def shapes(n: int) -> list[Shape]:
    """Every instruction shape on the root and ``n`` levels below it."""
    out = []
    for i in range(n + 1):
        out.append(Shape(i, "InsideGroup"))
        out += [Shape(i, form, j) for form in ("Parallel", "Master") for j in range(i)]
    return out


def _varying(shape: Shape, n: int) -> range:
    return range(shape.level + 1, n + 1) if shape.ancestor is None else range(shape.ancestor + 1, shape.level + 1)


def _all(*terms):
    """Conjunction of Python bools (evaluated) or Z3 terms (a formula)."""
    if all(isinstance(t, bool) for t in terms):
        return all(terms)
    return z3.And(*terms) if terms else z3.BoolVal(True)


def _member(shape: Shape, x: list, scope: MasterScope, n: int):
    """Is device ``x`` (digits of levels 1..n) in a group of the shape's communicator set?"""
    if shape.form != "Master":
        return True
    zero = [x[lv - 1] == 0 for lv in range(shape.level + 1, n + 1)]
    if scope == "global":
        zero += [x[lv - 1] == 0 for lv in range(1, shape.ancestor + 1)]
    return _all(*zero)


def together(shape: Shape, x: list, y: list, sizes: list, scope: MasterScope, n: int):
    """Devices x and y are members of one group of the shape (the concrete rule; a group of one
    device is not formed, so some varying level must have more than one index)."""
    vary = set(_varying(shape, n))
    same = [x[lv - 1] == y[lv - 1] for lv in range(1, n + 1) if lv not in vary]
    wide = [sizes[lv - 1] > 1 for lv in vary]
    if not wide:
        return False
    width = any(wide) if all(isinstance(w, bool) for w in wide) else z3.Or(*wide)
    return _all(_member(shape, x, scope, n), _member(shape, y, scope, n), *same, width)


def _valid(x: list, sizes: list):
    return z3.And(*[z3.And(0 <= d, d < s) for d, s in zip(x, sizes)])


@dataclass(frozen=True)
class Certificate:
    """What was proved: levels, size bound, shapes and checked pairs; empty ``failures`` = proved."""

    levels: int
    max_size: int
    shapes: int
    queries: int
    failures: tuple[str, ...]

    @property
    def proved(self) -> bool:
        return not self.failures


def _sizes(pattern: tuple[bool, ...], max_size: int) -> tuple[list, list]:
    """Symbolic sizes (non-trivial levels in 2..max_size) and their range constraints."""
    sizes, ranges = [], []
    for lv, trivial in enumerate(pattern, start=1):
        if trivial:
            sizes.append(1)
        else:
            s = z3.Int(f"s{lv}")
            sizes.append(s)
            ranges.append(z3.And(2 <= s, s <= max_size))
    return sizes, ranges


def _refuted(formula) -> bool:
    """True when Z3 proves ``formula`` unsatisfiable."""
    solver = z3.Solver()
    solver.add(formula)
    result = solver.check()
    if result == z3.unknown:
        raise RuntimeError(f"Z3 could not decide a size-genericity query: {solver.reason_unknown()}")
    return result == z3.unsat


def certify(levels: int = 4, max_size: int = 8, scope: MasterScope = "per-ancestor") -> Certificate:
    """Prove both facts for every shape, shape pair and trivial-level pattern on 1..``levels`` levels.

    The size-2 instance is evaluated exhaustively (digits 0 and 1). Per pattern, two Z3 queries
    over all sizes in 2..``max_size`` and all devices must be unsat: (1) some shape without groups at
    size 2 forms one, or two shapes with equal groups at size 2 differ; (2) a size-2 witness, whose
    digits are valid devices at every size, stops showing a group of a shape or a difference of two."""
    failures: list[str] = []
    queries = count = 0
    for n in range(1, levels + 1):
        all_shapes = shapes(n)
        count += len(all_shapes)
        x = [z3.Int(f"x{lv}") for lv in range(1, n + 1)]
        y = [z3.Int(f"y{lv}") for lv in range(1, n + 1)]
        devices2 = list(itertools.product((0, 1), repeat=n))
        for pattern in itertools.product((False, True), repeat=n):
            small = [1 if t else 2 for t in pattern]
            real, ranges = _sizes(pattern, max_size)
            pairs = [(a, b) for a in devices2 for b in devices2 if all(d < s for d, s in zip(a + b, small * 2))]
            signature = {sh: frozenset(p for p in pairs if together(sh, p[0], p[1], small, scope, n))
                         for sh in all_shapes}
            same, kept = [], []
            for sh in all_shapes:
                if not signature[sh]:
                    same.append(together(sh, x, y, real, scope, n))
                else:
                    wx, wy = min(signature[sh])
                    kept.append(z3.Not(together(sh, list(wx), list(wy), real, scope, n)))
            for a, b in itertools.combinations(all_shapes, 2):
                if signature[a] == signature[b]:
                    same.append(together(a, x, y, real, scope, n) != together(b, x, y, real, scope, n))
                else:
                    wx, wy = min(signature[a] ^ signature[b])
                    kept.append(together(a, list(wx), list(wy), real, scope, n) ==
                                together(b, list(wx), list(wy), real, scope, n))
            queries += 2
            if not _refuted(z3.And(*ranges, _valid(x, real), _valid(y, real), z3.Or(*same, False))):
                failures.append(f"{n} levels, trivial {pattern}: a size-2 coincidence fails at a larger size")
            if not _refuted(z3.And(*ranges, z3.Or(*kept, False))):
                failures.append(f"{n} levels, trivial {pattern}: a size-2 difference vanishes at a larger size")
    return Certificate(levels, max_size, count, queries, tuple(failures))
