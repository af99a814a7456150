"""Integers that are the same affine function of each device's mesh coordinates (``axis_index`` and what JAX
computes from it), so that a slice at ``axis_index(a) * size`` is known to take the device's own block.

``partition_id`` is a device's mesh position in row-major order (a mesh whose device ids are in order);
JAX derives ``axis_index`` from it by a division and a remainder, then scales it into an offset. Each step is
exact here only where it is exact for every device; otherwise the value is not tracked (None).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Affine", "evaluate"]


@dataclass(frozen=True)
class Affine:
    """``const + Σ coeff · coordinate(axis)`` on every device."""

    coeffs: tuple[tuple[str, int], ...]
    const: int = 0

    def bounds(self, sizes: Mapping[str, int]) -> tuple[int, int]:
        lo = self.const + sum(min(0, k * (sizes[a] - 1)) for a, k in self.coeffs)
        hi = self.const + sum(max(0, k * (sizes[a] - 1)) for a, k in self.coeffs)
        return lo, hi

    def scaled(self, k: int) -> Affine:
        return Affine(tuple((a, c * k) for a, c in self.coeffs if c * k), self.const * k)

    def plus(self, other: Affine, sign: int = 1) -> Affine:
        coeffs = dict(self.coeffs)
        for a, c in other.coeffs:
            coeffs[a] = coeffs.get(a, 0) + sign * c
        return Affine(tuple((a, c) for a, c in coeffs.items() if c), self.const + sign * other.const)


def partition_id(axes: tuple[tuple[str, int], ...]) -> Affine:
    """A device's row-major position on the mesh."""
    coeffs, stride = [], 1
    for name, size in reversed(axes):
        coeffs.append((name, stride))
        stride *= size
    return Affine(tuple(reversed(coeffs)))


def _divide(x: Affine, c: int, sizes: Mapping[str, int]) -> Affine | None:
    """``x // c`` where the terms not divisible by ``c`` and the constant stay in [0, c) on every device."""
    if c <= 0 or any(k < 0 for _, k in x.coeffs) or x.const < 0:
        return None
    minor = Affine(tuple((a, k) for a, k in x.coeffs if k % c), x.const)
    if minor.bounds(sizes)[1] >= c:
        return None
    return Affine(tuple((a, k // c) for a, k in x.coeffs if k % c == 0))


def _remainder(x: Affine, n: int, sizes: Mapping[str, int]) -> Affine | None:
    """``x % n`` where the terms that are no multiple of ``n`` stay in [0, n) on every device."""
    if n <= 0 or any(k < 0 for _, k in x.coeffs) or x.const < 0:
        return None
    rest = Affine(tuple((a, k) for a, k in x.coeffs if k % n), x.const)
    return rest if rest.bounds(sizes)[1] < n else None


_COMPARE = {"EQ": lambda lo, hi, c: 1 if lo == hi == c else 0 if c < lo or c > hi else None,
            "NE": lambda lo, hi, c: 0 if lo == hi == c else 1 if c < lo or c > hi else None,
            "LT": lambda lo, hi, c: 1 if hi < c else 0 if lo >= c else None,
            "GE": lambda lo, hi, c: 1 if lo >= c else 0 if hi < c else None,
            "GT": lambda lo, hi, c: 1 if lo > c else 0 if hi <= c else None,
            "LE": lambda lo, hi, c: 1 if hi <= c else 0 if lo > c else None}


def evaluate(kind: str, args: list[Affine | None], sizes: Mapping[str, int], direction: str = "") -> Affine | None:
    """The affine value of an integer op on affine operands, where it is exact (else None)."""
    if kind == "select" and args and args[0] is not None and not args[0].coeffs:
        return args[1] if args[0].const else args[2]
    if kind in ("and", "or"):
        consts = [a.const for a in args if a is not None and not a.coeffs]
        if kind == "and" and 0 in consts or kind == "or" and any(consts):
            return Affine((), 0 if kind == "and" else 1)
    if any(a is None for a in args):
        return None
    if kind in ("and", "or") and all(not a.coeffs for a in args):
        return Affine((), int(bool(args[0].const) and bool(args[1].const) if kind == "and"
                              else bool(args[0].const) or bool(args[1].const)))
    if kind in ("convert", "copy", "reshape", "broadcast_in_dim"):
        return args[0]
    if kind == "add":
        return args[0].plus(args[1])
    if kind == "subtract":
        return args[0].plus(args[1], -1)
    if kind == "multiply":
        a, b = args
        if not b.coeffs:
            return a.scaled(b.const)
        if not a.coeffs:
            return b.scaled(a.const)
        return None
    if kind in ("divide", "remainder"):
        a, b = args
        if b.coeffs:
            return None
        return (_divide if kind == "divide" else _remainder)(a, b.const, sizes)
    if kind == "compare" and direction in _COMPARE:
        a, b = args
        if b.coeffs:
            return None
        lo, hi = a.bounds(sizes)
        truth = _COMPARE[direction](lo, hi, b.const)
        return None if truth is None else Affine((), truth)
    if kind == "select":
        p, a, b = args
        if p.coeffs:
            return None
        return a if p.const else b
    return None
