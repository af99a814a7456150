"""Distinct values, repeats and row reductions of numpy arrays: the vectorized check's building blocks.

Pure functions of their arguments (``semantics.vectorized`` decides the rules with them); each answer is exact,
a hash only orders the work and every class it finds is checked by comparison.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["FEW_CLASSES", "by_rows", "classes", "constant_runs", "distinct_parts", "distinct_rows", "repeats"]

MIX = np.random.default_rng(20261202).integers(1, 2**63, size=4096, dtype=np.uint64) | np.uint64(1)
"""Odd random multipliers of a row's entries in its hash (``distinct_parts``)."""


def constant_runs(values: np.ndarray, width: int) -> bool:
    """Whether ``values`` is constant in each run of ``width`` (the first run first)."""
    if not (values[:width] == values[0]).all():
        return False
    runs = values.reshape(-1, width)
    return bool((runs == runs[:, :1]).all())


def repeats(values: np.ndarray, width: int) -> bool:
    """Whether ``values`` repeats with period ``width`` (the second run first: most states that do not repeat
    differ there)."""
    if not np.array_equal(values[width : 2 * width], values[:width]):
        return False
    return bool((values.reshape(-1, width) == values[:width]).all())


def by_rows(ufunc: np.ufunc, a: np.ndarray) -> np.ndarray:
    """``ufunc.reduce(a, axis=1)``, column by column when rows are short (numpy's reduction along a short last
    axis costs several times more per entry)."""
    if a.shape[1] > 16:
        return ufunc.reduce(a, axis=1)
    out = a[:, 0].copy()
    for j in range(1, a.shape[1]):
        ufunc(out, a[:, j], out=out)
    return out


FEW_CLASSES = 8
"""Up to this many distinct values are found by comparisons (a pass per value over the entries left), more by
sorting (``np.unique``, several times slower on tens of thousands of entries)."""


def classes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of the first entry of each distinct value, each entry's index into them) of a 1-d array; the
    values in order of first occurrence up to ``FEW_CLASSES`` of them, else in ``np.unique``'s order."""
    inverse = np.zeros(len(values), np.int64)
    first = [0]
    rest = np.flatnonzero(values != values[0])
    while len(rest):
        if len(first) == FEW_CLASSES:
            _, found, inverse = np.unique(values, return_index=True, return_inverse=True)
            return found, inverse.reshape(-1)
        at = int(rest[0])
        same = values[rest] == values[at]
        inverse[rest[same]] = len(first)
        first.append(at)
        rest = rest[~same]
    return np.array(first, dtype=np.int64), inverse


def distinct_rows(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first row index of each distinct row, each row's distinct index): a hash of each row, checked exactly."""
    return distinct_parts([keys])


def distinct_parts(parts: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``distinct_rows`` of the side-by-side concatenation of ``parts`` (arrays of as many rows), without
    building it: a hash of each row summed part by part, checked exactly part by part."""
    n = len(parts[0])
    if n == 1:
        return np.zeros(1, np.int64), np.zeros(1, np.int64)
    h, at = np.zeros(n, np.uint64), 0
    with np.errstate(over="ignore"):
        for part in parts:
            width = part.shape[1]
            mix = MIX[at : at + width]
            if len(mix) < width:
                mix = np.resize(MIX, at + width)[at:] ^ np.arange(at, at + width, dtype=np.uint64)
            h += by_rows(np.add, part.astype(np.uint64) * mix)
            at += width
    first, inverse = classes(h)
    if not all(np.array_equal(part[first][inverse], part) for part in parts):  # a collision: decide exactly
        keys = np.concatenate([part.astype(np.int64) for part in parts], axis=1)
        _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
    return first, inverse
